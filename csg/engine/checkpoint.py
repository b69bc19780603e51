"""Checkpoints that resume a chain bit for bit, and preemption signals (SLURM).

A checkpoint holds the model, the sampler (momentum buffers and its noise
generator), the loss scaler, the loop position (epoch, batch, iteration and
the running sums of the epoch in progress), the samples written so far, and
every global random state (torch, CUDA, numpy, Python). Data order and
augmentation need no state: they are functions of (seed, epoch, batch) (see
:mod:`csg.data.bundle`). Checkpoints are written atomically.

:class:`PreemptionSignals` catches SIGTERM / SIGUSR1 / SIGUSR2 for a run's whole
life (:func:`csg.launch.run.run`). While a chain trains, the loop saves a checkpoint
after the current step and raises :class:`csg.errors.Preempted`; anywhere else (the data
and model being built, the final evaluation) the signal raises
:class:`Preempted` at once, naming the phase it stopped. Either way
:func:`let_signal_act` then hands the signal back to its previous owner: the
default action ends the process as the signal would have (exit status 128 +
signal, what SLURM sees for a terminated job), and submitit's handler requeues
the job, which then resumes from the checkpoint (or starts again).

A sampler's or model's state is saved through :func:`csg.engine.portable.portable_state`: numpy arrays become
tensors (and numpy arrays again on resume), and a value the weights-only reader could not read back is
refused in one line before the file is written, so a checkpoint that exists can always be resumed.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from csg.io.atomic import atomic_torch_save
from csg.errors import DamagedFileError, Preempted
from csg.engine.portable import portable_state, restore_optimizer_numpy, restored_state


@dataclass
class LoopState:
    """Where a chain is: the next (epoch, batch) to run, the iteration count, the epoch's running sums."""

    epoch: int = 0
    batch: int = 0
    iteration: int = 0
    loss_sum: float = 0.0
    correct: int | float = 0  # the epoch's correct predictions; for regression its squared error (a float)
    seen: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


# the phases a signal can stop a run in (the words of its one line: "stopped by SIGTERM <phase>")
PREPARING = "while the run was being prepared (checks, data, model)"
STARTING = "before training started"
TRAINING = "during training"
EVALUATING = "during the final evaluation"


class PreemptionSignals:
    """Context manager: the signals ``names`` stop the run with :class:`Preempted` instead of killing it.

    Inside :meth:`deferred` (the training loop) the first signal is only recorded in :attr:`received`: the
    loop polls it after every step, saves its checkpoint and raises :meth:`preempted`. Anywhere else the
    first signal raises :class:`Preempted` at once where the run is, naming :attr:`phase` (set by the run as
    it goes on). Later signals wait for the first one's stop. On exit the previous handlers are restored.
    """

    def __init__(self, names: list[str] | tuple[str, ...] = ("SIGTERM", "SIGUSR1", "SIGUSR2"), phase: str = PREPARING):
        self.numbers = [getattr(signal, name) for name in names]
        self.received: int | None = None
        self.previous: dict[int, Any] = {}  # the handler the signal goes back to (let_signal_act)
        self._replaced: dict[int, Any] = {}  # the handler restored on exit
        self.phase = phase
        self._deferring = False

    def _handle(self, signum, frame) -> None:
        if self.received is not None:
            return
        self.received = signum
        if not self._deferring:
            raise Preempted(signum, self.previous.get(signum, signal.SIG_DFL), self.phase)

    def __enter__(self) -> "PreemptionSignals":
        for number in self.numbers:
            replaced = self._replaced[number] = signal.signal(number, self._handle)
            owner = getattr(replaced, "__self__", None)  # nested in another run's: hand back to what that replaced
            self.previous[number] = owner.previous.get(number) if isinstance(owner, PreemptionSignals) else replaced
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self._replaced.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)

    @contextlib.contextmanager
    def deferred(self) -> Iterator["PreemptionSignals"]:
        """Within it a signal is only recorded (the training loop polls :attr:`received`)."""
        self._deferring = True
        try:
            yield self
        finally:
            self._deferring = False

    def raise_if_received(self) -> None:
        """Raise the :class:`Preempted` of a signal recorded but not yet acted on (it came after the loop's
        last poll), naming :attr:`phase`."""
        if self.received is not None:
            raise self.preempted(self.phase)

    def preempted(self, phase: str | None = None) -> Preempted:
        """The :class:`Preempted` of the signal received (``phase`` None: its checkpoint has been written)."""
        return Preempted(self.received, self.previous.get(self.received, signal.SIG_DFL), phase)


