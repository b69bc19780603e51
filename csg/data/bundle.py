"""The data-set registry and the loaders built from it (what a loader returns: csg.data.splits).

Training order and augmentation are counter-based: epoch e's permutation and
batch b's crops and flips come from generators seeded by (seed, e[, b]), not
from a generator whose state runs on. Any process can therefore produce any
batch: the DDP ranks agree on the global batch and each takes its shard, and a
run resumed in the middle of an epoch (``start_batch``) sees exactly the
batches an uninterrupted run would have seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, TensorDataset

from csg.data.splits import InMemoryDataset, Splits, TargetScale, hold_out
from csg.data.transforms import BatchAugment, Normalize
from csg.errors import ConfigError

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
    """The splits of registered data set ``name``, or of the user's callable when ``options`` has a ``_target_``."""
    if "_target_" in options:
        from csg.data.custom import custom_splits

        return custom_splits(**options)
    if name not in _DATASETS:
        raise ConfigError(key, name, f"one of {', '.join(list_datasets())}")
    return _DATASETS[name](**options)


def derive_seed(*counters: int) -> int:
    """A 63-bit seed from a tuple of integers (seed, epoch, batch, ...)."""
    return int(np.random.SeedSequence(list(counters)).generate_state(1, np.uint64)[0] >> np.uint64(1))


class EpochBatches:
    """Which example indices make up each batch of an epoch, for one shard of the processes.

    The global batch b of epoch e is ``perm[b * batch_size : (b + 1) * batch_size]`` with
    ``perm`` the permutation seeded by (seed, e) (or the identity without shuffling); the
    process of rank r among w takes the r-th of w near-equal contiguous parts of it.
    """

    def __init__(self, n: int, batch_size: int, *, shuffle: bool, seed: int = 0, rank: int = 0, world_size: int = 1):
        self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, seed
        self.rank, self.world_size = rank, world_size

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def permutation(self, epoch: int) -> Tensor:
        if not self.shuffle:
            return torch.arange(self.n)
        return torch.randperm(self.n, generator=torch.Generator().manual_seed(derive_seed(self.seed, epoch)))

    def global_batch_size(self, b: int) -> int:
        """Examples in global batch b, over all processes."""
        return min(self.batch_size, self.n - b * self.batch_size)

    def shard(self, global_batch: Tensor) -> Tensor:
        return global_batch.tensor_split(self.world_size)[self.rank]

    def batches(self, epoch: int, start_batch: int = 0, device: torch.device | None = None
                ) -> Iterator[tuple[int, Tensor | slice]]:
        """(b, indices of batch b for this shard); a slice when the order is the identity (no copy).

        ``device``: the epoch's order is copied there once, so that indexing data held on a GPU needs no
        host-to-device copy (and no synchronisation) per batch."""
        if not self.shuffle:
            for b in range(start_batch, len(self)):
                start, stop = b * self.batch_size, min((b + 1) * self.batch_size, self.n)
                bounds = torch.arange(start, stop).tensor_split(self.world_size)[self.rank]
                yield b, slice(int(bounds[0]), int(bounds[-1]) + 1) if len(bounds) else slice(start, start)
            return
        order = self.permutation(epoch)
        if device is not None:
            order = order.to(device)
        for b in range(start_batch, len(self)):
            yield b, self.shard(order[b * self.batch_size : (b + 1) * self.batch_size])


class InMemoryLoader:
    """Mini-batches of an :class:`InMemoryDataset`, straight from its tensors.

    ``torch.utils.data.DataLoader`` is the wrong tool for data already held as
    tensors: its sampler yields one Python index per example per epoch and its
    collate stacks examples one by one. Here an epoch costs one permutation and
    one indexing per batch; the last batch may be partial, as in the authors'
    code. The tensors may live on the accelerator; the batched ``augment``
    (e.g. :class:`BatchAugment`, seeded per batch) and ``normalize`` run there too.
    Call :meth:`set_epoch` before iterating; ``start_batch`` skips ahead.
    """

    def __init__(self, dataset: InMemoryDataset, batches: EpochBatches, *, augment: BatchAugment | None = None,
                 normalize: Callable[[Tensor], Tensor] | None = None):
        self.dataset, self.sampler, self.augment, self.normalize = dataset, batches, augment, normalize
        self.epoch, self.start_batch = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch, self.start_batch = epoch, start_batch

    def __len__(self) -> int:
        return len(self.sampler)

    def global_batch_size(self, b: int) -> int:
        return self.sampler.global_batch_size(b)

    def __iter__(self):
        inputs, targets = self.dataset.tensors
        for b, index in self.sampler.batches(self.epoch, self.start_batch, device=inputs.device):
            x = inputs[index]
            if self.augment is not None:
                generator = torch.Generator(device=inputs.device).manual_seed(derive_seed(self.sampler.seed, self.epoch, b))
                x = self.augment(x, generator)
            elif self.normalize is not None:
                x = self.normalize(x)
            yield x, targets[index]


class _BatchIndices(torch.utils.data.Sampler):
    """A ``batch_sampler`` over :class:`EpochBatches`, for ``DataLoader`` (set_epoch / start_batch as above)."""

    def __init__(self, batches: EpochBatches):
        self.batches, self.epoch, self.start_batch = batches, 0, 0

    def __len__(self) -> int:
        return len(self.batches) - self.start_batch

    def __iter__(self):
        for _, index in self.batches.batches(self.epoch, self.start_batch):
            yield list(range(index.start, index.stop)) if isinstance(index, slice) else index.tolist()


