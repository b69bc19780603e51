"""A data set whose epochs take wall-clock time but almost no CPU: the SLURM tests' runs that must still be training
when a time-limit signal or ``scancel`` comes, on a 2-core machine that runs other tests meanwhile.

    data=custom data._target_=tests.slurm.slow_data.slow_blobs data.num_classes=3 +data.delay_s=0.01

Each training item is served after ``delay_s`` of sleep (the framework serves a Dataset that is not a
TensorDataset item by item, every epoch); the items themselves are the Gaussian blobs of
``tests/own_components.py``, so batches, their order and every result are as reproducible as any other run's.

A run that must still be training when its signal comes waits for it instead of racing it (``once``: a path,
``*`` allowed, e.g. the run's checkpoint; from the first item read after it exists):

- ``+data.once=... +data.barrier=B``: each item waits until file ``B`` exists, which the test creates after it
  has sent the signal (``scancel``; :func:`tests.gate.signal_when_waiting`);
- ``+data.once=... +data.hold=H``: each item waits until this process's run has received a preemption signal
  (SLURM's, at the time limit), then creates ``H``; once ``H`` exists nothing waits (the requeued job, and a
  reference run of the same command, go on).
"""

from __future__ import annotations

import glob
import signal
import time
from pathlib import Path

from torch.utils.data import Dataset, TensorDataset

from tests.gate import LIMIT_S, wait_for
from tests.own_components import blobs


class Slow(Dataset):
    """``data``'s items, each after ``delay_s`` seconds (and, from ``once`` on, after the wait the module describes)."""

    def __init__(self, data: TensorDataset, delay_s: float, once: str | None = None, barrier: str | None = None,
                 hold: str | None = None):
        self.data, self.delay_s, self.once, self.barrier, self.hold = data, delay_s, once, barrier, hold

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        time.sleep(self.delay_s)
        if self.once is not None and glob.glob(self.once):
            if self.barrier is not None:
                wait_for(self.barrier)
            if self.hold is not None:
                _hold_until_signalled(self.hold)
        inputs, label = self.data[index]
        return inputs, int(label)


def _hold_until_signalled(hold: str) -> None:
    """Sleep until this process's run has received a preemption signal or file ``hold`` exists (at most
    LIMIT_S); create ``hold`` when the signal has come."""
    deadline = time.monotonic() + LIMIT_S
    while not Path(hold).exists() and time.monotonic() < deadline:
        if _signalled():
            Path(hold).touch()
            return
        time.sleep(0.05)


def _signalled() -> bool:
    """Whether csg's preemption handler (:class:`csg.engine.checkpoint.PreemptionSignals`) has recorded a signal."""
    for number in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT):
        owner = getattr(signal.getsignal(number), "__self__", None)
        if getattr(owner, "received", None) is not None:
            return True
    return False


def slow_blobs(n: int = 64, classes: int = 3, dim: int = 4, seed: int = 0, delay_s: float = 0.01,
               once: str | None = None, barrier: str | None = None, hold: str | None = None):
    """(train, test): blobs whose training items each take ``delay_s`` to read (and wait as the module says from
    ``once`` on); the test items come at once."""
    train, test = blobs(n=n, classes=classes, dim=dim, seed=seed)
    return Slow(train, delay_s, once, barrier, hold), Slow(test, 0.0)
