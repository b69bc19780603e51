"""One writer per run directory, the samples a run recorded, unfinished runs (issue 43).

- The lock (csg/engine/runlock.py): a second train.py in a run directory is refused in one line naming the first, and
  changes nothing of it; a crashed holder leaves a stale file that the next run takes over; a planted link or
  FIFO is never followed; a file system without locks runs unlocked, with a warning; under torchrun every
  process hears rank 0's refusal.
- The manifest (csg/engine/samples.py): the ensemble is what ``samples/manifest.json`` records, never a listing of
  the folder; a recorded sample missing or changed is refused; a run from before manifests falls back on its
  metrics.json; a resume checks the files against the manifest and the checkpoint.
- Unfinished runs (scripts/evaluate_run.py): refused as Posterior.load refuses them, unless ``--partial``.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

from csg.engine.samples import SampleStore
from csg.errors import ConfigError
from csg.engine.rundir import LOCK, RunDirectory, RunLock
from tests.conftest import ROOT

SMALL = ["model.hidden=[16]", "trainer.epochs=2", "sampler.cycles=2", "sampler.explore=0",
         "sampler.samples_per_cycle=1", "trainer.device=cpu", "logger=none", "trainer.progress=false"]
# a run whose training items wait for a gate file: it holds its run directory until the test opens the gate
GATED = ["data=custom", "data._target_=tests.engine.test_run_lock.gated_blobs", "data.num_classes=3", "data.batch_size=16",
         "model=custom", "model._target_=tests.own_components.tiny_net", "sampler.cycles=2",
         "sampler.samples_per_cycle=1", "trainer.epochs=4", "logger=none", "trainer.progress=false",
         "trainer.device=cpu"]


class _Gated(Dataset):
    """``data``'s items, each served once ``gate`` exists (at most ``wait_s`` later: never a hang)."""

    def __init__(self, data, gate: str, wait_s: float):
        self.data, self.gate, self.wait_s = data, gate, wait_s

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        deadline = time.monotonic() + self.wait_s
        while not os.path.exists(self.gate):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the gate {self.gate} was not opened")
            time.sleep(0.01)
        inputs, label = self.data[index]
        return inputs, int(label)


