"""A user's own network (``model=custom model._target_=my_project.nets.TwoLayer``).

The callable returns a :class:`torch.nn.Module` that maps a batch of inputs to one logit per class. Its
keyword arguments are the model group's other keys (``+model.width=64``), and ``num_classes`` and
``input_shape`` (the data's, without the batch dimension) when it accepts them (by name, or through
``**kwargs``). :func:`csg.engine.limits.check_model_fits` then checks the module against the data, as for the
built-in models.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from csg.errors import ConfigError
from csg.components import accepts, call, locate

KEYS = ("name",)  # the group's keys the framework reads; the others are the callable's keywords


def create_custom_model(path: str, *, num_classes: int, input_shape: tuple[int, ...], **kwargs: Any) -> nn.Module:
    """``path(**kwargs, num_classes=..., input_shape=...)`` (the last two where accepted), an ``nn.Module``."""
    key = "model._target_"
    factory = locate(path, key)
    given = {name: value for name, value in (("num_classes", num_classes), ("input_shape", tuple(input_shape)))
             if name not in kwargs and accepts(factory, name)}
    model = call(factory, key, path, "a callable that returns an nn.Module", **kwargs, **given)
    if not isinstance(model, nn.Module):
        raise ConfigError(key, path, f"a callable that returns a torch.nn.Module; it returned a {type(model).__name__}")
    return model
