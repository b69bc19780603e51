"""The model registry."""

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


def create_model(name: str, num_classes: int, **kwargs: Any) -> nn.Module:
    """Build the registered model ``name`` with a ``num_classes``-way output."""
    if name not in _MODELS:
        raise ConfigError("model.name", name, f"one of {', '.join(list_models())}")
    return _MODELS[name](num_classes=num_classes, **kwargs)
