"""Models behind one call, in timm's convention: ``create_model(name, num_classes, **kwargs)``.

Each architecture is a small module that registers a factory with
:func:`register_model`; every factory accepts ``num_classes`` and
``input_shape`` (channels, height, width) plus its own options. Registered:
``resnet18`` (the authors' CIFAR ResNet-18), ``resnet20``/``resnet32``/``resnet56``
(He et al.'s CIFAR ResNets) and ``wrn16_8`` (the ICSGLD paper's models), ``resnet20_frn`` (Izmailov et al.'s
HMC reference network), ``resnet50``
(torchvision's ImageNet ResNet-50), ``mlp`` (the MNIST MLP), ``small_cnn`` (the ICSGLD paper's MNIST CNN) and ``logreg`` (logistic
regression); any other timm architecture name is built by timm. A user's own network, named by
``model._target_``: :mod:`csg.models.custom`.
"""

from csg.models import cnn as _cnn  # noqa: F401  (registers "small_cnn")
from csg.models import logreg as _logreg  # noqa: F401  (registers "logreg")
from csg.models import mlp as _mlp  # noqa: F401  (registers "mlp")
from csg.models import resnet_cifar as _resnet_cifar  # noqa: F401  (registers "resnet18")
from csg.models import resnet_frn as _resnet_frn  # noqa: F401  (registers "resnet20_frn")
from csg.models import resnet_he as _resnet_he  # noqa: F401  (registers "resnet20", "resnet32", "resnet56")
from csg.models import resnet_imagenet as _resnet_imagenet  # noqa: F401  (registers "resnet50")
from csg.models import wide_resnet as _wide_resnet  # noqa: F401  (registers "wrn16_8")
from csg.models.registry import create_model, is_known_model, list_models, register_model

__all__ = ["create_model", "is_known_model", "list_models", "register_model"]
