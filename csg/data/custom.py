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

``num_classes`` (optional) is the number of classes; without it, 1 + the largest training label (a test label
above it is refused, not a wider model).

Every item is checked before training, in one pass: a TensorDataset's labels from its tensor (integers, one
per item, in [0, num_classes)); any other Dataset's items read once each, ``__len__`` of them, each
``(input tensor, integer label)`` with the input shape of item 0 and a label in [0, num_classes); inputs
finite and floating point (an integer input is refused, not cast: its scale is the user's to choose). Items served
item by item are checked again as training reads them (a Dataset whose items change between reads), and
their labels batched as int64. Each failure is one line naming ``data._target_`` (or ``data.num_classes``),
the split, the item and what is wrong.
"""

from __future__ import annotations

import numbers
import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from csg.components import TARGET, call, locate
from csg.data.splits import InMemoryDataset, Splits
from csg.data.splits import standardize_targets as standardize
from csg.errors import ConfigError, describe

REGRESSION_HINT = " (real-valued targets: a regression likelihood, likelihood=gaussian or gaussian_precision)"
KEYS = ("num_classes", "in_memory", "standardize_targets", "task")  # the framework's keys (besides build_data's)


def custom_splits(*, num_classes: int | None = None, in_memory: bool | str = "auto", task: str = "classification",
                  standardize_targets: bool = False, **options: Any) -> Splits:
    """The :class:`Splits` of ``options[_target_](**rest)``, checked; a one-line ConfigError where they are not.

    ``task`` (the likelihood's): ``classification`` (integer labels) or ``regression`` (real targets, see
    :func:`regression_splits`)."""
    if task == "regression":
        return regression_splits(in_memory=in_memory, standardize_targets=standardize_targets, **options)
    path, train, test = _user_splits(options)
    key = "data._target_"
    keep = in_memory is True or (in_memory == "auto" and _is_tensor_pair(train))
    held, labels, shape = {}, {}, None
    for split, dataset in (("train", train), ("test", test)):
        if _is_tensor_pair(dataset):
            item_shape, labels[split], inputs = _tensor_facts(dataset, split, path)
        else:
            item_shape, labels[split], inputs = _scan(dataset, split, path, keep)
        held[split] = InMemoryDataset(inputs, labels[split]) if keep else _Served(dataset, item_shape, split, path)
        if shape is None:
            shape = item_shape
        elif item_shape != shape:
            raise ConfigError(key, path,
                              f"train and test inputs of one shape: train's are {shape}, test's {item_shape}")
    if num_classes is None:
        num_classes = 1 + int(labels["train"].max())
        unseen = labels["test"] >= num_classes
        if bool(unseen.any()):  # not a wider model: a class with no training example has no likelihood term
            item = int(unseen.nonzero()[0])
            raise ConfigError(key, path, f"a test set whose labels are classes of the training set (train's are in "
                              f"[0, {num_classes - 1}]); test[{item}] has label {int(labels['test'][item])} (give "
                              "data.num_classes if the model should have classes that no training item has)")
    for split, values in labels.items():
        if int(values.min()) < 0:
            raise ConfigError(key, path, f"Datasets whose labels are 0, 1, ..., num_classes - 1: the {split} set has "
                              f"label {int(values.min())} (item {int(values.argmin())})")
        if int(values.max()) >= num_classes:
            raise ConfigError("data.num_classes", num_classes,
                              f"more than every label: the {split} set has labels in [{int(values.min())}, "
                              f"{int(values.max())}] (item {int(values.argmax())})")
    if num_classes < 2:
        raise ConfigError("data.num_classes", num_classes, "at least 2 classes (the labels have one)")
    return Splits(train=held["train"], test=held["test"], num_classes=int(num_classes), input_shape=shape,
                  source=f"custom: {path}")


def _user_splits(options: dict[str, Any]) -> tuple[str, Dataset, Dataset]:
    """``(path, train, test)`` of the user's callable, each a non-empty map-style Dataset."""
    path = str(options.pop(TARGET))
    key = "data._target_"
    returned = call(locate(path, key), key, path, "a callable that returns (train, test) Datasets", **options)
    if not isinstance(returned, (tuple, list)) or len(returned) != 2:
        raise ConfigError(key, path, f"a callable that returns (train, test), two Datasets; it returned "
                          f"{_kind(returned)}")
    for split, dataset in zip(("train", "test"), returned):
        if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise ConfigError(key, path, f"a callable that returns (train, test), two map-style Datasets "
                              f"(__getitem__ and __len__); its {split} is {_kind(dataset)}")
        if len(dataset) == 0:
            raise ConfigError(key, path, f"a data set whose {split} split is not empty")
    return path, returned[0], returned[1]


def regression_splits(*, in_memory: bool | str = "auto", standardize_targets: bool = False,
                      **options: Any) -> Splits:
    """A user's regression data (``likelihood`` of task regression): items ``(input tensor, real target)``, the
    target a number or a 1-D float tensor of ``d`` columns (the same ``d`` for every item), held as ``(N, d)``
    float32 tensors in memory whatever ``in_memory`` says (items are read once: a per-item random transform is
    frozen at that read). Inputs and targets finite and
    floating point, else one line naming the split and item. ``standardize_targets``: standardised on the training
    split (:func:`csg.data.splits.standardize_targets`); predictions and metrics are then in the original units."""
    path, train, test = _user_splits(options)
    tensors, shape, columns = {}, None, None
    for split, dataset in (("train", train), ("test", test)):
        inputs, targets = _regression_tensors(dataset, split, path)
        if shape is not None and tuple(inputs.shape[1:]) != shape:
            raise ConfigError("data._target_", path, f"train and test inputs of one shape: train's are {shape}, "
                              f"test's {tuple(inputs.shape[1:])}")
        if columns is not None and targets.shape[1] != columns:
            raise ConfigError("data._target_", path, f"train and test targets of one width: train's have {columns} "
                              f"columns, test's {targets.shape[1]}")
        shape, columns = tuple(inputs.shape[1:]), targets.shape[1]
        tensors[split] = (inputs, targets)
    scale = None
    if standardize_targets:
        train_y, test_y, scale = standardize(tensors["train"][1], tensors["test"][1])
        tensors = {"train": (tensors["train"][0], train_y), "test": (tensors["test"][0], test_y)}
    return Splits(train=InMemoryDataset(*tensors["train"]), test=InMemoryDataset(*tensors["test"]),
                  num_classes=int(columns), input_shape=shape, source=f"custom: {path}", task="regression",
                  target_scale=scale)


def _regression_tensors(dataset: Dataset, split: str, path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets as (N, d) float32) of a regression Dataset: from a TensorDataset's tensors, else item by
    item (the random number generators left as they were)."""
    key = "data._target_"
    if _is_tensor_pair(dataset):
        inputs, targets = dataset.tensors
    else:
        states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
        try:
            items = [_regression_item(dataset, index, split, path, len(dataset)) for index in range(len(dataset))]
        finally:
            torch.random.set_rng_state(states[0])
            np.random.set_state(states[1])
            random.setstate(states[2])
        shapes = {tuple(x.shape) for x, _ in items}
        if len(shapes) > 1:
            raise ConfigError(key, path, f"Datasets whose inputs all have one shape: the {split} set has {sorted(shapes)}")
        widths = {t.numel() for _, t in items}
        if len(widths) > 1:
            raise ConfigError(key, path, f"Datasets whose targets all have one width: the {split} set has "
                              f"{sorted(widths)} columns")
        inputs, targets = torch.stack([x for x, _ in items]), torch.stack([t.reshape(-1) for _, t in items])
    problem = _input_problem(inputs)
    if problem:
        raise ConfigError(key, path, f"Datasets whose inputs are finite floating-point tensors; the {split} set's "
                          f"inputs {problem}")
    if not targets.is_floating_point() or targets.dim() not in (1, 2) or targets.shape[0] != len(dataset):
        raise ConfigError(key, path, f"regression targets: one real number (or a 1-D float tensor) per item; the "
                          f"{split} set's targets are {str(targets.dtype).removeprefix('torch.')} of shape "
                          f"{tuple(targets.shape)} for {len(dataset)} items")
    finite = torch.isfinite(targets.reshape(len(dataset), -1).float()).all(1)  # as trained on: float32
    if not bool(finite.all()):
        raise ConfigError(key, path, f"finite regression targets within float32's range (|y| < 3.4e38); "
                          f"{split}[{int((~finite).nonzero()[0])}] has NaN, inf or a value beyond it")
    return inputs.float(), targets.reshape(len(dataset), -1).float()


def _regression_item(dataset: Dataset, index: int, split: str, path: str, count: int):
    try:
        item = dataset[index]
    except Exception as error:  # noqa: BLE001 - the user's __getitem__
        raise ConfigError("data._target_", path, f"Datasets whose items can be read: {split}[{index}] raised "
                          f"{describe(error)}") from None
    target = item[1] if isinstance(item, (tuple, list)) and len(item) == 2 else None
    if isinstance(target, numbers.Real) and not isinstance(target, bool):
        target = torch.tensor(float(target))
    if (not isinstance(item[0] if isinstance(item, (tuple, list)) and item else None, torch.Tensor)
            or not isinstance(target, torch.Tensor) or not target.is_floating_point() or target.dim() > 1):
        got = f"({', '.join(type(v).__name__ for v in item)})" if isinstance(item, (tuple, list)) else type(item).__name__
        raise ConfigError("data._target_", path, f"regression items (input tensor, real target: a float or a 1-D "
                          f"float tensor); {split}[{index}] is {got}")
    return item[0], target


def _kind(value: Any) -> str:
    return f"a {type(value).__name__}" + (f" of {len(value)}" if isinstance(value, (tuple, list)) else "")


def _tensor_facts(dataset: TensorDataset, split: str, path: str) -> tuple[tuple[int, ...], torch.Tensor, torch.Tensor]:
    """(input shape, labels as int64, inputs) of a TensorDataset of (inputs, labels), read from its tensors."""
    inputs, labels = dataset.tensors
    problem = _input_problem(inputs)
    if problem:
        raise ConfigError("data._target_", path, f"Datasets whose inputs are finite floating-point tensors; the "
                          f"{split} set's input tensor {problem}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ConfigError("data._target_", path, f"Datasets whose labels are integers; the {split} set's label "
                          f"tensor holds {str(labels.dtype).removeprefix('torch.')}{REGRESSION_HINT}")
    if labels.numel() != len(dataset):
        raise ConfigError("data._target_", path, f"Datasets with one integer label per item; the {split} set's "
                          f"label tensor has shape {tuple(labels.shape)} for {len(dataset)} items")
    return tuple(inputs.shape[1:]), labels.reshape(-1).long(), inputs


def _scan(dataset: Dataset, split: str, path: str, keep: bool
          ) -> tuple[tuple[int, ...], torch.Tensor, torch.Tensor | None]:
    """(input shape, labels, inputs stacked if ``keep``) of a Dataset read item by item, each item once, before
    any training: every item is (input tensor, integer label) with the input shape of item 0, and ``__len__``
    items can be read. The random number generators of torch (CPU), numpy and Python are as they were before,
    so a Dataset that draws in ``__getitem__`` does not shift the model's initialisation."""
    count = len(dataset)
    labels = torch.empty(count, dtype=torch.long)
    inputs: list[torch.Tensor] = []
    shape = None
    states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        for index in range(count):
            item = _item(dataset, index, split, path, count)
            if shape is None:
                shape = tuple(item[0].shape)
            elif tuple(item[0].shape) != shape:
                raise ConfigError("data._target_", path, f"Datasets whose inputs all have one shape: "
                                  f"{split}[{index}] is {tuple(item[0].shape)}, {split}[0] {shape}")
            labels[index] = int(item[1])
            if keep:
                inputs.append(item[0])
    finally:
        torch.random.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
    return shape, labels, torch.stack(inputs) if keep else None


def _item(dataset: Dataset, index: int, split: str, path: str, count: int) -> tuple[torch.Tensor, Any]:
    """Item ``index``, which must be (input tensor, integer label)."""
    try:
        item = dataset[index]
    except Exception as error:  # noqa: BLE001 - the user's __getitem__
        lying = f" (its __len__ says {count} items)" if index and isinstance(error, IndexError) else ""
        raise ConfigError("data._target_", path, f"Datasets whose items can be read: {split}[{index}] raised "
                          f"{describe(error)}{lying}") from None
    if (not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], torch.Tensor)
            or not _is_label(item[1])):
        got = f"({', '.join(type(v).__name__ for v in item)})" if isinstance(item, (tuple, list)) else type(item).__name__
        raise ConfigError("data._target_", path, f"Datasets whose items are (input tensor, integer label); "
                          f"{split}[{index}] is {got}{REGRESSION_HINT}")
    problem = _input_problem(item[0])
    if problem:
        raise ConfigError("data._target_", path, f"Datasets whose inputs are finite floating-point tensors; "
                          f"{split}[{index}]'s input {problem}")
    return item[0], item[1]


