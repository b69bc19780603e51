"""Which epochs yield posterior samples, and the sample files themselves.

The rule (the authors' code, generalised): an epoch belongs to the cycle of
its last iteration; it is eligible when that iteration is in the sampling
stage; each cycle keeps its LAST ``samples_per_cycle`` eligible epochs, and a
sample is the model at the end of each of them. With 200 epochs, M = 4 cycles
and 3 samples per cycle this is the end of epochs 47, 48, 49 of every 50-epoch
cycle. A non-cyclical schedule is one cycle: its burn-in (``explore``) is the
exploration stage, so SGLD with 20 samples keeps the last 20 epochs and SGD
with 1 sample keeps the final model. Iterations past the last full cycle (the
``total_steps mod cycles`` remainder of :class:`csg.schedules.Cyclical`) never
yield samples.

Samples are written atomically to ``samples/`` (``samples/chainNN/`` for several
parallel chains) as ``torch.save``d dicts:
``{"state_dict", "index", "cycle", "epoch", "iteration", "lr", "temperature",
"train_loss"}``, named ``sample_0000_cycle00_epoch0047.pt`` so that names sort
in collection order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from csg.atomic import atomic_torch_save
from csg.errors import ConfigError, first_line
from csg.schedules import Schedule


@dataclass(frozen=True)
class CollectionPoint:
    """A sample is taken at the end of ``epoch`` (0-based), which ends at ``iteration``."""

    epoch: int
    cycle: int
    iteration: int


def eligible_epochs(schedule: Schedule, epochs: int, batches_per_epoch: int) -> dict[int, list[CollectionPoint]]:
    """For each cycle 0..cycles-1, the epochs whose last iteration is in its sampling stage."""
    by_cycle: dict[int, list[CollectionPoint]] = {c: [] for c in range(schedule.cycles)}
    for epoch in range(epochs):
        last = (epoch + 1) * batches_per_epoch - 1
        cycle = schedule.cycle(last)
        if cycle in by_cycle and schedule.sampling(last):
            by_cycle[cycle].append(CollectionPoint(epoch, cycle, last))
    return by_cycle


def collection_points(
    schedule: Schedule, epochs: int, batches_per_epoch: int, samples_per_cycle: int
) -> list[CollectionPoint]:
    """The epochs at whose end a sample is saved, in order.

    Raises ``ValueError`` when some cycle's sampling stage holds fewer than
    ``samples_per_cycle`` epoch ends; :func:`capacity` says how many fit.
    """
    by_cycle = eligible_epochs(schedule, epochs, batches_per_epoch)
    fits = capacity(by_cycle)
    if samples_per_cycle > fits:
        raise ValueError(f"samples_per_cycle={samples_per_cycle} exceeds the {fits} epoch ends per cycle available")
    return [point for points in by_cycle.values() for point in points[len(points) - samples_per_cycle :]]


def capacity(by_cycle: dict[int, list[CollectionPoint]]) -> int:
    """The largest samples_per_cycle that every cycle can hold."""
    return min(len(points) for points in by_cycle.values())


class SampleStore:
    """The ``samples/`` directory of a run: atomic writes, sorted listing, loading and checking.

    :meth:`load` and :meth:`metadata` read a sample with ``torch.load(weights_only=True)`` (never unpickling
    anything but tensors and plain containers) and refuse a file that is not a complete sample with a
    one-line :class:`~csg.errors.ConfigError` (key ``samples``) naming the file and what is wrong with it;
    :meth:`verify` checks every sample of the store that way before any of them is used.
    """

    RECORD_KEYS = ("state_dict", "index", "cycle", "epoch")  # what every sample file holds (see save)

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def save(self, model: torch.nn.Module, *, index: int, cycle: int, epoch: int, **metadata: Any) -> Path:
        state_dict = {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}
        path = self.directory / self.file_name(index, cycle, epoch)
        atomic_torch_save({"state_dict": state_dict, "index": index, "cycle": cycle, "epoch": epoch, **metadata}, path)
        return path

    @staticmethod
    def file_name(index: int, cycle: int, epoch: int) -> str:
        """The name of the ``index``-th sample, taken in ``cycle`` at the end of ``epoch``: names sort in order."""
        return f"sample_{index:04d}_cycle{cycle:02d}_epoch{epoch:04d}.pt"

    def paths(self) -> list[Path]:
        """Every sample file below the directory, chain folders included, in (chain, collection) order."""
        return sorted(self.directory.glob("**/sample_*.pt"))

    def __len__(self) -> int:
        return len(self.paths())

    @staticmethod
    def load(path: str | Path) -> dict[str, Any]:
        """A sample's record; :class:`ConfigError` naming the file when it is damaged or not a sample."""
        return _read_sample(Path(path), mmap=False)

    @staticmethod
    def metadata(path: str | Path) -> dict[str, Any]:
        """A sample's record without its ``state_dict`` (memory-mapped: the tensors are not read)."""
        record = _read_sample(Path(path), mmap=True)
        record.pop("state_dict", None)
        return record

    def verify(self, expected: list[str] | None = None, *,
               model_state: Mapping[str, torch.Tensor] | None = None) -> None:
        """Check that the store's samples can be used, reading each one's record (memory-mapped, cheap).

        ``expected``: file names relative to the store's directory (``sample_0000_cycle00_epoch0008.pt``,
        ``chain01/...``) that must exist, e.g. the samples a checkpoint says were written. ``model_state``:
        a model's ``state_dict`` that every sample must fit (the same keys, each tensor of the same shape).
        Raises :class:`ConfigError` with key ``samples`` naming the first (in name order) missing file, file
        that is not a complete sample of train.py (truncated, empty, another format, a record without its
        keys), or sample that does not fit ``model_state``. A store without samples passes when nothing is
        expected.
        """
        wanted = {self.directory / name for name in (expected or [])}
        for path in sorted(set(self.paths()) | wanted):
            if not path.exists():
                raise ConfigError("samples", str(path), "a sample file this run wrote: it is missing")
            if not path.is_file():
                raise ConfigError("samples", str(path), "a sample file: it is not a file")
            record = _read_sample(path, mmap=True)
            if model_state is not None:
                problem = _misfit(record["state_dict"], model_state)
                if problem:
                    raise ConfigError("samples", str(path), f"a sample of the run's model: it does not fit ({problem})")


