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
import re
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from csg.atomic import atomic_torch_save
from csg.errors import ConfigError


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


def random_states(device: torch.device | None = None) -> dict[str, Any]:
    """Every global random state: torch's CPU generator, the CUDA generator of ``device`` (if a GPU), numpy, Python.

    Only the run's own GPU: asking for every device's state would open a CUDA context on each GPU of the node
    in every process."""
    cuda = device is not None and device.type == "cuda"
    return {
        "torch": torch.get_rng_state(),
        "cuda": [torch.cuda.get_rng_state(device)] if cuda else [],
        "numpy": _numpy_state(),
        "python": random.getstate(),
    }


def _numpy_state() -> dict[str, Any]:
    """numpy's global MT19937 state as a tensor and plain numbers: what ``torch.load(weights_only=True)`` reads
    without allow-listing any numpy class."""
    name, key, position, has_gauss, cached = np.random.get_state()
    return {"bit_generator": str(name), "key": torch.from_numpy(key.astype(np.int64)), "pos": int(position),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def set_random_states(states: dict[str, Any], device: torch.device | None = None) -> None:
    torch.set_rng_state(states["torch"])
    if states["cuda"] and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"][0], device)
    saved = states["numpy"]
    np.random.set_state((saved["bit_generator"], saved["key"].numpy().astype(np.uint32), saved["pos"],
                         saved["has_gauss"], saved["cached_gaussian"]))
    random.setstate(states["python"])


def save_checkpoint(path: str | Path, *, model, sampler, state: LoopState, scaler=None, extra: dict | None = None,
                    device: torch.device | None = None) -> None:
    """Write the chain's complete state to ``path`` atomically."""
    atomic_torch_save(
        {
            "model": _own_storage(model.state_dict()),
            "sampler": sampler.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "loop": asdict(state),
            "random": random_states(device),
            **(extra or {}),
        },
        path,
    )


def _own_storage(state_dict: dict[str, Any]) -> dict[str, Any]:
    """``state_dict`` with each tensor that views a larger storage (a stacked chain's slice, see
    :mod:`csg.stacking`) copied, so that the checkpoint holds this chain's numbers and not all K chains'."""
    for key, value in state_dict.items():
        if isinstance(value, torch.Tensor) and value.untyped_storage().nbytes() > value.numel() * value.element_size():
            state_dict[key] = value.clone()
    return state_dict


_REQUIRED = ("model", "sampler", "scaler", "loop", "random", "config")


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint file as saved (on the CPU), loading nothing into the run yet.

    A file that cannot be read, or is not a checkpoint of train.py (a job killed while copying it, a full
    disk, another program's file), is a :class:`ConfigError` naming the file and the two ways on. The file is
    read with ``weights_only=True``: tensors, numbers, strings and containers only, so a file planted in a run
    directory (which lives on a shared file system) cannot run code; a file that needs any other class is
    refused like a damaged one.
    """
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        missing = [key for key in _REQUIRED if key not in checkpoint] if isinstance(checkpoint, dict) else list(_REQUIRED)
        problem = f"it lacks {', '.join(missing)}" if missing else None
    except Exception as error:  # noqa: BLE001 - any failure to read is the same answer to the user
        message = str(error).strip()
        unsafe = re.search(r"Unsupported global: GLOBAL (\S+)", message)
        if unsafe:  # weights_only refused a class: the file would have run code, or is not ours
            problem = f"it holds {unsafe.group(1)}, which no checkpoint of train.py holds; nothing of it was run"
        else:
            problem = message.splitlines()[0].split(". ")[0] if message else type(error).__name__  # first sentence
    if problem is not None:
        raise ConfigError(
            "trainer.checkpoint.resume", True,
            f"a readable checkpoint; {path} cannot be read ({problem}): set trainer.checkpoint.resume=false to "
            "move the run's files aside (into earlier/<time>/) and start over, or use another hydra.run.dir",
        )
    return checkpoint


def restore_checkpoint(checkpoint: dict[str, Any], *, model, sampler, scaler=None,
                       device: torch.device | None = None) -> LoopState:
    """Load a :func:`read_checkpoint` result into model, sampler, scaler and the random states; the loop state."""
    model.load_state_dict(checkpoint["model"])
    sampler.load_state_dict(checkpoint["sampler"])
    if scaler is not None and checkpoint["scaler"] is not None:
        scaler.load_state_dict(checkpoint["scaler"])
    set_random_states(checkpoint["random"], device)
    return LoopState(**checkpoint["loop"])
