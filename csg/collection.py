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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from csg.atomic import atomic_torch_save
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
    """The ``samples/`` directory of a run: atomic writes, sorted listing, loading."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def save(self, model: torch.nn.Module, *, index: int, cycle: int, epoch: int, **metadata: Any) -> Path:
        state_dict = {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}
        path = self.directory / f"sample_{index:04d}_cycle{cycle:02d}_epoch{epoch:04d}.pt"
        atomic_torch_save({"state_dict": state_dict, "index": index, "cycle": cycle, "epoch": epoch, **metadata}, path)
        return path

    def paths(self) -> list[Path]:
        """Every sample file below the directory, chain folders included, in (chain, collection) order."""
        return sorted(self.directory.glob("**/sample_*.pt"))

    def __len__(self) -> int:
        return len(self.paths())

    @staticmethod
    def load(path: str | Path) -> dict[str, Any]:
        return torch.load(path, map_location="cpu", weights_only=True)

    @staticmethod
    def metadata(path: str | Path) -> dict[str, Any]:
        """A sample's record without its ``state_dict`` (memory-mapped: the tensors are not read)."""
        record = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        record.pop("state_dict", None)
        return record
