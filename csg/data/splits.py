"""What a data-set loader returns: :class:`Splits` (train and test sets with their facts) and
:class:`InMemoryDataset` (whole tensors in memory)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import Dataset, TensorDataset

from csg.data.transforms import Normalize

__all__ = ["HOLDOUT_SEED", "InMemoryDataset", "Splits", "TargetScale", "hold_out", "standardize_targets"]

HOLDOUT_SEED = 20_211_129  # one permutation for every run, whatever its seed: grid points share their held-out set


class InMemoryDataset(TensorDataset):
    """Whole tensors in memory: (inputs, targets); images as uint8 (N, C, H, W) or features as float."""


@dataclass
class Splits:
    """What a data-set loader returns.

    For data held as tensors (:class:`InMemoryDataset`), ``normalize`` turns uint8
    images into the model's input and ``augment`` asks for random crops (with
    ``padding``) and flips in training. Other data sets (ImageNet) bring their
    own transforms and leave both unset. ``train_eval`` is the training set with
    the test-time transform, ``None`` if that is ``train`` itself.

    ``task``: ``classification`` (integer labels; ``num_classes`` classes) or ``regression`` (real targets of
    shape ``(N, num_classes)``: ``num_classes`` is then the number of target columns); ``target_scale``: for
    targets standardised on the training split, the map back to their original units.
    """

    train: Dataset
    test: Dataset
    num_classes: int
    input_shape: tuple[int, ...]
    train_eval: Dataset | None = None
    source: str = ""  # where the files came from, recorded in metrics.json
    normalize: Normalize | None = None
    augment: bool = False
    padding: int = 4
    task: str = "classification"
    target_scale: TargetScale | None = None


@dataclass(frozen=True)
class TargetScale:
    """Standardised targets' map back to the original units, per column: ``y = shift + scale * z``."""

    shift: tuple[float, ...]
    scale: tuple[float, ...]

    def mean_and_variance(self, mean: torch.Tensor, variance: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A Gaussian's mean and variance (last dimension: the columns) in the original units."""
        shift = torch.tensor(self.shift, dtype=mean.dtype, device=mean.device)
        scale = torch.tensor(self.scale, dtype=mean.dtype, device=mean.device)
        return shift + scale * mean, variance * scale.square()

    def as_dict(self) -> dict[str, list[float]]:
        """The record ``metrics.json`` and a posterior file hold: ``{"shift": [...], "scale": [...]}``."""
        return {"shift": list(self.shift), "scale": list(self.scale)}

    @classmethod
    def from_dict(cls, record: dict) -> TargetScale:
        """The TargetScale of :meth:`as_dict`'s record."""
        return cls(tuple(float(v) for v in record["shift"]), tuple(float(v) for v in record["scale"]))

    def targets(self, z: torch.Tensor) -> torch.Tensor:
        """Standardised targets in the original units."""
        shift = torch.tensor(self.shift, dtype=z.dtype, device=z.device)
        return shift + torch.tensor(self.scale, dtype=z.dtype, device=z.device) * z


def standardize_targets(train: torch.Tensor, test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, TargetScale]:
    """Targets ``(N, d)`` standardised by the training split's mean and standard deviation (a constant column keeps
    scale 1), as the UCI regression benchmark does (Hernandez-Lobato and Adams 2015; its code divides by the
    deviation with N, this by the one with N - 1, a factor sqrt(N / (N - 1)) on the scale): ``(train, test, scale)``."""
    shift = train.double().mean(0)
    scale = train.double().std(0) if train.shape[0] > 1 else torch.ones_like(shift)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    to_z = lambda y: ((y.double() - shift) / scale).to(train.dtype)  # noqa: E731
    return to_z(train), to_z(test), TargetScale(tuple(shift.tolist()), tuple(scale.tolist()))


def _subset(dataset: Dataset, indices: torch.Tensor) -> Dataset:
    if isinstance(dataset, InMemoryDataset):
        return InMemoryDataset(*(tensor[indices] for tensor in dataset.tensors))
    return torch.utils.data.Subset(dataset, indices.tolist())


def hold_out(splits: Splits, share: float, seed: int = HOLDOUT_SEED) -> Splits:
    """``splits`` with ``share`` of the training examples held out as the test split (``data.holdout``, what
    ``csg-tune`` scores on): the last ``round(share x N)`` of one permutation seeded by ``seed`` (the same for every
    run), taken with the test-time transform; the rest trains. The original test split is not read by such a run.
    Regression targets keep the standardisation of the whole training split."""
    n = len(splits.train)
    held = round(share * n)
    if not 1 <= held < n:
        from csg.errors import ConfigError

        raise ConfigError("data.holdout", share, f"a share in (0, 1) that holds out at least one of the {n} training "
                          "examples and keeps at least one")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    keep, out = order[:-held].sort().values, order[-held:].sort().values
    test_source = splits.train_eval if splits.train_eval is not None else splits.train
    return Splits(train=_subset(splits.train, keep), test=_subset(test_source, out), num_classes=splits.num_classes,
                  input_shape=splits.input_shape,
                  train_eval=None if splits.train_eval is None else _subset(splits.train_eval, keep),
                  source=f"{splits.source} (training split less {held} held out)".strip(),
                  normalize=splits.normalize, augment=splits.augment, padding=splits.padding, task=splits.task,
                  target_scale=splits.target_scale)