def _read_sample(path: Path, mmap: bool) -> dict[str, Any]:
    """``torch.load`` of a sample file (weights only), or a one-line :class:`ConfigError` saying what is wrong."""
    try:
        record = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise ConfigError("samples", str(path), "a sample file: it does not exist") from None
    except IsADirectoryError:
        raise ConfigError("samples", str(path), "a sample file: it is a directory") from None
    except PermissionError:
        raise ConfigError("samples", str(path), "a sample file this user can read: permission denied") from None
    except Exception as error:  # torch.load raises RuntimeError, UnpicklingError, EOFError, KeyError, ... by format
        raise ConfigError("samples", str(path),
                          f"a sample file written by train.py: {_unreadable(path, error)}") from None
    missing = [key for key in SampleStore.RECORD_KEYS if not isinstance(record, dict) or key not in record]
    if missing:
        what = (f"a record without {', '.join(missing)}" if isinstance(record, dict)
                else f"a {type(record).__name__}")
        raise ConfigError("samples", str(path), f"a sample file written by train.py: it holds {what}")
    state = record["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError("samples", str(path),
                          "a sample file written by train.py: its state_dict is not a dict of tensors")
    return record


def _unreadable(path: Path, error: Exception) -> str:
    """Why ``torch.load`` failed, in words: torch's own messages span many lines."""
    import zipfile

    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError as os_error:
        return f"it cannot be read ({os_error.strerror})"
    if not head:
        return "it is empty"
    if head == b"PK\x03\x04" and not zipfile.is_zipfile(path):
        return "it is truncated (a torch.save archive without its end)"
    if head != b"PK\x03\x04":
        return "it is not a file of torch.save (another format, or damaged from its start)"
    if "weights only" in str(error).lower() or "weights_only" in str(error):
        return "it holds Python objects other than tensors, which are not unpickled (torch.load weights_only=True)"
    return f"it is damaged ({type(error).__name__}: {first_line(error)[:160]})"


def _misfit(state: Mapping[str, torch.Tensor], reference: Mapping[str, torch.Tensor]) -> str:
    """How ``state`` differs from ``reference`` in keys or shapes ('' when it fits)."""
    missing, unexpected = [k for k in reference if k not in state], [k for k in state if k not in reference]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing keys {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
        if unexpected:
            parts.append(f"unexpected keys {', '.join(unexpected[:3])}{' ...' if len(unexpected) > 3 else ''}")
        return "; ".join(parts)
    for key, tensor in reference.items():
        if tuple(state[key].shape) != tuple(tensor.shape):
            return f"{key} has shape {list(state[key].shape)}, the model's {list(tensor.shape)}"
    return ""
