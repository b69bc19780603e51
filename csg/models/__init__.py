"""Models behind one call, in timm's convention: ``create_model(name, num_classes, **kwargs)``.

Each architecture is a small module that registers a factory with
:func:`register_model`. Every factory accepts ``num_classes`` and
``input_shape`` (channels, height, width) plus its own options.
"""

from csg.models.registry import create_model, list_models, register_model
from csg.models import logreg as _logreg  # noqa: F401  (registers "logreg")
from csg.models import mlp as _mlp  # noqa: F401  (registers "mlp")

__all__ = ["create_model", "list_models", "register_model"]
