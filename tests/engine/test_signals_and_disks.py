"""Signals and disks, always one line: a preemption signal in any phase of a run (data, training, evaluation), a
full disk at any writer (torch.save's RuntimeError included), and a sampler whose state a checkpoint cannot hold.

In-process runs signal themselves from inside the run (their data set or sampler sends the signal to this
process at a chosen point, after checking that csg's handler holds it), so nothing races; the end-to-end
runs of train.py wait at a barrier until the test has sent its signal (tests/gate.py).
"""

from __future__ import annotations

import collections
import errno
import io
import json
import math
import os
import signal
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from csg.engine.checkpoint import EVALUATING, PREPARING, Preempted, PreemptionSignals, let_signal_act, read_checkpoint
from csg.errors import ConfigError
from tests import gate
from tests.conftest import ROOT, assert_same_samples, read_samples

OWN = ["data=custom", "data._target_=tests.own_components.blobs", "data.batch_size=20", "data.eval_batch_size=30",
       "model=custom", "model._target_=tests.own_components.tiny_net", "trainer.epochs=4", "sampler.cycles=2",
       "sampler.samples_per_cycle=1", "logger=none", "trainer.progress=false", "trainer.device=cpu"]
HERE = __name__  # this module as pytest imported it: the run finds the same classes (and their stop_at)


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


def run(*overrides: str, run_dir: Path):
    from csg.launch.run import run as run_once

    return run_once(compose(*OWN, *overrides), run_dir)


def send_to_self(signum: int) -> None:
    """Send ``signum`` to this process, only while csg's handler (or Python's Ctrl-C handler) holds it: a test that
    went wrong fails, it does not kill the test process."""
    handler = signal.getsignal(signum)
    ours = isinstance(getattr(handler, "__self__", None), PreemptionSignals)
    assert ours or (signum == signal.SIGINT and handler is signal.default_int_handler), handler
    os.kill(os.getpid(), signum)


@pytest.fixture
def ctrl_c():
    """Python's own Ctrl-C handler for SIGINT during the test (a pytest worker may run with another)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


# -- components that stop the run at a chosen point, or keep state a checkpoint cannot hold as it is ---------------
def blobs_that_stop_while_built(signum: int, **options):
    """The blobs, after sending ``signum``: a signal while the data are being built."""
    from tests.own_components import blobs

    send_to_self(signum)
    return blobs(**options)


class _StopInEvaluation(Dataset):
    """Test items; once file ``once`` exists (the last sample: training is over) the first read sends ``signum``
    and writes ``sent`` (the run that resumes, or a reference, is not stopped again)."""

    def __init__(self, data, once: str, sent: str, signum: int):
        self.data, self.once, self.sent, self.signum = data, once, sent, signum

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        if Path(self.once).exists() and not Path(self.sent).exists():
            Path(self.sent).touch()
            send_to_self(self.signum)
        inputs, label = self.data[index]
        return inputs, int(label)


def blobs_that_stop_in_evaluation(once: str, sent: str, signum: int, **options):
    from tests.own_components import blobs

    train, test = blobs(**options)
    return train, _StopInEvaluation(test, once, sent, signum)


class NumpyMomentum(torch.optim.Optimizer):
    """SG-HMC as a user may write it: its momentum a float64 numpy array and its step count a numpy integer in
    ``state``. ``stop_at``: the step after which it sends SIGTERM to its own process (a test's preemption)."""

    stop_at: int | None = None

    def __init__(self, params, lr, num_data, temperature, weight_decay, generator=None, friction: float = 0.1):
        super().__init__(params, dict(lr=lr, num_data=num_data, temperature=temperature, weight_decay=weight_decay,
                                      friction=friction))
        self.generator = generator

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, temperature, friction = group["lr"], group["temperature"], group["friction"]
            scale = math.sqrt(2.0 * friction * lr * temperature / group["num_data"])
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["momentum"], state["steps"] = np.zeros(tuple(p.shape)), np.int64(0)
                gradient = (p.grad + group["weight_decay"] * p).double().numpy()
                noise = torch.randn(p.shape, generator=self.generator, dtype=torch.float64).numpy()
                state["momentum"] = (1 - friction) * state["momentum"] - lr * gradient + scale * noise
                state["steps"] += 1
                p.add_(torch.from_numpy(state["momentum"]).to(p.dtype))
                steps = int(state["steps"])
        if steps == NumpyMomentum.stop_at:
            send_to_self(signal.SIGTERM)


class HistorySGD(torch.optim.SGD):
    """SGD that keeps its last losses' history in a ``collections.deque``: no checkpoint can hold it safely."""

    def __init__(self, params, lr, num_data, temperature, weight_decay):
        super().__init__(params, lr=lr, weight_decay=weight_decay)
        for group in self.param_groups:
            group["temperature"] = temperature

    def step(self, closure=None):
        super().step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p].setdefault("history", collections.deque(maxlen=3)).append(1.0)


