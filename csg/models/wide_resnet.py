"""Wide residual networks (Zagoruyko & Komodakis 2016) for CIFAR: WRN-16-8 of the ICSGLD paper.

WRN-d-k: a 3x3 stem of 16 channels, three stages of (d - 4) / 6 pre-activation blocks
(BN-ReLU-conv3x3-BN-ReLU-conv3x3) of widths 16k, 32k, 64k with strides 1, 2, 2, 1x1 convolution
shortcuts where the shape changes, BN-ReLU, global average pooling and a linear head.
WRN-16-8 has 10,961,370 parameters for 10 classes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import nn

from csg.models.registry import register_model


class _WideBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int, dropout: float):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.shortcut = (nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False)
                         if stride != 1 or in_planes != planes else None)

    def forward(self, x):
        pre = F.relu(self.bn1(x))
        out = self.conv2(self.dropout(F.relu(self.bn2(self.conv1(pre)))))
        return out + (self.shortcut(pre) if self.shortcut is not None else x)


class WideResNet(nn.Module):
    def __init__(self, depth: int, width: int, num_classes: int = 10, in_channels: int = 3, dropout: float = 0.0):
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"depth={depth}: a wide ResNet has depth 6n + 4")
        n = (depth - 4) // 6
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        blocks, in_planes = [], 16
        for planes, stride in ((16 * width, 1), (32 * width, 2), (64 * width, 2)):
            for s in [stride] + [1] * (n - 1):
                blocks.append(_WideBlock(in_planes, planes, s, dropout))
                in_planes = planes
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(in_planes)
        self.linear = nn.Linear(in_planes, num_classes)

    def forward(self, x):
        out = F.relu(self.bn(self.blocks(self.conv1(x))))
        return self.linear(F.adaptive_avg_pool2d(out, 1).flatten(1))


@register_model
def wrn16_8(num_classes: int = 10, input_shape: Sequence[int] = (3, 32, 32), dropout: float = 0.0) -> WideResNet:
    """WRN-16-8 (the ICSGLD paper's widest CIFAR-100 model)."""
    return WideResNet(16, 8, num_classes, in_channels=input_shape[0], dropout=dropout)
