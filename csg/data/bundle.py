"""The data-set registry and the loaders built from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, TensorDataset

from csg.data.transforms import BatchAugment, Normalize
from csg.errors import ConfigError


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
    normalize: Normalize | None = None


_DATASETS: dict[str, Callable[..., Splits]] = {}


def register_dataset(name: str):
    """Decorator: register ``fn(root=..., download=..., **options) -> Splits`` under ``name``."""

    def decorator(fn: Callable[..., Splits]) -> Callable[..., Splits]:
        _DATASETS[name] = fn
        return fn

    return decorator


def list_datasets() -> list[str]:
    return sorted(_DATASETS)


def load_splits(name: str, key: str = "data.name", **options: Any) -> Splits:
    if name not in _DATASETS:
        raise ConfigError(key, name, f"one of {', '.join(list_datasets())}")
    return _DATASETS[name](**options)


class InMemoryLoader:
    """Mini-batches of an :class:`InMemoryDataset`: a random permutation per epoch, then slices.

    ``torch.utils.data.DataLoader`` is the wrong tool for data already held as
    tensors: its sampler yields one Python index per example per epoch and its
    collate stacks examples one by one. Here an epoch costs one ``randperm``
    (drawn from ``generator``, so the order is reproducible) and one indexing
    per batch; the last batch may be partial, as in the authors' code. The
    tensors may live on the accelerator; ``transform`` (a batched callable,
    e.g. :class:`BatchAugment`) then runs there too.
    """

    def __init__(self, dataset: InMemoryDataset, batch_size: int, *, shuffle: bool, generator=None,
                 transform: Callable[[Tensor], Tensor] | None = None):
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, shuffle
        self.generator, self.transform = generator, transform

    def __len__(self) -> int:
        return -(-len(self.dataset) // self.batch_size)

    def __iter__(self):
        inputs, targets = self.dataset.tensors
        n = len(self.dataset)
        order = torch.randperm(n, generator=self.generator, device=inputs.device) if self.shuffle else None
        for start in range(0, n, self.batch_size):
            index = slice(start, start + self.batch_size) if order is None else order[start : start + self.batch_size]
            x = inputs[index]
            yield (self.transform(x) if self.transform is not None else x), targets[index]


class PerExampleImages(Dataset):
    """uint8 images with a per-example torchvision transform: the classic CPU data-loader path."""

    def __init__(self, dataset: InMemoryDataset, transform):
        self.images, self.targets = dataset.tensors
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        return self.transform(self.images[index]), self.targets[index]


def _torchvision_train_transform(splits: Splits):
    from csg._torchvision_compat import ensure_torchvision

    ensure_torchvision()
    from torchvision.transforms import v2
    size = splits.input_shape[-2:]
    return v2.Compose([
        v2.RandomCrop(size, padding=splits.padding),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(splits.normalize.mean.flatten().tolist(), splits.normalize.std.flatten().tolist()),
    ])


def _move(dataset: InMemoryDataset, device: torch.device) -> InMemoryDataset:
    return InMemoryDataset(*(t.to(device) for t in dataset.tensors))


def build_data(
    name: str,
    *,
    batch_size: int,
    eval_batch_size: int = 1000,
    num_workers: int = 0,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
    device_resident: bool | str = "auto",
    **options: Any,
) -> DataBundle:
    """Load data set ``name`` and build its loaders; the training order follows ``generator``.

    Data held as tensors is served by :class:`InMemoryLoader`; with
    ``device_resident`` (``"auto"``: when ``device`` is a GPU) the tensors move to
    ``device`` once and batches are augmented there. Otherwise augmented image
    sets go through a ``DataLoader`` with per-example torchvision transforms.
    ``options`` (``root``, ``download``, ...) go to the registered loader.
    """
    device = torch.device(device)
    splits = load_splits(name, **options)
    resident = device.type != "cpu" if device_resident == "auto" else bool(device_resident)
    train_eval = splits.train_eval if splits.train_eval is not None else splits.train
    pin = device.type == "cuda"

    def loader(dataset: Dataset, size: int, *, train: bool):
        if not isinstance(dataset, InMemoryDataset):
            return DataLoader(dataset, batch_size=size, shuffle=train, generator=generator if train else None,
                              num_workers=num_workers, pin_memory=pin, persistent_workers=num_workers > 0)
        augment = train and splits.augment
        if augment and not resident:
            return DataLoader(PerExampleImages(dataset, _torchvision_train_transform(splits)), batch_size=size,
                              shuffle=True, generator=generator, num_workers=num_workers, pin_memory=pin,
                              persistent_workers=num_workers > 0)
        if resident:
            dataset = _move(dataset, device)
        order = None
        if train:  # one generator draws the order and the augmentation, on the tensors' device
            order = _device_generator(generator, device) if resident and device.type != "cpu" else generator
        transform = BatchAugment(splits.normalize, splits.padding, generator=order) if augment else splits.normalize
        return InMemoryLoader(dataset, size, shuffle=train, generator=order, transform=transform)

    return DataBundle(
        name=name,
        train=loader(splits.train, batch_size, train=True),
        test=loader(splits.test, eval_batch_size, train=False),
        train_eval=loader(train_eval, eval_batch_size, train=False),
        num_train=len(splits.train),
        num_test=len(splits.test),
        num_classes=splits.num_classes,
        input_shape=splits.input_shape,
        source=splits.source,
        normalize=splits.normalize,
    )


def _device_generator(generator: torch.Generator | None, device: torch.device) -> torch.Generator:
    seed = int(torch.randint(2**62, (1,), generator=generator))
    return torch.Generator(device=device).manual_seed(seed)