class FractionSGD(torch.optim.SGD):
    """SGD with a Fraction among its group settings: its state cannot be saved before its first step already."""

    def __init__(self, params, lr, num_data, temperature, weight_decay):
        super().__init__(params, lr=lr, weight_decay=weight_decay)
        for group in self.param_groups:
            group["temperature"], group["ratio"] = temperature, Fraction(1, 3)


# -- signals --------------------------------------------------------------------------------------------------------
def test_a_signal_outside_the_training_loop_stops_at_once_and_inside_it_is_recorded():
    original = signal.getsignal(signal.SIGUSR1)
    with PreemptionSignals(["SIGUSR1"]) as outer:
        with pytest.raises(Preempted) as stopped:
            send_to_self(signal.SIGUSR1)
            for _ in range(1000):  # the handler runs between two bytecodes: it raises here at the latest
                pass
        assert stopped.value.phase == PREPARING and not stopped.value.checkpointed
        assert str(stopped.value) == f"stopped by SIGUSR1 {PREPARING}"
    assert signal.getsignal(signal.SIGUSR1) == original
    with PreemptionSignals(["SIGUSR1"]) as signals:
        with PreemptionSignals(["SIGUSR1"]) as nested:  # hands back to what the outer one replaced
            assert nested.previous[signal.SIGUSR1] == original
        with signals.deferred():
            send_to_self(signal.SIGUSR1)
            send_to_self(signal.SIGUSR1)  # later ones wait for the first one's stop
        assert signals.received == signal.SIGUSR1
        signals.phase = EVALUATING
        with pytest.raises(Preempted, match=f"stopped by SIGUSR1 {EVALUATING}"):
            signals.raise_if_received()
    assert outer.received == signal.SIGUSR1 and signal.getsignal(signal.SIGUSR1) == original


def test_sigint_listed_as_a_preemption_signal_exits_130_without_a_traceback(ctrl_c):
    with pytest.raises(SystemExit) as stop:
        let_signal_act(Preempted(signal.SIGINT, signal.default_int_handler, None))
    assert stop.value.code == 130  # Python's Ctrl-C handler would have raised KeyboardInterrupt after the line


def test_sigterm_while_the_data_are_built_stops_with_nothing_written(tmp_path):
    from csg.launch.messages import stop_line

    run_dir = tmp_path / "run"
    original = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Preempted) as stopped:
        run(f"data._target_={HERE}.blobs_that_stop_while_built", f"+data.signum={int(signal.SIGTERM)}",
            run_dir=run_dir)
    assert stop_line(stopped.value, run_dir) == (f"stopped by SIGTERM {PREPARING}; nothing was written; run the same "
                                                 "command again")
    assert not run_dir.exists() and signal.getsignal(signal.SIGTERM) == original


def test_sigterm_in_the_final_evaluation_keeps_the_training_and_the_same_command_evaluates(tmp_path, caplog):
    from csg.launch.messages import stop_line

    run_dir, sent = tmp_path / "run", tmp_path / "sent"
    stop = [f"data._target_={HERE}.blobs_that_stop_in_evaluation", "data.in_memory=false",
            f"+data.once={run_dir}/samples/sample_0001_cycle01_epoch0003.pt", f"+data.sent={sent}",
            f"+data.signum={int(signal.SIGTERM)}", "trainer.checkpoint.every_n_epochs=0"]  # 0: a checkpoint at a stop
    with pytest.raises(Preempted) as stopped:
        run(*stop, run_dir=run_dir)
    assert stopped.value.phase == EVALUATING and not (run_dir / "metrics.json").exists()
    assert stop_line(stopped.value, run_dir) == (
        f"stopped by SIGTERM {EVALUATING}; training had finished: its samples and checkpoint.pt in {run_dir} are "
        "kept, and the same command evaluates them")
    assert read_checkpoint(run_dir / "checkpoint.pt")["loop"]["epoch"] == 4  # the end of training, written at the stop
    with caplog.at_level("INFO", logger="csg"):
        resumed = run(*stop, run_dir=run_dir)  # the same command: it trains nothing more
    assert "resumed chain 0 from" in caplog.text and "at epoch 5, batch 0" in caplog.text
    reference = run(*stop, run_dir=tmp_path / "reference")  # uninterrupted (`sent` exists)
    assert resumed["ensemble"] == reference["ensemble"]
    assert_same_samples(tmp_path / "reference", run_dir)