class EpochDataLoader(DataLoader):
    """A ``DataLoader`` whose batches follow :class:`EpochBatches`, for data sets with per-example transforms.

    The order is exact and resumable mid-epoch; per-example random augmentation
    in the workers is seeded per epoch, so after a mid-epoch resume the
    remaining batches are augmented differently (their images and order are not).
    """

    def __init__(self, dataset: Dataset, batches: EpochBatches, **kwargs: Any):
        self.sampler_batches = _BatchIndices(batches)
        self._seed = batches.seed
        super().__init__(dataset, batch_sampler=self.sampler_batches, **kwargs)

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.sampler_batches.epoch, self.sampler_batches.start_batch = epoch, start_batch
        self.generator = torch.Generator().manual_seed(derive_seed(self._seed, epoch, 1))

    def __len__(self) -> int:
        return len(self.sampler_batches.batches)

    def global_batch_size(self, b: int) -> int:
        return self.sampler_batches.batches.global_batch_size(b)


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


@dataclass
class DataBundle:
    """Loaders and facts of one data set for one run."""

    name: str
    train: InMemoryLoader | EpochDataLoader
    test: InMemoryLoader | EpochDataLoader
    train_eval: InMemoryLoader | EpochDataLoader
    num_train: int
    num_test: int
    num_classes: int
    input_shape: tuple[int, ...]
    source: str = ""
    normalize: Normalize | None = None
    batch_size: int = 0  # the global training batch
    task: str = "classification"  # or regression: num_classes is then the number of target columns
    target_scale: TargetScale | None = None  # standardised regression targets: the map back to their units
    target_sd: float | None = None  # unstandardised regression targets: their largest column sd on the training split


def build_data(
    name: str,
    *,
    batch_size: int,
    eval_batch_size: int = 1000,
    num_workers: int = 0,
    seed: int = 0,
    device: torch.device | str = "cpu",
    device_resident: bool | str = "auto",
    rank: int = 0,
    world_size: int = 1,
    eval_rank: int | None = None,
    eval_world_size: int | None = None,
    holdout: float | None = None,
    **options: Any,
) -> DataBundle:
    """Load data set ``name`` and build its loaders.

    ``batch_size`` is the global batch: with ``world_size`` processes, rank r
    gets the r-th shard of every training batch; evaluation batches are sharded
    over ``eval_world_size`` processes (default: the same). ``seed`` fixes
    the order and augmentation of every epoch. Data held as tensors is served by
    :class:`InMemoryLoader`; with ``device_resident`` (``"auto"``: when ``device``
    is a GPU) the tensors move to ``device`` once and batches are augmented
    there; otherwise augmented image sets go through a ``DataLoader`` with
    per-example torchvision transforms. ``options`` (``root``, ``download``, ...)
    go to the registered loader. ``holdout`` > 0 (``data.holdout``): that share of the training split is held out
    and served as the test split (:func:`csg.data.splits.hold_out`).
    """
    device = torch.device(device)
    splits = load_splits(name, **options)
    if holdout:
        splits = hold_out(splits, holdout)
    for split, dataset in (("training", splits.train), ("test", splits.test)):
        if len(dataset) == 0:
            raise ConfigError("data.name", name, f"a data set whose {split} split is not empty (with {options})")
    resident = device.type != "cpu" if device_resident == "auto" else bool(device_resident)
    train_eval = splits.train_eval if splits.train_eval is not None else splits.train
    pin = device.type == "cuda"

    def loader(dataset: Dataset, size: int, *, train: bool):
        shard = (rank, world_size) if train else (
            rank if eval_rank is None else eval_rank, world_size if eval_world_size is None else eval_world_size)
        batches = EpochBatches(len(dataset), size, shuffle=train, seed=seed, rank=shard[0], world_size=shard[1])
        augment = train and splits.augment
        if isinstance(dataset, InMemoryDataset) and (resident or not augment):
            if resident:
                dataset = InMemoryDataset(*(t.to(device) for t in dataset.tensors))
            augmenter = BatchAugment(splits.normalize, splits.padding) if augment else None
            return InMemoryLoader(dataset, batches, augment=augmenter, normalize=splits.normalize)
        if isinstance(dataset, InMemoryDataset):
            dataset = PerExampleImages(dataset, _torchvision_train_transform(splits))
        return EpochDataLoader(dataset, batches, num_workers=num_workers, pin_memory=pin,
                               persistent_workers=num_workers > 0)

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
        batch_size=batch_size,
        task=splits.task,
        target_scale=splits.target_scale,
        target_sd=_target_sd(splits),
    )


def _target_sd(splits: Splits) -> float | None:
    """The largest column standard deviation of unstandardised regression targets held in memory (else None)."""
    if splits.task != "regression" or splits.target_scale is not None or not isinstance(splits.train, TensorDataset):
        return None
    targets = splits.train.tensors[1].double().reshape(len(splits.train), -1)
    return float(targets.std(0).max()) if len(targets) > 1 else None


def unscaled_targets(data: DataBundle) -> str | None:
    """Why regression targets far from unit scale and not standardised may fail a run (None: nothing to say): a step
    tuned for unit-scale targets diverges on targets of sd 77, and the divergence's cause is then the scale."""
    sd = getattr(data, "target_sd", None)
    if sd is None or 0.1 <= sd <= 10:
        return None
    return (f"the regression targets are not standardised and their standard deviation is {sd:.3g} (data."
            "standardize_targets=true standardises them on the training split; predictions and metrics stay in their "
            "units)")
