"""torchvision's ImageNet ResNet-50 (25,557,032 parameters for 1000 classes), randomly initialised."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from csg.models.registry import register_model


@register_model
def resnet50(num_classes: int = 1000, input_shape: Sequence[int] = (3, 224, 224)) -> nn.Module:
    from csg._torchvision_compat import ensure_torchvision

    if input_shape[0] != 3:
        raise ValueError(f"resnet50 takes RGB images; the data set has {input_shape[0]} channels")
    return ensure_torchvision().models.resnet50(weights=None, num_classes=num_classes)
