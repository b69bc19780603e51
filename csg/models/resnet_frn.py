r"""ResNet-20-FRN: the CIFAR network of Izmailov et al. (2021), "What are Bayesian neural network posteriors really
like?", whose full-batch HMC predictive on CIFAR-10 is the public reference of the NeurIPS 2021 approximate-inference
competition (their ``resnet20_frn_swish``).

Depth 6n + 2 (n = 3): a 3x3 stem of 16 channels, three stages of n blocks of 16, 32 and 64 channels (strides 1, 2,
2), each block :math:`x \leftarrow \sigma(x' + \mathrm{FRN}(\mathrm{conv}(\sigma(\mathrm{FRN}(\mathrm{conv}(x))))))`
with :math:`x'` the input or, where the shape changes, its 1x1 strided convolution and FRN (a projection); 8x8
average pooling and a linear head. Every convolution has a bias. No batch statistics: *filter response
normalisation* with a thresholded linear unit (Singh and Krishnan 2020),

.. math::
    \mathrm{FRN}(x)_c = \max\Big(\gamma_c \frac{x_c}{\sqrt{\overline{x_c^2} + \epsilon}} + \beta_c,\ \tau_c\Big),

the mean over the spatial positions of one example and channel, so that the network is a function of each input
alone (a posterior over it is well defined, unlike one with batch norm). :math:`\sigma` is swish (SiLU), as in the
reference, or ReLU (``activation="relu"``). Initialisation: He-normal weights, zero biases, :math:`\gamma = 1`,
:math:`\beta = \tau = 0`. 274,042 parameters for 10 classes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from csg.models.registry import register_model

ACTIVATIONS = {"swish": nn.SiLU, "relu": nn.ReLU}


class FilterResponseNorm(nn.Module):
    """FRN with its thresholded linear unit, per channel (module docstring)."""

    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.beta = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.tau = nn.Parameter(torch.zeros(1, channels, 1, 1))

    def forward(self, x):
        nu2 = x.pow(2).mean(dim=(2, 3), keepdim=True)
        return torch.maximum(self.gamma * x * torch.rsqrt(nu2 + self.eps) + self.beta, self.tau)


def _layer(in_channels: int, out_channels: int, kernel: int = 3, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=kernel // 2),
                         FilterResponseNorm(out_channels))


class _Block(nn.Module):
    def __init__(self, in_channels: int, channels: int, stride: int, activation: type[nn.Module]):
        super().__init__()
        self.first = _layer(in_channels, channels, stride=stride)
        self.second = _layer(channels, channels)
        self.activation = activation()
        self.shortcut = (_layer(in_channels, channels, kernel=1, stride=stride)
                         if stride != 1 or in_channels != channels else nn.Identity())

    def forward(self, x):
        y = self.second(self.activation(self.first(x)))
        return self.activation(self.shortcut(x) + y)


class ResNetFRN(nn.Module):
    def __init__(self, depth: int = 20, num_classes: int = 10, in_channels: int = 3, width: int = 16,
                 activation: str = "swish"):
        super().__init__()
        if (depth - 2) % 6:
            raise ValueError(f"depth={depth}: a CIFAR ResNet has depth 6n + 2")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r}: one of {', '.join(ACTIVATIONS)}")
        act = ACTIVATIONS[activation]
        self.stem = nn.Sequential(_layer(in_channels, width), act())
        blocks, channels = [], width
        for stage in range(3):
            out = width * 2**stage
            for index in range((depth - 2) // 6):
                blocks.append(_Block(channels, out, 2 if stage > 0 and index == 0 else 1, act))
                channels = out
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(channels, num_classes)
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x):
        out = self.blocks(self.stem(x))
        return self.head(torch.flatten(nn.functional.avg_pool2d(out, out.shape[-1]), 1))


@register_model
def resnet20_frn(num_classes: int = 10, input_shape: Sequence[int] = (3, 32, 32), activation: str = "swish",
                 width: int = 16) -> ResNetFRN:
    """ResNet-20-FRN (Izmailov et al. 2021): the CIFAR-10 HMC reference's network."""
    return ResNetFRN(20, num_classes, in_channels=input_shape[0], width=width, activation=activation)
