"""The MNIST multi-layer perceptron of the paper's uncertainty experiment (Section 5.3)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn

from csg.errors import ConfigError
from csg.models.registry import register_model


class MLP(nn.Sequential):
    """Flatten, then ``len(hidden)`` fully connected ReLU layers, then a linear classifier.

    The paper trains "a three-layer MLP" on MNIST for the notMNIST entropy
    test it takes from Lakshminarayanan et al. (2017), who use three hidden
    layers of 200 units; the paper gives no widths, so that is the default
    here: 784-200-200-200-10, 239,410 parameters. No batch norm, so every
    parameter is a weight of the likelihood and the prior.
    """

    def __init__(self, in_features: int, num_classes: int, hidden: Sequence[int] = (200, 200, 200)):
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for units in hidden:
            layers += [nn.Linear(width, units), nn.ReLU(inplace=True)]
            width = units
        layers.append(nn.Linear(width, num_classes))
        super().__init__(*layers)


@register_model
def mlp(num_classes: int = 10, input_shape: Sequence[int] = (1, 28, 28), hidden: Sequence[int] = (200, 200, 200)) -> MLP:
    if isinstance(hidden, (str, bytes)) or not all(isinstance(u, int) and not isinstance(u, bool) and u > 0
                                                   for u in hidden):
        raise ConfigError("model.hidden", hidden, "a list of positive integers (units per hidden layer; [] for none)")
    return MLP(math.prod(input_shape), num_classes, tuple(hidden))
