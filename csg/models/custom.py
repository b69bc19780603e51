"""A user's own network (``model=custom model._target_=my_project.nets.TwoLayer``).

The callable returns a :class:`torch.nn.Module` that maps a batch of inputs to one logit per class. Its
keyword arguments are the model group's other keys (``+model.width=64``), and ``num_classes`` and
``input_shape`` (the data's, without the batch dimension) when it names them: not through ``**kwargs``, so
that a factory which forwards its keywords to a class that does not take them (``timm.create_model``,
``torchvision.models.resnet18``) gets only the user's keys (``+model.num_classes=10``, ``+model.in_chans=1``).
A key of the user's that csg passes too, with another value, is refused in one line naming both.
:func:`csg.engine.limits.check_model_fits` then checks the module against the data, as for the built-in models.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from csg.errors import ConfigError
from csg.components import accepts, call, locate

KEYS = ("name", "weights")  # the group's keys the framework reads (model.weights: csg.models.weights); the others
# are the callable's keywords


def create_custom_model(path: str, options: dict[str, Any], *, num_classes: int,
                        input_shape: tuple[int, ...]) -> nn.Module:
    """``path(**options, num_classes=..., input_shape=...)`` (the last two, the data's, where named), an ``nn.Module``.

    ``options``: the model group's other keys, the user's (``num_classes`` among them for a factory that does
    not name it: ``+model.num_classes=10``)."""
    key, kwargs = "model._target_", dict(options)
    factory = locate(path, key)
    given = {}
    for name, value in (("num_classes", num_classes), ("input_shape", tuple(input_shape))):
        if not accepts(factory, name, by_name=True):
            continue
        if name in kwargs and _plain(kwargs[name]) != _plain(value):
            raise ConfigError(f"model.{name}", kwargs[name], f"the data's {name}={_plain(value)}, which csg passes to "
                              f"{path} (it names {name}); leave model.{name} out")
        given[name] = value
    options = {name: value for name, value in kwargs.items() if name not in given}
    model = call(factory, key, path, "a callable that returns an nn.Module", **options, **given)
    if not isinstance(model, nn.Module):
        raise ConfigError(key, path, f"a callable that returns a torch.nn.Module; it returned a {type(model).__name__}")
    return model


def _plain(value: Any) -> Any:
    """A value as a config writes it: tuples as lists (``input_shape``), for comparing a user's key with csg's."""
    return list(value) if isinstance(value, (tuple, list)) else value
