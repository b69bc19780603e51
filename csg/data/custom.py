"""A user's own data set (``data=custom data._target_=my_project.data.load``): ``(train, test)`` Datasets.

The callable returns two map-style :class:`torch.utils.data.Dataset`\\ s whose items are
``(input tensor, integer label)``; its keyword arguments are the data group's other keys
(``+data.root=/data/mine``). :func:`build_data` then serves it as it serves the built-in sets: batches
and their order are functions of (seed, epoch, batch), so a resumed run sees the batches an uninterrupted
one sees; training batches are sharded under DDP, evaluation batches too.

``in_memory`` says how the items are served:

- ``auto``: a :class:`~torch.utils.data.TensorDataset` is served from its tensors (held on the GPU when
  one is used, as ``device_resident`` says); any other Dataset through a ``DataLoader``, item by item
  (its ``__getitem__`` runs every epoch: random per-item transforms stay random);
- ``true``: every item is read once and held as tensors (fast for small sets; an item's randomness is
  frozen at that read);
- ``false``: always a ``DataLoader``.

``num_classes`` (optional) is the number of classes; without it, 1 + the largest label (a
TensorDataset's are read from its tensor; other sets are read item by item, once).
"""

from __future__ import annotations

import numbers
from typing import Any

import torch
from torch.utils.data import Dataset, TensorDataset

from csg.data.bundle import InMemoryDataset, Splits
from csg.errors import ConfigError
from csg.components import TARGET, call, locate

KEYS = ("num_classes", "in_memory")  # the group's keys the framework reads (besides build_data's own)


def custom_splits(*, num_classes: int | None = None, in_memory: bool | str = "auto", **options: Any) -> Splits:
    """The :class:`Splits` of ``options[_target_](**rest)``, checked; a one-line ConfigError where they are not."""
    path = str(options.pop(TARGET))
    key = "data._target_"
    factory = locate(path, key)
    returned = call(factory, key, path, "a callable that returns (train, test) Datasets", **options)
    if not isinstance(returned, (tuple, list)) or len(returned) != 2:
        raise ConfigError(key, path, f"a callable that returns (train, test), two Datasets; it returned "
                          f"{_kind(returned)}")
    train, test = returned
    for split, dataset in (("train", train), ("test", test)):
        if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise ConfigError(key, path, f"a callable that returns (train, test), two map-style Datasets "
                              f"(__getitem__ and __len__); its {split} is {_kind(dataset)}")
        if len(dataset) == 0:
            raise ConfigError(key, path, f"a data set whose {split} split is not empty")
    shape = _check_item(train, "train", path)
    test_shape = _check_item(test, "test", path)
    if test_shape != shape:
        raise ConfigError(key, path, f"train and test inputs of one shape: train's are {shape}, test's {test_shape}")
    if in_memory is True or (in_memory == "auto" and _is_tensor_pair(train)):
        train, test = _as_tensors(train), _as_tensors(test)
    labels = {"train": _labels(train), "test": _labels(test)}
    if num_classes is None:
        if labels["train"] is None:
            labels["train"] = _read_labels(train)
        num_classes = 1 + max(int(values.max()) for values in labels.values() if values is not None)
    for split, values in labels.items():
        if values is not None and (int(values.min()) < 0 or int(values.max()) >= num_classes):
            raise ConfigError("data.num_classes", num_classes,
                              f"more than every label: the {split} set has labels in [{int(values.min())}, "
                              f"{int(values.max())}]")
    if num_classes < 2:
        raise ConfigError("data.num_classes", num_classes, "at least 2 classes (the labels have one)")
    return Splits(train=train, test=test, num_classes=int(num_classes), input_shape=shape, source=f"custom: {path}")


def _kind(value: Any) -> str:
    return f"a {type(value).__name__}" + (f" of {len(value)}" if isinstance(value, (tuple, list)) else "")


def _check_item(dataset: Dataset, split: str, path: str) -> tuple[int, ...]:
    """The input shape of the first item, which must be (tensor, integer label)."""
    try:
        item = dataset[0]
    except Exception as error:  # noqa: BLE001 - the user's __getitem__
        from csg.errors import describe

        raise ConfigError("data._target_", path, f"Datasets whose items can be read: {split}[0] raised "
                          f"{describe(error)}") from None
    if (not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], torch.Tensor)
            or not _is_label(item[1])):
        got = f"({', '.join(type(v).__name__ for v in item)})" if isinstance(item, (tuple, list)) else type(item).__name__
        raise ConfigError("data._target_", path, f"Datasets whose items are (input tensor, integer label); "
                          f"{split}[0] is {got}")
    return tuple(item[0].shape)


def _is_label(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.is_floating_point() and not value.is_complex() and value.dtype != torch.bool
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_tensor_pair(dataset: Dataset) -> bool:
    return isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2


def _labels(dataset: Dataset) -> torch.Tensor | None:
    """A TensorDataset's labels (no pass over the items), else None."""
    return dataset.tensors[1].reshape(-1) if _is_tensor_pair(dataset) else None


def _read_labels(dataset: Dataset) -> torch.Tensor:
    return torch.tensor([int(dataset[i][1]) for i in range(len(dataset))])


def _as_tensors(dataset: Dataset) -> InMemoryDataset:
    """The items of ``dataset`` held as two tensors: inputs as they are, labels as int64."""
    if _is_tensor_pair(dataset):
        inputs, labels = dataset.tensors
    else:
        items = [dataset[i] for i in range(len(dataset))]
        inputs = torch.stack([x for x, _ in items])
        labels = torch.tensor([int(y) for _, y in items])
    return InMemoryDataset(inputs, labels.reshape(-1).long())