def let_signal_act(error: Preempted) -> None:
    """Restore the signal's previous handler and send the signal again; exit 128 + signal if it returns.

    Python's own Ctrl-C handler (SIGINT listed in ``trainer.checkpoint.signals``) would raise KeyboardInterrupt
    here, after the run's line: the exit is then 130 directly."""
    handler = error.previous_handler
    if handler is signal.default_int_handler:
        raise SystemExit(128 + error.signum)
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
    """Write the chain's complete state to ``path`` atomically.

    The model's and sampler's states go through :func:`saved_states`: a value the resume could not read is a
    one-line ConfigError and nothing is written (an earlier checkpoint stays as it was)."""
    atomic_torch_save(
        {
            **saved_states(model, sampler),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "loop": asdict(state),
            "random": random_states(device),
            **(extra or {}),
        },
        path,
    )


def saved_states(model, sampler, own_storage: bool = True) -> dict[str, Any]:
    """``{"model": ..., "sampler": ...}``: their state_dicts as a checkpoint holds them (:mod:`csg.engine.portable`:
    numpy values stored as tensors); a ConfigError naming the sampler's (or model's) key, the value's place and
    type where a value cannot be saved safely. Called at every checkpoint, and by the run before training and
    after its first step (``own_storage=False``: a check, the stacked chains' slices not copied)."""
    weights = model.state_dict()
    return {
        "model": portable_state(_own_storage(weights) if own_storage else weights, _key(model, "model"), model,
                                "a model"),
        "sampler": portable_state(sampler.state_dict(), _key(sampler, "sampler"), sampler),
    }


def _key(component: object, group: str) -> str:
    """The config key that chose ``component``: the group's ``_target_`` for a user's own class, else its name."""
    if type(component).__module__.split(".")[0] == "csg":
        return f"{group}.name"
    return "sampler.optimizer._target_" if group == "sampler" else f"{group}._target_"


def _own_storage(state_dict: dict[str, Any]) -> dict[str, Any]:
    """``state_dict`` with each tensor that views a larger storage (a stacked chain's slice, see
    :mod:`csg.engine.step.stacked`) copied, so that the checkpoint holds this chain's numbers and not all K chains'."""
    for key, value in state_dict.items():
        if isinstance(value, torch.Tensor) and value.untyped_storage().nbytes() > value.numel() * value.element_size():
            state_dict[key] = value.clone()
    return state_dict


_REQUIRED = ("model", "sampler", "scaler", "loop", "random", "config")


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint file as saved (on the CPU), loading nothing into the run yet.

    A file that cannot be read, or is not a checkpoint of train.py (a job killed while copying it, a full
    disk, another program's file), is a :class:`csg.errors.DamagedFileError` (a ConfigError) naming the file and
    the two ways on. The file is read with ``weights_only=True``: tensors, numbers, strings and containers only,
    so a file planted in a run directory (which lives on a shared file system) cannot run code; a file that needs
    any other class is refused like a damaged one. A FIFO, device or socket in its place is refused without being
    opened (a FIFO would block the resume forever).
    """
    from csg.io.trust import not_a_regular_file

    special = not_a_regular_file(path)
    try:
        if special is not None:
            raise OSError(special)
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
        raise DamagedFileError(
            "trainer.checkpoint.resume", True,
            f"a readable checkpoint; {path} cannot be read ({problem}): set trainer.checkpoint.resume=false to "
            "move the run's files aside (into earlier/<time>/) and start over, or use another hydra.run.dir",
            path=Path(path),
        )
    return checkpoint


def restore_checkpoint(checkpoint: dict[str, Any], *, model, sampler, scaler=None,
                       device: torch.device | None = None) -> LoopState:
    """Load a :func:`read_checkpoint` result into model, sampler, scaler and the random states; the loop state."""
    model.load_state_dict(restored_state(checkpoint["model"]))
    sampler.load_state_dict(checkpoint["sampler"])
    restore_optimizer_numpy(sampler, checkpoint["sampler"])
    if scaler is not None and checkpoint["scaler"] is not None:
        scaler.load_state_dict(checkpoint["scaler"])
    set_random_states(checkpoint["random"], device)
    return LoopState(**checkpoint["loop"])
