"""The CIFAR ResNet-18 of the cSG-MCMC authors' code (the widely used kuangliu/pytorch-cifar variant).

A 3x3 stem convolution with stride 1 and 64 channels, no max-pool, BasicBlocks
[2, 2, 2, 2] of widths 64/128/256/512 with strides 1/2/2/2, 1x1 convolution +
batch-norm shortcuts where the shape changes, a 4x4 average pool and a linear
head: 11,173,962 parameters for 10 classes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import nn

from csg.models.registry import register_model


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, blocks: Sequence[int] = (2, 2, 2, 2), num_classes: int = 10, in_channels: int = 3):
        super().__init__()
        self.in_planes = 64
        self.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.layer1 = self._stage(64, blocks[0], 1)
        self.layer2 = self._stage(128, blocks[1], 2)
        self.layer3 = self._stage(256, blocks[2], 2)
        self.layer4 = self._stage(512, blocks[3], 2)
        self.linear = nn.Linear(512, num_classes)

    def _stage(self, planes: int, count: int, stride: int) -> nn.Sequential:
        layers = []
        for s in [stride] + [1] * (count - 1):
            layers.append(BasicBlock(self.in_planes, planes, s))
            self.in_planes = planes
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.avg_pool2d(out, 4).flatten(1)
        return self.linear(out)


@register_model
def resnet18(num_classes: int = 10, input_shape: Sequence[int] = (3, 32, 32)) -> CifarResNet:
    return CifarResNet((2, 2, 2, 2), num_classes, in_channels=input_shape[0])
