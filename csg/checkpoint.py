"""Checkpoints that resume a chain bit for bit, and preemption signals (SLURM).

A checkpoint holds the model, the sampler (momentum buffers and its noise
generator), the loss scaler, the loop position (epoch, batch, iteration and
the running sums of the epoch in progress), the samples written so far, and
every global random state (torch, CUDA, numpy, Python). Data order and
augmentation need no state: they are functions of (seed, epoch, batch) (see
:mod:`csg.data.bundle`). Checkpoints are written atomically.

:class:`PreemptionSignals` catches SIGTERM / SIGUSR1 / SIGUSR2 while a chain
trains; the loop then saves a checkpoint after the current step and raises
:class:`Preempted`, and :func:`let_signal_act` hands the signal back to its
previous owner: the default action ends the process as the signal would
have (exit status 128 + signal, what SLURM sees for a terminated job), and
submitit's handler requeues the job, which then resumes from the checkpoint.
"""

from __future__ import annotations

import os
import random
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from csg.atomic import atomic_torch_save


@dataclass
class LoopState:
    """Where a chain is: the next (epoch, batch) to run, the iteration count, the epoch's running sums."""

    epoch: int = 0
    batch: int = 0
    iteration: int = 0
    loss_sum: float = 0.0
    correct: int = 0
    seen: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


class Preempted(Exception):
    """A signal asked the run to stop; a checkpoint has been written."""

    def __init__(self, signum: int, previous_handler):
        self.signum, self.previous_handler = signum, previous_handler
        super().__init__(f"stopped by {signal.Signals(signum).name} after saving a checkpoint")


class PreemptionSignals:
    """Context manager: record the first of ``names`` that arrives instead of dying at once."""

    def __init__(self, names: list[str] | tuple[str, ...] = ("SIGTERM", "SIGUSR1", "SIGUSR2")):
        self.numbers = [getattr(signal, name) for name in names]
        self.received: int | None = None
        self.previous: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum

    def __enter__(self) -> "PreemptionSignals":
        for number in self.numbers:
            self.previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)

    def preempted(self) -> Preempted:
        return Preempted(self.received, self.previous.get(self.received, signal.SIG_DFL))


def let_signal_act(error: Preempted) -> None:
    """Restore the signal's previous handler and send the signal again; exit 128 + signal if it returns."""
    handler = error.previous_handler
    signal.signal(error.signum, handler if handler is not None else signal.SIG_DFL)
    os.kill(os.getpid(), error.signum)
    raise SystemExit(128 + error.signum)


def random_states() -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def set_random_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])


def save_checkpoint(path: str | Path, *, model, sampler, state: LoopState, scaler=None, extra: dict | None = None) -> None:
    """Write the chain's complete state to ``path`` atomically."""
    atomic_torch_save(
        {
            "model": model.state_dict(),
            "sampler": sampler.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "loop": asdict(state),
            "random": random_states(),
            **(extra or {}),
        },
        path,
    )


def load_checkpoint(path: str | Path, *, model, sampler, scaler=None) -> tuple[LoopState, dict[str, Any]]:
    """Restore model, sampler, scaler and random states from ``path``; returns the loop state and the file."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    model.load_state_dict(checkpoint["model"])
    sampler.load_state_dict(checkpoint["sampler"])
    if scaler is not None and checkpoint["scaler"] is not None:
        scaler.load_state_dict(checkpoint["scaler"])
    set_random_states(checkpoint["random"])
    return LoopState(**checkpoint["loop"]), checkpoint
