"""The CIFAR ResNets of He et al. (2016, Section 4.2) used by the ICSGLD paper: ResNet-20, -32, -56.

Depth 6n + 2: a 3x3 stem of 16 channels, three stages of n BasicBlocks of 16, 32 and 64 channels
(strides 1, 2, 2), global average pooling and a linear head. Shortcuts where the shape changes are
the paper's option A: the input subsampled by 2 and zero-padded to the new width, no parameters.
ResNet-20 has 269,722 parameters for 10 classes (ResNet-32: 464,154; ResNet-56: 853,018).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import nn

from csg.models.registry import register_model


class _PadShortcut(nn.Module):
    """Option A: keep every other pixel and zero-pad the new channels (no parameters)."""

    def __init__(self, extra_channels: int):
        super().__init__()
        self.extra = extra_channels

    def forward(self, x):
        x = x[:, :, ::2, ::2]
        return F.pad(x, (0, 0, 0, 0, self.extra // 2, self.extra - self.extra // 2))


class _Block(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = _PadShortcut(planes - in_planes) if stride != 1 or in_planes != planes else nn.Identity()

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class HeResNet(nn.Module):
    def __init__(self, depth: int, num_classes: int = 10, in_channels: int = 3):
        super().__init__()
        if (depth - 2) % 6:
            raise ValueError(f"depth={depth}: a CIFAR ResNet has depth 6n + 2")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        stages, in_planes = [], 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            for s in [stride] + [1] * (n - 1):
                stages.append(_Block(in_planes, planes, s))
                in_planes = planes
        self.blocks = nn.Sequential(*stages)
        self.linear = nn.Linear(64, num_classes)
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(module.weight)

    def forward(self, x):
        out = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.linear(F.adaptive_avg_pool2d(out, 1).flatten(1))


def _factory(depth: int):
    def build(num_classes: int = 10, input_shape: Sequence[int] = (3, 32, 32)) -> HeResNet:
        return HeResNet(depth, num_classes, in_channels=input_shape[0])

    build.__name__ = f"resnet{depth}"
    build.__doc__ = f"CIFAR ResNet-{depth} (He et al. 2016, option-A shortcuts)."
    return build


for _depth in (20, 32, 56):
    register_model(_factory(_depth))