def _input_problem(inputs: torch.Tensor) -> str:
    """What keeps ``inputs`` from a model's forward pass: integer or boolean values (a model's weights are floating
    point: convert them as you intend, e.g. ``x.float() / 255``), NaN or inf; '' when none."""
    if not inputs.is_floating_point():
        return f"holds {str(inputs.dtype).removeprefix('torch.')} (convert it, e.g. x.float(), scaled as you intend)"
    if not bool(torch.isfinite(inputs).all()):
        return "holds NaN or inf"
    return ""


def _is_label(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.is_floating_point() and not value.is_complex() and value.dtype != torch.bool
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_tensor_pair(dataset: Dataset) -> bool:
    return isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2


class ItemError(ConfigError):
    """An item served in training that breaks the contract the items read before training kept (a Dataset whose
    items change between reads). One line also from a ``DataLoader`` worker: the loader raises it again from its
    message (``type(error)(message with the worker's traceback)``), and the last line of that is the error's."""

    def __init__(self, key: str, value: Any = None, allowed: str | None = None):
        if allowed is not None:
            super().__init__(key, value, allowed)
            return
        lines = [line for line in str(key).splitlines() if line.strip()]
        message = lines[-1].split(f"{type(self).__name__}: ", 1)[-1] if lines else str(key)
        self.key, self.value, self.allowed = "data._target_", None, message
        Exception.__init__(self, message)


class _Served(Dataset):
    """A user's Dataset as training reads it: each item checked again as it is served (input shape, integer
    label), its label as an int64 tensor (labels of any integer type batch alike)."""

    def __init__(self, dataset: Dataset, shape: tuple[int, ...], split: str, path: str):
        self.dataset, self.shape, self.split, self.path = dataset, shape, split, path

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            x, y = _item(self.dataset, index, self.split, self.path, len(self.dataset))
        except ConfigError as error:
            raise ItemError(error.key, error.value, error.allowed) from None
        if tuple(x.shape) != self.shape:
            raise ItemError("data._target_", self.path, f"Datasets whose inputs all have one shape: "
                            f"{self.split}[{index}] is {tuple(x.shape)} when served, {self.shape} when read before "
                            "training")
        return x, torch.tensor(int(y))
