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

    ``pool > 1`` averages the image over ``pool x pool`` blocks first (no parameters): a 28 x 28 digit becomes
    7 x 7 at ``pool=4``, small enough for an exact sampler of the whole network (the posterior benchmark).
    """

    def __init__(self, in_features: int, num_classes: int, hidden: Sequence[int] = (200, 200, 200), pool: int = 1):
        layers: list[nn.Module] = ([nn.AvgPool2d(pool)] if pool > 1 else []) + [nn.Flatten()]
        width = in_features
        for units in hidden:
            layers += [nn.Linear(width, units), nn.ReLU(inplace=True)]
            width = units
        layers.append(nn.Linear(width, num_classes))
        super().__init__(*layers)


@register_model
def mlp(num_classes: int = 10, input_shape: Sequence[int] = (1, 28, 28), hidden: Sequence[int] = (200, 200, 200),
        pool: int = 1) -> MLP:
    if isinstance(hidden, (str, bytes)) or not all(isinstance(u, int) and not isinstance(u, bool) and u > 0
                                                   for u in hidden):
        raise ConfigError("model.hidden", hidden, "a list of positive integers (units per hidden layer; [] for none)")
    size = tuple(input_shape[-2:]) if len(input_shape) == 3 else ()
    if (not isinstance(pool, int) or isinstance(pool, bool) or pool < 1
            or (pool > 1 and not (size and all(side % pool == 0 for side in size)))):
        raise ConfigError("model.pool", pool, f"1 (none) or an integer >= 2 that divides the image's sides "
                                              f"(input shape {tuple(input_shape)})")
    features = input_shape[0] * (size[0] // pool) * (size[1] // pool) if pool > 1 else math.prod(input_shape)
    return MLP(features, num_classes, tuple(hidden), pool)
