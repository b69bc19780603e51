"""Start a model from weights on disk (``model.weights=<file>``): a state dict read as data, never as code.

The file is read with ``torch.load(weights_only=True)``: tensors, numbers, strings and containers only, so a
file from anywhere runs nothing. It may be

- a plain state dict (torchvision's and timm's weight files, ``torch.save(model.state_dict(), f)``),
- a csg sample (``{"state_dict": ...}``, in ``<run>/samples/``) or checkpoint (``{"model": ...}``,
  ``<run>/checkpoint.pt``), or any dict holding the state dict under ``state_dict``, ``model`` or
  ``model_state_dict``; a ``module.`` prefix (a model saved from inside DistributedDataParallel) is dropped.

Every key of the model must be in the file with its shape, and the file may hold no other key, except that the
adapters :func:`csg.models.lora.add_lora` adds may be missing (they start at their own initialisation). A
mismatch, integer values for a floating-point tensor, or NaN or inf, is one line naming the keys
(:class:`csg.errors.ConfigError`, key ``model.weights``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from csg.errors import ConfigError, first_line
from csg.models.lora import is_adapter_key

__all__ = ["check_weights", "load_weights", "read_state_dict"]

_CONTAINER_KEYS = ("state_dict", "model", "model_state_dict")  # where a wrapped file keeps its state dict
KEY = "model.weights"


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict in the file ``path`` (weights only), or a one-line ConfigError saying why there is none."""
    from csg.io.trust import not_a_regular_file

    path = Path(path)
    special = not_a_regular_file(path)
    if special is not None:
        raise ConfigError(KEY, str(path), f"a file of weights (a state dict saved by torch.save): {special}")
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # noqa: BLE001 - torch.load's failures differ by format; one answer to the user
        raise ConfigError(KEY, str(path), "a state dict saved by torch.save, read with weights_only=True "
                          f"(nothing but tensors and containers): {first_line(error)[:160]}") from None
    state = _state_dict_in(loaded)
    if state is None:
        raise ConfigError(KEY, str(path), "a state dict (a dict of tensors), or a dict holding one under "
                          f"{', '.join(_CONTAINER_KEYS)}: this file holds neither")
    if all(name.startswith("module.") for name in state):
        state = {name[len("module."):]: tensor for name, tensor in state.items()}
    return state


def _state_dict_in(loaded) -> dict[str, torch.Tensor] | None:
    if _is_state_dict(loaded):
        return dict(loaded)
    if isinstance(loaded, Mapping):
        for key in _CONTAINER_KEYS:
            if _is_state_dict(loaded.get(key)):
                return dict(loaded[key])
    return None


def _is_state_dict(value) -> bool:
    return (isinstance(value, Mapping) and len(value) > 0
            and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items()))


def load_weights(model: nn.Module, path: str | Path) -> None:
    """Copy the weights of the file ``path`` into ``model`` (its device and dtype kept); a one-line ConfigError
    naming the missing, unexpected or misshapen keys, before anything is copied."""
    state = check_weights(model, path)
    model.load_state_dict(state, strict=False)


def check_weights(model: nn.Module, path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict of ``path`` once it fits ``model`` (a model on the meta device will do); else the one-line
    ConfigError of :func:`load_weights`."""
    state = read_state_dict(path)
    own = model.state_dict()
    missing = [key for key in own if key not in state and not is_adapter_key(key)]
    unexpected = [key for key in state if key not in own]
    misshapen = [f"{key} {list(state[key].shape)} (the model's {list(own[key].shape)})"
                 for key in own if key in state and state[key].shape != own[key].shape]
    shared = [key for key in own if key in state and state[key].shape == own[key].shape]
    not_floating = [f"{key} {str(state[key].dtype).removeprefix('torch.')} (the model's "
                    f"{str(own[key].dtype).removeprefix('torch.')})" for key in shared
                    if own[key].is_floating_point() and not state[key].is_floating_point()]
    not_finite = [key for key in shared if state[key].is_floating_point() and not bool(state[key].isfinite().all())]
    problems = [f"{what} {_some(keys)}" for what, keys in (("missing keys", missing), ("unexpected keys", unexpected),
                                                             ("other shapes:", misshapen),
                                                             ("integer values where the model's are floating point:",
                                                              not_floating),
                                                             ("NaN or inf in", not_finite)) if keys]
    if problems:
        raise ConfigError(KEY, str(path), f"weights of this model ({type(model).__name__}): the file has "
                          + "; ".join(problems))
    return state


def _some(keys: list[str], shown: int = 4) -> str:
    return ", ".join(keys[:shown]) + (f" and {len(keys) - shown} more" if len(keys) > shown else "")
