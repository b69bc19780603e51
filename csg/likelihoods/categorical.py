r"""The categorical likelihood of classification (csg's default):
:math:`p(y \mid f) = \mathrm{softmax}(f)_y`, so :math:`\ell = -\log \mathrm{softmax}(f)_y` (the cross-entropy)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from csg.likelihoods.base import Likelihood


class Categorical(Likelihood):
    """Class probabilities from one logit per class: the cross-entropy loss every paper of csg uses."""

    task = "classification"

    def nll(self, output: Tensor, y: Tensor, params=None) -> Tensor:
        return F.cross_entropy(output, y, reduction="none")

    def total_nll(self, output: Tensor, y: Tensor, params=None) -> Tensor:
        return F.cross_entropy(output, y, reduction="sum")

    def loss(self, output: Tensor, y: Tensor, params=None, num_data: int = 1, scale: float | None = None) -> Tensor:
        # the fused mean (or sum) of the cross-entropy, exactly as the loop has always computed it
        return F.cross_entropy(output, y) if scale is None else F.cross_entropy(output, y, reduction="sum") * scale

    def predictive(self, output: Tensor, params=None) -> Tensor:
        return torch.softmax(output.float(), dim=-1)