def gated_blobs(gate: str, n: int = 48, classes: int = 3, dim: int = 4, seed: int = 0, wait_s: float = 240.0):
    """(train, test): Gaussian blobs whose training items wait for the file ``gate``."""
    from tests.own_components import blobs

    train, test = blobs(n=n, classes=classes, dim=dim, seed=seed)
    return _Gated(train, gate, wait_s), test


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished small run (in-process): two samples in samples/ with their manifest, checkpoint.pt, metrics.json,
    .hydra/config.yaml."""
    from csg.launch.run import run

    from omegaconf import OmegaConf

    run_dir = tmp_path_factory.mktemp("finished") / "run"
    cfg = compose(*SMALL)
    run(cfg, run_dir)
    (run_dir / ".hydra").mkdir()
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")  # Hydra's record, as train.py's run has it
    return run_dir


@pytest.fixture
def run_dir(finished, tmp_path) -> Path:
    """A copy of the finished run for one test to change."""
    return Path(shutil.copytree(finished, tmp_path / "run"))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "WANDB_"))}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return env


def _snapshot(directory: Path) -> dict[str, tuple[int, bytes] | None]:
    return {str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.read_bytes()) if p.is_file() else None
            for p in sorted(directory.rglob("*")) if not p.is_symlink() and not p.is_fifo()}


def _one_line(message: str, *fragments: str) -> None:
    assert "\n" not in message.strip() and "Traceback" not in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def _wait_for(condition, process: subprocess.Popen | None, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process ended ({process.returncode}) before {what}")
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)


def _holds(run_dir: Path, pid: int) -> bool:
    try:
        return json.loads((run_dir / LOCK).read_text()).get("pid") == pid
    except (OSError, ValueError):
        return False


# ----------------------------------------------------------------------------------------------------- the lock
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_second_train_py_in_the_run_dir_is_refused_naming_the_first_whose_results_stay_intact(tmp_path):
    run_dir, gate = tmp_path / "run", tmp_path / "gate"
    command = [sys.executable, str(ROOT / "train.py"), *GATED, f"+data.gate={gate}", f"hydra.run.dir={run_dir}"]
    with open(tmp_path / "first.out", "w") as out, open(tmp_path / "first.err", "w") as err:
        first = subprocess.Popen([*command, "seed=0"], cwd=tmp_path, stdout=out, stderr=err, env=_env())
    try:
        _wait_for(lambda: _holds(run_dir, first.pid), first, "lock taken by the first run")
        second = subprocess.run([*command, "seed=1"], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                                env=_env())
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert second.returncode == 2 and len(lines) == 1, second.stderr
        _one_line(lines[0], f"error: hydra.run.dir='{run_dir}' is not allowed: a run directory no other run is "
                  f"writing: train.py (pid {first.pid} on host {socket.gethostname()}, started ",
                  f"holds its lock {run_dir / LOCK}")
        pending = {p.name for p in run_dir.glob(".hydra.pending*")}
        assert pending <= {f".hydra.pending-{first.pid}"}  # the second's own record removed, the first's kept
        assert first.poll() is None  # undisturbed: still waiting at its gate
        gate.touch()
        assert first.wait(timeout=300) == 0, (tmp_path / "first.err").read_text()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    manifest = json.loads((run_dir / "samples" / "manifest.json").read_text())
    assert metrics["seed"] == 0 and metrics["ensemble"]["num_samples"] == 2
    assert [row["file"] for row in metrics["per_sample"]] == [entry["file"] for entry in manifest["samples"]]
    assert "seed=0" in (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert "seed=1" not in (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert "is not allowed" not in (run_dir / "train.log").read_text()  # the refusal is not in the first's log
    assert not (run_dir / LOCK).exists() and not list(run_dir.glob(".hydra.pending*"))


_HOLDER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from csg.engine.rundir import RunLock
lock = RunLock(sys.argv[2])
assert lock.acquire()
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.timeout(120)
def test_a_crashed_holder_leaves_a_stale_lock_that_the_next_run_takes_over(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "kept.txt").write_text("an earlier run's file\n")
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(ROOT), str(run_dir)], stdout=subprocess.PIPE,
                              text=True, env=_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        before = _snapshot(run_dir)
        with pytest.raises(ConfigError) as refused:
            with RunDirectory(run_dir) as directory:
                directory.lock()
        _one_line(str(refused.value), f"a run directory no other run is writing: python (pid {holder.pid} on host "
                  f"{socket.gethostname()}, started ", "holds its lock")
        assert _snapshot(run_dir) == before  # the refused command changed nothing
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: no clean-up runs
        holder.wait(timeout=60)
        holder.stdout.close()
    stale = _snapshot(run_dir)
    assert json.loads((run_dir / LOCK).read_text())["pid"] == holder.pid  # left behind, but no longer held
    with pytest.raises(ConfigError, match="a refusal after the lock"):
        with RunDirectory(run_dir) as directory:
            directory.lock()
            assert json.loads((run_dir / LOCK).read_text())["pid"] == os.getpid()
            raise ConfigError("x", 1, "a refusal after the lock")
    assert _snapshot(run_dir) == stale  # a refused command puts the stale file back as it was
    with RunDirectory(run_dir) as directory:
        directory.lock()
        directory.accept()
    assert not (run_dir / LOCK).exists() and (run_dir / "kept.txt").exists()  # a command that ran removes it


@pytest.mark.timeout(120)
def test_train_and_studies_in_process_are_refused_while_the_lock_is_held(run_dir, tmp_path):
    from csg.launch.run import run
    from studies.synthetic import run_study

    held = RunLock(run_dir)
    assert held.acquire()  # a lock belongs to its open file: this process's own second lock is refused too
    try:
        before = _snapshot(run_dir)
        for start in (lambda: run(compose(*SMALL), run_dir), lambda: run_study(compose("synthetic=table4"), run_dir)):
            with pytest.raises(ConfigError) as refused:
                start()
            _one_line(str(refused.value), f"pid {os.getpid()} on host", f"holds its lock {run_dir / LOCK}")
            assert _snapshot(run_dir) == before
    finally:
        held.release(remove=True)
    fresh = tmp_path / "new" / "deep" / "run"
    with pytest.raises(ConfigError):
        with RunDirectory(fresh) as directory:
            directory.lock()
            raise ConfigError("x", 1, "refused")
    assert not (tmp_path / "new").exists()  # a refused command leaves no directory, nor the folders above it


def test_a_file_system_without_locks_runs_unlocked_with_a_warning(tmp_path, monkeypatch, caplog):
    import csg.engine.runlock

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(csg.engine.runlock.fcntl, "flock", no_locks)
    with caplog.at_level(logging.WARNING, logger="csg.engine.runlock"):
        with RunDirectory(tmp_path / "run") as directory:
            directory.lock()  # goes on
            directory.accept()
    assert "cannot be locked (ENOLCK: the file system has no locks)" in caplog.text
    assert "a second train.py in" in caplog.text and not (tmp_path / "run" / LOCK).exists()


@pytest.mark.timeout(60)
def test_a_planted_lock_link_or_fifo_is_refused_and_never_followed(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    precious = tmp_path / "precious.txt"
    precious.write_text("not to be overwritten\n")
    (run_dir / LOCK).symlink_to(precious)
    with pytest.raises(ConfigError) as refused:
        RunDirectory(run_dir).lock()
    _one_line(str(refused.value), f"whose lock file {run_dir / LOCK} is a regular file")
    assert precious.read_text() == "not to be overwritten\n"
    (run_dir / LOCK).unlink()
    os.mkfifo(run_dir / LOCK)
    with pytest.raises(ConfigError) as refused:
        RunDirectory(run_dir).lock()
    _one_line(str(refused.value), "is a regular file: it is not a regular file")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_under_torchrun_every_process_hears_rank_0s_refusal(run_dir, tmp_path):
    held = RunLock(run_dir)
    assert held.acquire()
    try:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                   str(ROOT / "train.py"), *SMALL, f"hydra.run.dir={run_dir}"]
        process = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_env())
    finally:
        held.release(remove=True)
    refusals = [line for line in process.stderr.splitlines() if f"pid {os.getpid()} on host" in line]
    assert process.returncode != 0 and refusals, process.stderr
    assert all(line.startswith("error: hydra.run.dir=") for line in refusals)
    assert "exitcode  : 2" in process.stderr  # the ranks' own exit status (torchrun then prints its own report)
    assert f'File "{ROOT / "csg"}' not in process.stderr and 'train.py", line' not in process.stderr
    assert not list(run_dir.glob(".hydra.pending*"))


# ------------------------------------------------------------------------------------------------- the manifest
def _members(run_dir: Path) -> list[str]:
    from csg import Posterior

    return Posterior.load(run_dir, device="cpu").names


def _recorded(run_dir: Path) -> list[str]:
    return [entry["file"] for entry in json.loads((run_dir / "samples" / "manifest.json").read_text())["samples"]]


def test_a_sample_is_recorded_in_the_manifest_as_it_is_written(finished):
    manifest = json.loads((finished / "samples" / "manifest.json").read_text())
    assert manifest["planned"] == 2 and manifest["chain"] == 0
    for entry, path in zip(manifest["samples"], sorted((finished / "samples").glob("sample_*.pt")), strict=True):
        assert entry["file"] == path.name and entry["bytes"] == path.stat().st_size
        record = SampleStore.metadata(path)
        assert (entry["index"], entry["cycle"], entry["epoch"]) == (record["index"], record["cycle"], record["epoch"])
        import hashlib

        assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.timeout(120)
def test_stray_copies_never_join_the_ensemble(run_dir):
    from csg.posterior.evaluate import evaluate_run

    samples = run_dir / "samples"
    first = samples / _recorded(run_dir)[0]
    (samples / "old").mkdir()
    shutil.copy(first, samples / "old" / first.name)
    shutil.copy(first, samples / f"{first.stem} (copy).pt")
    shutil.copy(first, samples / "sample_0002_cycle01_epoch0003.pt")  # a sample's name, in no manifest
    (samples / "sample_0003_cycle01_epoch0003.pt").write_bytes(b"damaged, and never read")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    recorded = [row["file"] for row in metrics["per_sample"]]
    assert _members(run_dir) == recorded == _recorded(run_dir) and len(recorded) == 2
    evaluated = evaluate_run(run_dir, ["trainer.device=cpu"])
    assert [row["file"] for row in evaluated["per_sample"]] == recorded
    assert evaluated["ensemble"] == pytest.approx(metrics["ensemble"])


def test_a_run_directory_given_as_a_relative_path_loads_and_evaluates(run_dir, monkeypatch):
    # `make demo-seeds` passes runs/demo-seeds/<time>/0_.../: the manifest's files are under that relative path
    from csg import Posterior
    from csg.posterior.evaluate import evaluate_run

    monkeypatch.chdir(run_dir.parent)
    relative = Path(run_dir.name)
    posterior = Posterior.load(relative, device="cpu")
    assert posterior.names == _recorded(run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert evaluate_run(relative, ["trainer.device=cpu"])["ensemble"] == pytest.approx(metrics["ensemble"])


@pytest.mark.timeout(120)
def test_a_recorded_sample_missing_or_changed_is_refused_in_one_line(run_dir):
    from csg import Posterior
    from csg.posterior.evaluate import evaluate_run

    first, second = (run_dir / "samples" / name for name in _recorded(run_dir))
    intact = first.read_bytes()
    first.write_bytes(second.read_bytes())  # the same size and model, another sample: only its hash tells
    before = _snapshot(run_dir)
    for load in (lambda: Posterior.load(run_dir, device="cpu"), lambda: evaluate_run(run_dir, [])):
        with pytest.raises(ConfigError) as refused:
            load()
        _one_line(str(refused.value), f"samples='{first}'", "its SHA-256 is not the one the manifest records")
    assert _snapshot(run_dir) == before
    first.write_bytes(intact + b"\0")
    with pytest.raises(ConfigError) as refused:
        SampleStore(run_dir / "samples").verify()
    assert str(first) in str(refused.value)
    first.write_bytes(intact)
    second.unlink()
    with pytest.raises(ConfigError) as refused:
        Posterior.load(run_dir, device="cpu")
    _one_line(str(refused.value), f"samples='{second}'", "a sample file this run wrote: it is missing")
    (run_dir / "samples" / "manifest.json").write_text("{not json")
    with pytest.raises(ConfigError) as refused:
        evaluate_run(run_dir, [])
    _one_line(str(refused.value), "manifest.json", "a manifest of the samples written by train.py: it cannot be read")


@pytest.mark.timeout(180)
def test_a_manifest_edited_after_the_run_is_refused_naming_it(run_dir):
    # a posterior is exactly its files: a sample listed twice, one dropped (with planned lowered to match), an
    # entry that is not its file: each refused in one line, by Posterior.load and evaluate_run, nothing changed
    from csg import Posterior
    from csg.posterior.evaluate import evaluate_run

    manifest_path = run_dir / "samples" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    first, second = manifest["samples"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["manifests"] == {"samples/manifest.json": SampleStore(run_dir / "samples").manifest_sha256()}
    edits = {
        "twice": ({**manifest, "samples": [first, first, second]}, "its entry 1 is sample 0", "lists it twice"),
        "first dropped": ({**manifest, "samples": [second]}, "its entry 0 is sample 1", "lacks sample 0"),
        "renamed": ({**manifest, "samples": [first, {**second, "index": 1, "epoch": 2}]},
                    "its entry 1", "records another index, cycle or epoch than its file's name"),
        "last dropped": ({**manifest, "planned": 1, "samples": [first]}, f"samples='{manifest_path}'",
                         "its SHA-256 is not the one metrics.json records"),
    }
    for name, (edited, *fragments) in edits.items():
        manifest_path.write_text(json.dumps(edited))
        before = _snapshot(run_dir)
        for load in (lambda: Posterior.load(run_dir, device="cpu"), lambda: evaluate_run(run_dir, [])):
            with pytest.raises(ConfigError) as refused:
                load()
            _one_line(str(refused.value), *fragments)
        assert _snapshot(run_dir) == before, name
    # a run from before metrics.json recorded the manifests' hashes: the members are checked against per_sample
    (run_dir / "metrics.json").write_text(json.dumps({k: v for k, v in metrics.items() if k != "manifests"}))
    for load in (lambda: Posterior.load(run_dir, device="cpu"), lambda: evaluate_run(run_dir, [])):
        with pytest.raises(ConfigError) as refused:
            load()
        _one_line(str(refused.value), f"run_dir='{run_dir}'", "its manifests give 1 members, metrics.json records 2")
    manifest_path.write_text(json.dumps(manifest))
    assert _members(run_dir) == [first["file"], second["file"]]


def test_a_sample_of_non_finite_weights_is_refused_naming_it(tmp_path):
    model = torch.nn.Linear(3, 2)
    store = SampleStore(tmp_path / "samples")
    store.directory.mkdir()
    store.save(model, index=0, cycle=0, epoch=0)
    with torch.no_grad():
        model.bias[1] = math.inf
    path = store.save(model, index=1, cycle=1, epoch=1)
    with pytest.raises(ConfigError) as refused:
        store.verify()
    _one_line(str(refused.value), f"samples='{path}'", "a sample of finite weights: its bias holds NaN or inf")


@pytest.mark.timeout(120)
def test_a_run_from_before_manifests_is_read_from_its_metrics_json_never_a_glob(run_dir):
    from csg import Posterior

    first = run_dir / "samples" / _recorded(run_dir)[0]
    (run_dir / "samples" / "manifest.json").unlink()
    shutil.copy(first, run_dir / "samples" / "sample_0002_cycle01_epoch0003.pt")  # a stray with a sample's name
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert _members(run_dir) == [row["file"] for row in metrics["per_sample"]]
    (run_dir / "metrics.json").write_text(json.dumps({**metrics, "swag": {"draws_per_cycle": 2}}))
    with pytest.raises(ConfigError) as refused:
        Posterior.load(run_dir, device="cpu")
    _one_line(str(refused.value), "samples/manifest.json): it has none", "names cyclical-SWAG draws",
              "never taken from a listing of its folder")
    (run_dir / "metrics.json").write_text(json.dumps({**metrics, "per_sample": [{"file": "../../etc/passwd"}]}))
    with pytest.raises(ConfigError, match="names other files than the run's samples"):
        Posterior.load(run_dir, device="cpu")


def test_resume_checks_the_samples_against_the_manifest_and_the_checkpoint(run_dir):
    from csg.engine.checkpoint import read_checkpoint
    from csg.engine.chain import check_samples_on_disk

    checkpoint = run_dir / "checkpoint.pt"
    saved = read_checkpoint(checkpoint)
    manifest_path = run_dir / "samples" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())

    def check() -> SampleStore:
        store = SampleStore(run_dir / "samples", planned=2)
        check_samples_on_disk(run_dir, store, saved, checkpoint, [])
        return store

    store = check()
    store.start()  # what the resumed run writes once accepted: the checkpoint's samples
    assert json.loads(manifest_path.read_text()) == manifest

    manifest_path.unlink()  # a run from before manifests: its manifest is made from the checkpoint's record
    store = check()
    store.start()
    assert json.loads(manifest_path.read_text()) == manifest

    first, second = (run_dir / "samples" / entry["file"] for entry in manifest["samples"])
    intact = first.read_bytes()
    first.write_bytes(second.read_bytes())
    with pytest.raises(ConfigError, match="its SHA-256 is not the one the manifest records"):
        check()
    first.write_bytes(intact)

    last = manifest["samples"][1]
    foreign = run_dir / "samples" / SampleStore.file_name(2, last["cycle"], last["epoch"])
    shutil.copy(second, foreign)
    extra = {**last, "file": foreign.name, "index": 2}
    manifest_path.write_text(json.dumps({**manifest, "samples": [*manifest["samples"], extra]}))
    with pytest.raises(ConfigError) as refused:
        check()
    _one_line(str(refused.value), f"samples/{foreign.name}", "checkpoint.pt does not record")
    foreign.unlink()

    manifest_path.write_text(json.dumps({**manifest, "samples": manifest["samples"][1:]}))
    with pytest.raises(ConfigError) as refused:
        check()
    _one_line(str(refused.value), str(manifest_path), "the manifest lacks sample 0")


def test_resume_says_so_first_and_can_be_forbidden_or_required(run_dir, tmp_path, caplog):
    from csg.launch.run import run

    before = _snapshot(run_dir)
    with pytest.raises(ConfigError) as refused:
        run(compose(*SMALL, "trainer.checkpoint.resume=never"), run_dir)
    _one_line(str(refused.value), "trainer.checkpoint.resume='never' is not allowed: a run directory without an "
              f"earlier run; {run_dir} holds ", "trainer.checkpoint.resume=false to move them")
    assert _snapshot(run_dir) == before
    with pytest.raises(ConfigError) as refused:
        run(compose(*SMALL, "trainer.checkpoint.resume=always"), tmp_path / "fresh")
    _one_line(str(refused.value), "trainer.checkpoint.resume='always' is not allowed: a run directory with a "
              f"checkpoint to resume; {tmp_path / 'fresh'} has none")
    assert not (tmp_path / "fresh").exists()
    threads = torch.get_num_threads()
    with caplog.at_level(logging.INFO):
        run(compose(*SMALL, "trainer.checkpoint.resume=always", "trainer.threads=1"), run_dir)  # finished: evaluates
    assert torch.get_num_threads() == threads  # the run's own count, the caller's back after it
    first = next(r.getMessage() for r in caplog.records if r.name.startswith("csg"))
    assert first.startswith(f"resuming the run in {run_dir} from its checkpoint"), first
    assert json.loads((run_dir / "metrics.json").read_text())["threads"] == 1


# --------------------------------------------------------------------------------------------- unfinished runs
def _unfinish(run_dir: Path) -> None:
    """The run as a kill after its first sample leaves it: no metrics.json, a manifest with 1 of 2 samples."""
    (run_dir / "metrics.json").unlink()
    manifest_path = run_dir / "samples" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "samples": manifest["samples"][:1]}))


@pytest.mark.timeout(180)
def test_an_unfinished_run_is_refused_unless_partial_which_says_so(run_dir, capsys):
    from csg import Posterior
    from csg.posterior.evaluate import evaluate_run, format_metrics

    metrics_json = (run_dir / "metrics.json").read_bytes()
    _unfinish(run_dir)
    before = _snapshot(run_dir)
    with pytest.raises(ConfigError) as refused:
        evaluate_run(run_dir, [])
    _one_line(str(refused.value), f"run_dir='{run_dir}' is not allowed: a finished run directory of train.py",
              "the run has not finished", "--partial")
    with pytest.raises(ConfigError, match="the run has not finished"):
        Posterior.load(run_dir, device="cpu")
    assert _snapshot(run_dir) == before

    metrics = evaluate_run(run_dir, [], partial=True)
    [written] = run_dir.glob("evaluation_*.json")
    assert written.name.startswith("evaluation_partial_") and metrics["partial"] == {
        "samples": 1, "planned": 2, "finished": False, "file": written.name}
    assert json.loads(written.read_text())["partial"] == metrics["partial"]
    assert metrics["ensemble"]["num_samples"] == 1
    assert format_metrics(metrics).startswith(f"PARTIAL: a run that has not finished, its 1 of 2 planned samples so "
                                              f"far (written to {written.name})\n")

    # metrics.json there, but the manifest records fewer samples than planned: not finished either
    written.unlink()
    (run_dir / "metrics.json").write_bytes(metrics_json)
    for load in (lambda: Posterior.load(run_dir, device="cpu"), lambda: evaluate_run(run_dir, [])):
        with pytest.raises(ConfigError) as refused:
            load()
        _one_line(str(refused.value), "manifest.json records 1 of the 2 samples planned, the run has not finished")

    # the command line: --partial, said in its output
    spec = importlib.util.spec_from_file_location("evaluate_run_script", ROOT / "scripts" / "evaluate_run.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main([str(run_dir), "--partial", "trainer.device=cpu"])
    assert capsys.readouterr().out.startswith("PARTIAL: a run that has not finished, its 1 of 2 planned samples")
    assert [p.name for p in run_dir.glob("evaluation_*.json")][0].startswith("evaluation_partial_")
    assert not (run_dir / "evaluation_equal.json").exists()
