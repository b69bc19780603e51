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


@dataclass
class DataBundle:
    """Loaders and facts of one data set for one run."""

    name: str
    train: DataLoader
    test: DataLoader
    train_eval: DataLoader
    num_train: int
    num_test: int
    num_classes: int
    input_shape: tuple[int, ...]


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
    """A ``TensorDataset`` that hands whole batches to the ``DataLoader`` (one index op per tensor)."""

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, ...]:
        index = torch.as_tensor(indices, dtype=torch.long)
        return tuple(tensor[index] for tensor in self.tensors)


def _batched(batch):
    return batch


def _loader(dataset: Dataset, batch_size: int, *, shuffle: bool, generator=None, num_workers: int = 0, pin_memory=False):
    in_memory = isinstance(dataset, InMemoryDataset)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        num_workers=0 if in_memory else num_workers,
        collate_fn=_batched if in_memory else None,
        pin_memory=pin_memory and not in_memory,
        drop_last=False,
        persistent_workers=num_workers > 0 and not in_memory,
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
    )
