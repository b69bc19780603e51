"""train.py's refusals and stops: one line, nothing of an existing run changed, nothing run that should not be.

One test per class of fault: a planted file that would run code, a refusal in a finished run's directory,
an earlier run's results that would join the ensemble, values that reach a constructor, a sweep with a bad
point, a file-system error, Ctrl-C.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from csg.errors import ConfigError
from tests.conftest import ROOT, assert_one_line, train

SMALL = ["model.hidden=[16]", "trainer.epochs=4", "sampler.cycles=2", "sampler.explore=0.5",
         "sampler.samples_per_cycle=1", "trainer.device=cpu"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished small run: checkpoint.pt, two samples, metrics.json, .hydra/, train.log."""
    base = tmp_path_factory.mktemp("finished")
    process = train(SMALL, base / "run", base)
    assert process.returncode == 0, process.stderr
    return base / "run"


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def _snapshot(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(run_dir)): (p.read_bytes(), p.stat().st_mtime_ns) for p in run_dir.rglob("*")
            if p.is_file()}


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return hydra_compose("config", overrides=["trainer.progress=false", *overrides])


class _Payload:
    """Unpickling this runs code: it creates ``marker``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def test_a_planted_checkpoint_or_sample_runs_nothing(finished, tmp_path):
    run_dir = _copy(finished, tmp_path)
    marker = tmp_path / "pwned"
    torch.save({"model": _Payload(marker)}, run_dir / "checkpoint.pt")
    process = train(SMALL, run_dir, tmp_path)
    assert_one_line(process, 2, str(run_dir / "checkpoint.pt"), "nothing of it was run")
    assert not marker.exists()

    from csg.engine.samples import SampleStore

    sample = next((run_dir / "samples").glob("*.pt"))
    torch.save({"state_dict": _Payload(marker), "index": 0, "cycle": 0, "epoch": 1}, sample)
    with pytest.raises(ConfigError, match=sample.name):
        SampleStore.load(sample)
    with pytest.raises(ConfigError, match=sample.name):
        SampleStore(run_dir / "samples").verify()
    assert not marker.exists()


def test_no_refusal_changes_a_file_of_an_existing_run(finished, tmp_path):
    run_dir = _copy(finished, tmp_path)
    before = _snapshot(run_dir)
    refusals = {
        "a bad value (checked before Hydra starts)": (["sampler.lr0=-1"], "sampler.lr0=-1"),
        "another config than the checkpoint's": (["model.hidden=[32]"], "model.hidden=[16], this run [32]"),
        "a key the model group does not have": (["model=resnet18"], "model.hidden is not a key of the config"),
    }
    for args, fragment in refusals.values():
        assert_one_line(train([*SMALL, *args], run_dir, tmp_path), 2, fragment)
    assert _snapshot(run_dir) == before  # Hydra's record, the log, the samples: all as they were

    fresh = tmp_path / "fresh"
    assert_one_line(train(["data=heart", "model=resnet18", "trainer.epochs=2"], fresh, tmp_path), 2,
              "model.name='resnet18'", "inputs of shape (13,)")
    assert not fresh.exists()  # a refused command leaves no run directory behind


def test_an_earlier_runs_results_never_join_the_ensemble(finished, tmp_path):
    run_dir = _copy(finished, tmp_path)
    (run_dir / "checkpoint.pt").unlink()  # resume=true, but nothing to resume the samples from
    before = _snapshot(run_dir)
    assert_one_line(train(SMALL, run_dir, tmp_path), 2, f"hydra.run.dir='{run_dir}'", "samples/", "metrics.json",
              "no checkpoint", "trainer.checkpoint.resume=false")
    assert _snapshot(run_dir) == before

    # the way on it names: start over, the earlier run moved aside whole (its record too)
    process = train([*SMALL, "trainer.checkpoint.resume=false", "logger=none"], run_dir, tmp_path)
    assert process.returncode == 0, process.stderr
    assert json.loads((run_dir / "metrics.json").read_text())["ensemble"]["num_samples"] == 2
    [earlier] = (run_dir / "earlier").iterdir()
    moved = {name: data for name, (data, _) in _snapshot(earlier).items()}
    assert moved == {name: data for name, (data, _) in before.items() if name != "train.log"}
    from studies.experiments.aggregate import load_runs

    assert list(load_runs(run_dir.parent)["run_dir"]) == [str(run_dir)]  # a table never counts the moved run

    # a resumed run's folder with a sample its checkpoint does not record (another run's, copied in)
    run_dir = _copy(finished, tmp_path / "second")
    shutil.copy(next((run_dir / "samples").glob("*.pt")), run_dir / "samples" / "sample_0009_cycle07_epoch0099.pt")
    assert_one_line(train(SMALL, run_dir, tmp_path), 2, "samples/sample_0009_cycle07_epoch0099.pt",
              "checkpoint.pt does not record")


def test_a_damaged_or_missing_sample_is_reported_before_training_goes_on(finished, tmp_path):
    from csg.launch.run import run

    cfg = compose(*SMALL, "logger=none")
    run_dir = _copy(finished, tmp_path)
    first = sorted((run_dir / "samples").glob("*.pt"))[0]
    first.write_bytes(first.read_bytes()[:500])
    log = (run_dir / "train.log").read_text()
    with pytest.raises(ConfigError, match=first.name):
        run(cfg, run_dir)
    first.unlink()
    with pytest.raises(ConfigError, match=first.name):
        run(cfg, run_dir)
    assert (run_dir / "train.log").read_text() == log


@pytest.mark.parametrize("overrides, key, allowed", [
    (["model.hidden=[0]"], "model.hidden", "positive integers"),
    (["model.hidden=[-5]"], "model.hidden", "positive integers"),
    (["model=small_cnn", "model.hidden=0"], "model.name", "without empty parameters"),
    (["data=heart", "model=resnet18"], "model.name", "inputs of shape (13,)"),
    (["sampler.cycles=1000", "trainer.epochs=2"], "sampler.cycles", "at most the run's 126 iterations"),
    (["data.test_per_class=500"], "data.test_per_class", "[1, 499]"),
])
def test_values_that_reach_a_constructor_are_checked_before_training(tmp_path, overrides, key, allowed):
    from csg.launch.run import run

    with pytest.raises(ConfigError) as error:
        run(compose(*overrides, "logger=none"), tmp_path / "run")
    assert error.value.key == key and allowed in str(error.value), str(error.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, fragments", [
    (["foo=1"], ["foo=1", "the config has adapter, callbacks, data, evaluation"]),
    (["sampler.lrr=0.1"], ["sampler.lrr", "sampler has chains, cycles"]),
    (["+sampler.lr=0.1"], ["+sampler.lr=0.1", "`+` adds keys only under model.", "lr0"]),
    (["sampler.lr0=inf"], ["sampler.lr0=inf", "finite"]),
    (["sampler.temperature=inf"], ["sampler.temperature=inf", "finite"]),
    (["-m", "sampler.lr0=0.1,-1"], ["sampler.lr0=-1", "job 1 of the sweep"]),
    (["-m", "sampler=sgld,csgld", "sampler.momentum=0.5"], ["sampler.momentum=0.5", "job 0"]),
    (["hydra.run.dir=/etc/hostname/run"], ["hydra.run.dir", "/etc/hostname is a file"]),
])
def test_every_key_and_every_job_is_checked_before_hydra_starts(argv, fragments):
    from csg.checks import check_command

    message = check_command(argv, ROOT / "configs")
    assert message is not None and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    # `+model.` adds a key (mlp takes no drop_rate: a sweep's data-dependent checks, tests/checks/test_checks_before_training.py,
    # would refuse it; a single run checks that itself, once its data are built)
    assert check_command(["sampler=csgld", "seed=0", "+model.drop_rate=0.1"], ROOT / "configs") is None


def test_a_sweep_with_a_bad_point_starts_no_job(tmp_path):
    sweep = tmp_path / "sweep"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "WANDB_"))}
    process = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", *SMALL, "sampler.lr0=0.1,-1",
                              f"hydra.sweep.dir={sweep}"], cwd=tmp_path, capture_output=True, text=True, env=env,
                             timeout=120)
    assert_one_line(process, 2, "sampler.lr0=-1", "job 1 of the sweep")
    assert not sweep.exists()


def test_a_full_disk_ends_in_one_line_and_the_run_resumes(tmp_path, monkeypatch, capsys):
    import csg.engine.chain
    import csg.launch.run
    from csg.launch.cli import run_or_exit

    run_dir = tmp_path / "run"
    cfg = compose(*SMALL, "logger=csv")
    real_save, calls = csg.engine.chain.save_checkpoint, []

    def full_disk_on_the_third(path, **kwargs):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real_save(path, **kwargs)

    monkeypatch.setattr(csg.engine.chain, "save_checkpoint", full_disk_on_the_third)
    with pytest.raises(SystemExit) as stop:
        run_or_exit(lambda: csg.launch.run.run(cfg, run_dir), run_dir)
    assert stop.value.code == 1
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert line.startswith("error: No space left on device: ") and str(run_dir / "checkpoint.pt") in line
    assert "resumes the run from checkpoint.pt" in line
    monkeypatch.setattr(csg.engine.chain, "save_checkpoint", real_save)
    metrics = csg.launch.run.run(cfg, run_dir)  # the checkpoint of epoch 2 is intact: the run goes on from there
    assert metrics["ensemble"]["num_samples"] == 2
    logged = [line.split(",")[0] for line in (run_dir / "epochs.csv").read_text().splitlines()[1:]]
    assert logged == ["0", "1", "2", "3"]  # epoch 3 redone from the checkpoint of 2, its first row dropped


@pytest.mark.timeout(300)
def test_ctrl_c_ends_in_one_line_and_the_same_command_resumes(tmp_path):
    from tests import gate

    run_dir = tmp_path / "run"
    args = [*SMALL, "trainer.epochs=12", "sampler.cycles=3", "logger=none"]  # a sample at epoch 3, after checkpoints
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "WANDB_"))}
    process = gate.start(tmp_path / "barrier", ROOT / "train.py",
                         [*args, f"hydra.run.dir={run_dir}", "trainer.progress=false"], tmp_path, env)
    # the run waits after its first sample until the signal has been sent: it cannot finish first
    gate.signal_when_waiting(process, tmp_path / "barrier", signal.SIGINT)  # not in trainer.checkpoint.signals
    _, stderr = process.communicate(timeout=60)
    completed = subprocess.CompletedProcess(process.args, process.returncode, "", stderr)
    assert_one_line(completed, 130, "interrupted (Ctrl-C)", "the same command resumes the run from checkpoint.pt")
    resumed = train(args, run_dir, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed chain 0" in (run_dir / "train.log").read_text()


def test_a_refusal_raised_in_a_worker_process_reaches_its_parent_whole():
    """A study's process pool returns a worker's refusal as the refusal (not a broken pool): it pickles."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from csg.errors import ConfigError

    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        future = pool.submit(_refuse, "sampler.samples_per_cycle", 3)
        with pytest.raises(ConfigError, match="samples_per_cycle=3 is not allowed: 1..2") as raised:
            future.result()
    assert (raised.value.key, raised.value.value, raised.value.allowed) == ("sampler.samples_per_cycle", 3, "1..2")


def _refuse(key, value):
    from csg.errors import ConfigError

    raise ConfigError(key, value, "1..2")
