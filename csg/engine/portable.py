"""A sampler's or model's state as a checkpoint can hold it: what ``torch.load(weights_only=True)`` reads back.

A checkpoint is read with the weights-only reader (:func:`csg.engine.checkpoint.read_checkpoint`): tensors, numbers,
strings, bytes, ``None`` and lists, tuples, sets and dicts of them. A user's sampler may keep other things in
its ``state_dict()``; saved as they are, the checkpoint would be written every epoch, a preemption would
promise a resume, and the resume would be refused. So, before a checkpoint is written:

- a numpy array or numpy scalar (of any dtype without Python objects) is stored as its bytes in a uint8
  tensor with its dtype and shape (:data:`NUMPY`), and :func:`restored_state` (for a model's state, before
  it is loaded) or :func:`restore_optimizer_numpy` (for an optimizer, after) turns it back into the same
  array or scalar, bit for bit, on resume;
- any other value is kept if the weights-only reader reads it back, and else refused: a one-line
  :class:`~csg.errors.ConfigError` naming the key path and the value's type, before anything is written.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from csg.errors import ConfigError

NUMPY = "__csg_numpy__"  # the marker of a stored numpy value: {NUMPY: uint8 bytes, "dtype": descr, "shape": [...]}
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.Size, torch.dtype, torch.device)
ALLOWED = ("tensors, numbers, strings, None, numpy arrays and lists, tuples, sets and dicts of them (a checkpoint "
           "is read back with torch.load(weights_only=True))")


class UnsafeValue(Exception):
    """A value of a state that the weights-only reader cannot read back: where it is (``path``) and its type."""

    def __init__(self, path: str, value: Any):
        kind = f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")
        if isinstance(value, np.ndarray) and value.dtype.hasobject:
            kind += " of Python objects"
        self.path, self.kind = path, kind
        super().__init__(f"{path} is a {self.kind}")


def portable_state(state: Any, key: str, owner: object, noun: str = "an optimizer", what: str = "state_dict()") -> Any:
    """``state`` with its numpy values stored as tensors; where a value cannot be saved safely, a ConfigError
    naming ``key`` (e.g. ``sampler.optimizer._target_``) with ``owner``'s class, the value's place and type."""
    try:
        return _encode(state, what)
    except UnsafeValue as unsafe:
        kind = type(owner)
        raise ConfigError(key, f"{kind.__module__}.{kind.__qualname__}",
                          f"{noun} whose {what} holds only {ALLOWED}; its {unsafe}, which a checkpoint cannot hold "
                          "safely (numpy arrays are converted; keep anything else as a tensor or a number)") from None


def restored_state(state: Any) -> Any:
    """``state`` as :func:`portable_state` received it: the stored numpy values are numpy values again (the
    containers that hold none are returned as they are)."""
    if type(state) in (dict, OrderedDict):
        if NUMPY in state:
            return _numpy_value(state)
        return _rebuilt(state, {key: restored_state(item) for key, item in state.items()})
    if type(state) in (list, tuple):
        return _rebuilt(state, [restored_state(item) for item in state])
    return state


def restore_optimizer_numpy(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """After ``optimizer.load_state_dict(saved)``: the values of ``saved`` (a :func:`portable_state` result) that
    held numpy values, restored into the optimizer's state and param groups as numpy values, in place.

    torch's ``load_state_dict`` cannot take a numpy array (it rebuilds a state's iterables item by item) and casts
    every tensor of a state to its parameter's dtype; it takes the stored form, and this puts the exact values
    back from ``saved`` itself."""
    if type(saved) not in (dict, OrderedDict) or not {"state", "param_groups"} <= set(saved):
        return  # an optimizer with a state_dict of its own making: loaded as it is
    params = [param for group in optimizer.param_groups for param in group["params"]]
    indices = [index for group in saved["param_groups"] for index in group["params"]]
    by_index = dict(zip(indices, params))
    for index, values in saved["state"].items():
        param = by_index.get(index)
        if param is None or type(values) not in (dict, OrderedDict):
            continue
        for key, value in values.items():
            restored = restored_state(value)
            if restored is not value:
                optimizer.state[param][key] = restored
    for group in optimizer.param_groups:
        for key, value in list(group.items()):
            if key != "params":
                group[key] = restored_state(value)


def _encode(value: Any, path: str) -> Any:
    kind = type(value)
    if kind in (torch.Tensor, torch.nn.Parameter) or kind in _PLAIN:
        return value
    if kind in (dict, OrderedDict):
        for key in value:
            if type(key) not in _PLAIN:
                raise UnsafeValue(f"{path} key {key!r}", key)
        return _rebuilt(value, {key: _encode(item, f"{path}[{key!r}]") for key, item in value.items()})
    if kind in (list, tuple):
        return _rebuilt(value, [_encode(item, f"{path}[{index}]") for index, item in enumerate(value)])
    if kind is set:
        for item in value:
            if type(item) not in _PLAIN:
                raise UnsafeValue(f"{path} item {item!r}", item)
        return value
    if (kind is np.ndarray or isinstance(value, np.generic)) and not np.asarray(value).dtype.hasobject:
        return _stored_numpy(value)
    if _reads_back(value):  # a tensor subclass or container the weights-only reader knows
        return value
    raise UnsafeValue(path, value)


def _rebuilt(container: Any, items: dict | list) -> Any:
    """``container`` itself when none of ``items`` changed (a state_dict keeps its ``_metadata``), else a copy
    of its type holding ``items``."""
    if isinstance(items, dict):
        if all(items[key] is value for key, value in container.items()):
            return container
        return type(container)(items)
    if all(new is old for new, old in zip(items, container)):
        return container
    return type(container)(items)


def _stored_numpy(value: np.ndarray | np.generic) -> dict[str, Any]:
    array = np.asarray(value)
    raw = np.frombuffer(np.ascontiguousarray(array).tobytes(), dtype=np.uint8).copy()
    return {NUMPY: torch.from_numpy(raw), "dtype": np.lib.format.dtype_to_descr(array.dtype),
            "shape": list(array.shape), "scalar": isinstance(value, np.generic)}


def _numpy_value(stored: dict[str, Any]) -> np.ndarray | np.generic:
    dtype = np.lib.format.descr_to_dtype(stored["dtype"])
    array = np.frombuffer(stored[NUMPY].cpu().numpy().tobytes(), dtype=dtype).reshape(stored["shape"]).copy()
    return array[()] if stored["scalar"] else array


def _reads_back(value: Any) -> bool:
    buffer = io.BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception:  # noqa: BLE001 - any failure: the reader would refuse the checkpoint
        return False
    return True
