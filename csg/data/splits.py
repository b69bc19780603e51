"""What a data-set loader returns: :class:`Splits` (train and test sets with their facts) and
:class:`InMemoryDataset` (whole tensors in memory)."""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils.data import Dataset, TensorDataset

from csg.data.transforms import Normalize

__all__ = ["InMemoryDataset", "Splits"]


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
