"""The data-set registry and the loaders built from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from csg.errors import ConfigError


@dataclass
class Splits:
    """What a data-set loader returns.

    ``train`` is augmented (if the data set augments); ``train_eval`` is the
    same examples with the test-time transform (for training-set likelihoods,
    e.g. the harmonic-mean cycle weights), ``None`` if identical to ``train``.
    """

    train: Dataset
    test: Dataset
    num_classes: int
    input_shape: tuple[int, ...]
    train_eval: Dataset | None = None
    source: str = ""  # where the files came from, recorded in metrics.json


@dataclass
class DataBundle:
    """Loaders and facts of one data set for one run."""

    name: str
    train: DataLoader | InMemoryLoader
    test: DataLoader | InMemoryLoader
    train_eval: DataLoader | InMemoryLoader
    num_train: int
    num_test: int
    num_classes: int
    input_shape: tuple[int, ...]
    source: str = ""


_DATASETS: dict[str, Callable[..., Splits]] = {}


def register_dataset(name: str):
    """Decorator: register ``fn(root=..., download=..., **options) -> Splits`` under ``name``."""

    def decorator(fn: Callable[..., Splits]) -> Callable[..., Splits]:
        _DATASETS[name] = fn
        return fn

    return decorator


def list_datasets() -> list[str]:
    return sorted(_DATASETS)


class InMemoryDataset(TensorDataset):
    """A ``TensorDataset`` of whole tensors in memory (features, targets), served by :class:`InMemoryLoader`."""


class InMemoryLoader:
    """Mini-batches of an :class:`InMemoryDataset`: a random permutation per epoch, then slices.

    ``torch.utils.data.DataLoader`` is the wrong tool for data already held as
    tensors: its sampler yields one Python index per example per epoch and its
    collate stacks examples one by one. Here an epoch costs one ``randperm``
    (drawn from ``generator``, so the order is reproducible) and one indexing
    per batch; the last batch may be partial, as in the authors' code.
    """

    def __init__(self, dataset: InMemoryDataset, batch_size: int, *, shuffle: bool, generator=None):
        self.dataset, self.batch_size, self.shuffle, self.generator = dataset, batch_size, shuffle, generator

    def __len__(self) -> int:
        return -(-len(self.dataset) // self.batch_size)

    def __iter__(self):
        tensors = self.dataset.tensors
        n = len(self.dataset)
        if not self.shuffle:
            for start in range(0, n, self.batch_size):
                yield tuple(t[start : start + self.batch_size] for t in tensors)
            return
        order = torch.randperm(n, generator=self.generator)
        for start in range(0, n, self.batch_size):
            index = order[start : start + self.batch_size]
            yield tuple(t[index] for t in tensors)


def _loader(dataset: Dataset, batch_size: int, *, shuffle: bool, generator=None, num_workers: int = 0, pin_memory=False):
    if isinstance(dataset, InMemoryDataset):
        return InMemoryLoader(dataset, batch_size, shuffle=shuffle, generator=generator)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        num_workers=num_workers,
        pin_memory=pin_memory,
        drop_last=False,
        persistent_workers=num_workers > 0,
    )


def build_data(
    name: str,
    *,
    batch_size: int,
    eval_batch_size: int = 1000,
    num_workers: int = 0,
    generator: torch.Generator | None = None,
    pin_memory: bool = False,
    **options: Any,
) -> DataBundle:
    """Load data set ``name`` and build its loaders; the training order follows ``generator``.

    ``options`` (``root``, ``download``, ...) go to the registered loader.
    """
    if name not in _DATASETS:
        raise ConfigError("data.name", name, f"one of {', '.join(list_datasets())}")
    splits = _DATASETS[name](**options)
    train_eval = splits.train_eval if splits.train_eval is not None else splits.train
    return DataBundle(
        name=name,
        train=_loader(splits.train, batch_size, shuffle=True, generator=generator, num_workers=num_workers, pin_memory=pin_memory),
        test=_loader(splits.test, eval_batch_size, shuffle=False, num_workers=num_workers, pin_memory=pin_memory),
        train_eval=_loader(train_eval, eval_batch_size, shuffle=False, num_workers=num_workers, pin_memory=pin_memory),
        num_train=len(splits.train),
        num_test=len(splits.test),
        num_classes=splits.num_classes,
        input_shape=splits.input_shape,
        source=splits.source,
    )
