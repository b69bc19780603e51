"""Logistic regression as a two-class model, so the framework's cross-entropy loss and metrics apply."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from csg.errors import ConfigError

from csg.models.registry import register_model


class LogisticRegression(nn.Module):
    r"""p(y = 1 | x) = sigmoid(w.x + b), returned as the two logits (0, w.x + b).

    Softmax cross-entropy of these logits is exactly the logistic loss, so
    U = N * mean_loss + (N wd / 2) |theta|^2 is the negative log posterior of
    Bayesian logistic regression with prior N(0, I / (N wd)) on (w, b).
    """

    def __init__(self, in_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.linear(x.flatten(1))
        return torch.cat([torch.zeros_like(z), z], dim=1)


@register_model
def logreg(num_classes: int = 2, input_shape: Sequence[int] = (1,)) -> LogisticRegression:
    if num_classes != 2:
        raise ConfigError("model.name", "logreg", f"a model of {num_classes} classes: logistic regression is binary "
                          "(data=heart, german or australian)")
    return LogisticRegression(math.prod(input_shape))
