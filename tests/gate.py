"""Runs that wait for a test's signal: a signal test never races the run it stops.

Each gate is a barrier file. At a known point the run writes ``<barrier>.waiting`` and sleeps until the barrier
exists; the test waits for ``.waiting``, sends its signal, and only then creates the barrier
(:func:`signal_when_waiting`). The run therefore cannot finish before the signal, and the signal comes at the
point the test means (a checkpoint, a sample, the data or the evaluation in progress). Sleeping costs no CPU.

- ``python tests/gate.py BARRIER TRAIN_PY [ARGS ...]``: ``python TRAIN_PY ARGS``, waiting right after its first
  sample is written (the run's config and data are the command's own: a resumed run compares bit for bit with
  an uninterrupted one made without the gate);
- ``data._target_=tests.gate.blobs_built_after +data.barrier=B``: data whose building waits (a slow reader);
- ``data._target_=tests.gate.blobs_evaluated_after +data.barrier=B +data.once=F data.in_memory=false``: the
  test items wait once file ``F`` exists (``F``: the run's checkpoint, which the final evaluation comes after).

A gate never waits more than :data:`LIMIT_S`: a test that failed before its signal leaves no process behind.
"""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

from torch.utils.data import Dataset

LIMIT_S = 300.0


def wait_for(barrier: str | os.PathLike) -> None:
    """Write ``<barrier>.waiting``, then sleep until ``barrier`` exists (at most :data:`LIMIT_S`)."""
    barrier = Path(barrier)
    if barrier.exists():
        return
    Path(f"{barrier}.waiting").touch()
    deadline = time.monotonic() + LIMIT_S
    while not barrier.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def signal_when_waiting(process: subprocess.Popen, barrier: str | os.PathLike, signum: int,
                        timeout: float = 120.0) -> None:
    """Wait until ``process`` waits at ``barrier``, send it ``signum``, then open the barrier.

    Fails (with the process's output) if the process ends or ``timeout`` passes before it waits."""
    waiting, deadline = Path(f"{barrier}.waiting"), time.monotonic() + timeout
    while not waiting.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            out, err = process.communicate(timeout=60)
            raise AssertionError(f"the run never waited at {barrier} (exit {process.returncode}):\n{out}\n{err}")
        time.sleep(0.01)
    process.send_signal(signum)
    Path(barrier).touch()


class Gated(Dataset):
    """``data``'s items; once file ``once`` exists, each read first passes :func:`wait_for` ``barrier``."""

    def __init__(self, data: Dataset, barrier: str, once: str):
        self.data, self.barrier, self.once = data, barrier, once

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        if Path(self.once).exists():
            wait_for(self.barrier)
        inputs, label = self.data[index]
        return inputs, int(label)


def blobs_built_after(barrier: str, **options):
    """The blobs of ``tests/own_components.py``, returned once ``barrier`` exists: data that are slow to build."""
    from tests.own_components import blobs

    wait_for(barrier)
    return blobs(**options)


def blobs_evaluated_after(barrier: str, once: str, **options):
    """The blobs, with test items that wait for ``barrier`` once file ``once`` exists (serve them item by item:
    ``data.in_memory=false``)."""
    from tests.own_components import blobs

    train, test = blobs(**options)
    return train, Gated(test, barrier, once)


def _wait_after_the_first_sample(barrier: str) -> None:
    """Make :meth:`csg.engine.samples.SampleStore.save` wait for ``barrier`` once it has written a sample."""
    from csg.engine.samples import SampleStore

    save = SampleStore.save

    def save_then_wait(self, *args, **kwargs):
        path = save(self, *args, **kwargs)
        wait_for(barrier)
        return path

    SampleStore.save = save_then_wait


def start(barrier: Path, train_py: str | os.PathLike, args: list[str], cwd: Path, env: dict | None = None
          ) -> subprocess.Popen:
    """``python TRAIN_PY ARGS`` in ``cwd`` through this gate, its output piped."""
    command = [sys.executable, str(Path(__file__).resolve()), str(barrier), str(train_py), *args]
    return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


if __name__ == "__main__":
    # As a terminal's foreground process has it: a command started in the background by a non-interactive
    # shell (CI, `make test &`) inherits SIGINT ignored, and Python then installs no Ctrl-C handler at all
    signal.signal(signal.SIGINT, signal.default_int_handler)
    barrier, train_py, *arguments = sys.argv[1:]
    sys.path[0] = str(Path(train_py).resolve().parent)  # as `python TRAIN_PY` has it, not this folder
    _wait_after_the_first_sample(barrier)
    sys.argv = [train_py, *arguments]
    runpy.run_path(train_py, run_name="__main__")
