"""The model registry, with timm as the fallback for any other architecture name."""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

from csg.errors import ConfigError

_MODELS: dict[str, Callable[..., nn.Module]] = {}


def register_model(fn: Callable[..., nn.Module] | None = None, *, name: str | None = None):
    """Decorator: register a factory ``fn(num_classes, input_shape=..., **kw) -> nn.Module`` under its name."""

    def decorator(factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        _MODELS[name or factory.__name__] = factory
        return factory

    return decorator(fn) if fn is not None else decorator


def list_models() -> list[str]:
    return sorted(_MODELS)


def _timm_knows(name: str) -> bool:
    import timm

    return bool(timm.is_model(name))


def is_known_model(name: str) -> bool:
    """Registered here, or a timm architecture name."""
    return name in _MODELS or _timm_knows(name)


def create_model(name: str, num_classes: int, **kwargs: Any) -> nn.Module:
    """Build the registered model ``name`` with a ``num_classes``-way output.

    A name that is not registered here but is a timm architecture (e.g.
    ``resnet50d``, ``wide_resnet50_2``) is built by ``timm.create_model`` without
    pretrained weights, with ``in_chans`` from ``input_shape``.
    """
    if name in _MODELS:
        return _MODELS[name](num_classes=num_classes, **kwargs)
    if _timm_knows(name):
        import timm

        input_shape = kwargs.pop("input_shape", (3,))
        return timm.create_model(name, pretrained=False, num_classes=num_classes, in_chans=input_shape[0], **kwargs)
    raise ConfigError("model.name", name, f"one of {', '.join(list_models())}, or a timm model name")