def test_ctrl_c_in_the_final_evaluation_says_the_same_command_evaluates(tmp_path, capsys, ctrl_c):
    from csg.launch.cli import run_or_exit

    run_dir = tmp_path / "run"
    stop = [f"data._target_={HERE}.blobs_that_stop_in_evaluation", "data.in_memory=false",
            f"+data.once={run_dir}/samples/sample_0001_cycle01_epoch0003.pt", f"+data.sent={tmp_path / 'sent'}",
            f"+data.signum={int(signal.SIGINT)}"]
    with pytest.raises(SystemExit) as exit_:
        run_or_exit(lambda: run(*stop, run_dir=run_dir), run_dir)
    assert exit_.value.code == 130
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert line == (f"interrupted (Ctrl-C) {EVALUATING}; training had finished: its samples and checkpoint.pt in "
                    f"{run_dir} are kept, and the same command evaluates them")
    assert read_checkpoint(run_dir / "checkpoint.pt")["loop"]["epoch"] == 4


def _train_py(args: list[str], run_dir: Path, cwd: Path, barrier: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "WANDB_"))}
    env["PYTHONPATH"] = str(ROOT)  # tests.gate's data sets, from the folder the run starts in
    command = [sys.executable, str(ROOT / "train.py"), *OWN, *args, f"hydra.run.dir={run_dir}"]
    return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _one_line(process: subprocess.Popen, code: int) -> str:
    _, stderr = process.communicate(timeout=120)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert process.returncode == code and len(lines) == 1 and "Traceback" not in stderr, (process.returncode, stderr)
    return lines[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_train_py_stopped_while_its_data_are_built_prints_one_line_and_ends_by_the_signal(tmp_path):
    run_dir, barrier = tmp_path / "run", tmp_path / "barrier"
    process = _train_py(["data._target_=tests.gate.blobs_built_after", f"+data.barrier={barrier}"], run_dir,
                        tmp_path, barrier)
    gate.signal_when_waiting(process, barrier, signal.SIGTERM)
    line = _one_line(process, -signal.SIGTERM)  # 143 to a shell and to SLURM: a preemption, requeued by submitit
    assert line == f"stopped by SIGTERM {PREPARING}; nothing was written; run the same command again"
    assert not run_dir.exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_train_py_stopped_in_its_final_evaluation_prints_one_line_and_the_same_command_finishes(tmp_path):
    run_dir, barrier = tmp_path / "run", tmp_path / "barrier"
    args = ["data._target_=tests.gate.blobs_evaluated_after", "data.in_memory=false", f"+data.barrier={barrier}",
            f"+data.once={run_dir}/checkpoint.pt"]
    process = _train_py(args, run_dir, tmp_path, barrier)
    gate.signal_when_waiting(process, barrier, signal.SIGUSR1)
    line = _one_line(process, -signal.SIGUSR1)
    assert line == (f"stopped by SIGUSR1 {EVALUATING}; training had finished: its samples and checkpoint.pt in "
                    f"{run_dir} are kept, and the same command evaluates them")
    assert line in (run_dir / "train.log").read_text()
    again = _train_py(args, run_dir, tmp_path, barrier)
    _, stderr = again.communicate(timeout=120)
    assert again.returncode == 0, stderr
    assert "at epoch 5, batch 0" in (run_dir / "train.log").read_text()  # resumed at the end: evaluated only
    assert json.loads((run_dir / "metrics.json").read_text())["ensemble"]["num_samples"] == 2


# -- a sampler's state ----------------------------------------------------------------------------------------------
def test_numpy_arrays_in_a_samplers_state_round_trip_exactly():
    from csg.engine.portable import NUMPY, portable_state, restored_state

    values = {"float64": np.linspace(0, 1, 7).reshape(7, 1), "big-endian view": np.arange(12, dtype=">i4")[::3],
              "scalar": np.float32(1.25), "bool": np.bool_(True), "strings": np.array(["a", "bc"]),
              "record": np.zeros(2, dtype=[("x", "<f4"), ("n", "i8")]), "empty": np.empty((0, 3), np.float16),
              "date": np.datetime64("2026-01-02"), "tensor": torch.arange(3), "plain": [1, 2.5, "x", None, (3,)]}
    state = {"state": {0: values}, "param_groups": [{"lr": 0.1, "params": [0]}]}
    encoded = portable_state(state, "sampler.optimizer._target_", object())
    assert NUMPY in encoded["state"][0]["float64"] and encoded["param_groups"] is state["param_groups"]
    buffer = io.BytesIO()
    torch.save(encoded, buffer)
    buffer.seek(0)
    back = restored_state(torch.load(buffer, weights_only=True))["state"][0]
    for key, value in values.items():
        if isinstance(value, (np.ndarray, np.generic)):
            assert type(back[key]) is type(value) and back[key].dtype == value.dtype, key
            assert back[key].tobytes() == np.ascontiguousarray(value).tobytes() and back[key].shape == value.shape
    assert torch.equal(back["tensor"], values["tensor"]) and back["plain"] == values["plain"]


@pytest.mark.parametrize("value, kind", [(collections.deque([1]), "collections.deque"),
                                          (np.array([object()]), "numpy.ndarray of Python objects"),
                                          (Fraction(1, 3), "fractions.Fraction")])
def test_a_state_value_no_checkpoint_can_hold_is_named_with_its_type(value, kind):
    from csg.engine.portable import portable_state

    with pytest.raises(ConfigError) as refused:
        portable_state({"state": {0: {"cache": value}}}, "sampler.optimizer._target_", HistorySGD([torch.ones(1)],
                       lr=0.1, num_data=1, temperature=1.0, weight_decay=0.0))
    message = str(refused.value)
    assert message.startswith(f"sampler.optimizer._target_='{HERE}.HistorySGD' is not allowed: an optimizer whose ")
    assert f"its state_dict()['state'][0]['cache'] is a {kind}, which a checkpoint cannot hold safely" in message


def test_a_sampler_with_numpy_state_is_preempted_and_resumes_bit_for_bit(tmp_path):
    sampler = ["sampler=custom", f"sampler.optimizer._target_={HERE}.NumpyMomentum"]
    run(*sampler, run_dir=tmp_path / "full")
    NumpyMomentum.stop_at = 9  # in epoch 2 (6 steps an epoch), after the checkpoint of epoch 1
    try:
        with pytest.raises(Preempted) as stopped:
            run(*sampler, run_dir=tmp_path / "cut")
    finally:
        NumpyMomentum.stop_at = None
    assert stopped.value.checkpointed  # "run the same command to resume": and it does
    saved = read_checkpoint(tmp_path / "cut" / "checkpoint.pt")  # the weights-only reader of a resume
    assert saved["loop"]["iteration"] == 9 and "__csg_numpy__" in saved["sampler"]["state"][0]["momentum"]
    run(*sampler, run_dir=tmp_path / "cut")
    assert len(assert_same_samples(tmp_path / "full", tmp_path / "cut")) == 2


def test_a_sampler_state_no_checkpoint_can_hold_is_refused_after_its_first_step(tmp_path, capsys):
    from csg.launch.cli import run_or_exit

    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        run_or_exit(lambda: run("sampler=custom", f"sampler.optimizer._target_={HERE}.HistorySGD", run_dir=run_dir),
                    run_dir)
    assert stop.value.code == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert line.startswith(f"error: sampler.optimizer._target_='{HERE}.HistorySGD' is not allowed: an optimizer ")
    assert "its state_dict()['state'][0]['history'] is a collections.deque" in line
    assert not (run_dir / "checkpoint.pt").exists() and not read_samples(run_dir)  # no resume was ever promised


def test_a_sampler_state_no_checkpoint_can_hold_before_training_is_refused_with_nothing_written(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"its state_dict\(\)\['param_groups'\]\[0\]\['ratio'\] is a fractions"):
        run("sampler=custom", f"sampler.optimizer._target_={HERE}.FractionSGD", run_dir=run_dir)
    assert not run_dir.exists()
    # without checkpoints (no epoch period, no signal) nothing is ever saved: the sampler runs
    metrics = run("sampler=custom", f"sampler.optimizer._target_={HERE}.FractionSGD",
                  "trainer.checkpoint.every_n_epochs=0", "trainer.checkpoint.signals=[]", run_dir=run_dir)
    assert metrics["ensemble"]["num_samples"] == 2


# -- full disks -----------------------------------------------------------------------------------------------------
class _FullAfter(io.FileIO):
    """A file on a disk with ``room`` bytes left: writes beyond fail with ENOSPC, as a full file system's do."""

    room = 2000

    def write(self, data):
        left = self.room - self.tell()
        if left <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(bytes(data)[:left])


@pytest.fixture
def disk_fills_at(monkeypatch):
    """``fills(prefix, nth)``: the ``nth`` atomic write of a file whose name starts with ``prefix`` meets a full
    disk (torch.save's own zip writer then raises a RuntimeError, not an OSError)."""
    import csg.io.atomic

    real_fdopen, seen = os.fdopen, []

    def fills(prefix: str, nth: int) -> None:
        def fdopen(fd, mode="r", *args, **kwargs):
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
            if mode == "wb" and name.startswith(f".{prefix}"):
                seen.append(name)
                if len(seen) == nth:
                    return io.BufferedWriter(_FullAfter(fd, "wb"))
            return real_fdopen(fd, mode, *args, **kwargs)

        monkeypatch.setattr(csg.io.atomic.os, "fdopen", fdopen)

    yield fills
    monkeypatch.setattr(csg.io.atomic.os, "fdopen", real_fdopen)


@pytest.mark.parametrize("writer, nth, kept_epoch", [("checkpoint.pt", 3, 2), ("samples", 2, 3)])
def test_a_full_disk_in_torch_save_is_one_line_and_keeps_the_last_checkpoint(tmp_path, capsys, disk_fills_at,
                                                                            writer, nth, kept_epoch):
    from csg.launch.cli import run_or_exit

    run_dir = tmp_path / "run"
    prefix = "checkpoint.pt" if writer == "checkpoint.pt" else "sample_"
    disk_fills_at(prefix, nth)  # the 3rd checkpoint (epoch 3), or the 2nd sample (epoch 4)
    with pytest.raises(SystemExit) as stop:
        run_or_exit(lambda: run(run_dir=run_dir), run_dir)
    assert stop.value.code == 1
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    failed = run_dir / "checkpoint.pt" if writer == "checkpoint.pt" else run_dir / "samples" / \
        "sample_0001_cycle01_epoch0003.pt"
    assert line == (f"error: No space left on device: {failed}; the files already written in {run_dir} are kept, and "
                    "the same command resumes the run from checkpoint.pt")
    assert not list(run_dir.glob("**/.*.tmp"))  # no temporary file is left
    assert read_checkpoint(run_dir / "checkpoint.pt")["loop"]["epoch"] == kept_epoch  # the last good one, intact
    metrics = run(run_dir=run_dir)  # (the disk had room again: only the nth write failed)
    assert metrics["ensemble"]["num_samples"] == 2


def test_a_full_disk_before_any_checkpoint_says_how_to_start_over(tmp_path, capsys, disk_fills_at):
    from csg.launch.cli import run_or_exit

    run_dir = tmp_path / "run"
    disk_fills_at("sample_", 2)
    with pytest.raises(SystemExit):
        run_or_exit(lambda: run("trainer.checkpoint.every_n_epochs=0", run_dir=run_dir), run_dir)
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert line.endswith(f"no checkpoint had been written in {run_dir}: the same command with "
                         "trainer.checkpoint.resume=false moves what it holds into earlier/<time>/ and starts the run "
                         "again")
    again = run("trainer.checkpoint.every_n_epochs=0", "trainer.checkpoint.resume=false", run_dir=run_dir)
    assert again["ensemble"]["num_samples"] == 2


def test_torch_saves_write_failure_without_an_os_error_is_an_os_error_naming_the_file(tmp_path, monkeypatch):
    from csg.io.atomic import atomic_torch_save, atomic_write_json

    target = tmp_path / "checkpoint.pt"
    atomic_torch_save({"good": torch.ones(2)}, target)
    before = target.read_bytes()

    def failing_save(obj, handle):
        handle.write(b"PK" * 100)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file "
                           "data/0: file write failed")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError) as failed:
        atomic_torch_save({"new": torch.zeros(2)}, target)
    assert failed.value.filename == str(target) and failed.value.errno in (errno.EIO, errno.ENOSPC)
    assert "PytorchStreamWriter failed writing file data/0" in failed.value.strerror or \
        failed.value.errno == errno.ENOSPC
    monkeypatch.setattr(torch, "save", lambda obj, handle: (_ for _ in ()).throw(RuntimeError("not a write")))
    with pytest.raises(RuntimeError, match="not a write"):  # any other error of the writer is left as it is
        atomic_torch_save({"new": torch.zeros(2)}, target)
    assert target.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
    monkeypatch.undo()
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, mode="r", *a, **k: io.BufferedWriter(_FullAfter(fd, "wb"))
                        if mode == "wb" else real_fdopen(fd, mode, *a, **k))
    with pytest.raises(OSError) as full:
        atomic_write_json(tmp_path / "metrics.json", {"x": "y" * 10_000})
    assert full.value.errno == errno.ENOSPC and full.value.filename == str(tmp_path / "metrics.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
