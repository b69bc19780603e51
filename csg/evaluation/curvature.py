r"""The sharpness of the training loss at a sample: is a warm restart from it stable?

A cyclical schedule restarts each cycle at :math:`\alpha_0` from the last sample of the cycle before. Near a
minimum, heavy-ball SGD with momentum :math:`\mu` (the configs' ``sampler.momentum``; 0 for plain SGD/SGLD) is
stable along a direction of curvature :math:`\lambda` only while :math:`\alpha_0 \lambda < 2 (1 + \mu)`;
beyond it the restart is a catapult (the loss jumps) and, far beyond, a divergence. :func:`top_eigenvalue`
gives :math:`\lambda_{\max}` of the Hessian of the mean training loss
:math:`\frac1N \sum_i \ell(x_i, y_i; \theta)` by power iteration on exact Hessian-vector products (double
back-propagation over the whole training set, no approximation).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn


def top_eigenvalue(model: nn.Module, loader: Iterable, iterations: int = 30, seed: int = 0) -> float:
    r""":math:`\lambda_{\max}` of the Hessian of the mean cross-entropy of ``model`` over ``loader``'s ``(x, y)``
    batches, by ``iterations`` steps of power iteration from a seeded random direction (the Rayleigh quotient
    of the last step). The model is evaluated as it is (call ``model.eval()`` for batch-norm statistics)."""
    params = [p for p in model.parameters() if p.requires_grad]
    batches = list(loader)
    count = sum(len(y) for _, y in batches)

    def hessian_times(vector: list[torch.Tensor]) -> list[torch.Tensor]:
        total = [torch.zeros_like(p) for p in params]
        for x, y in batches:
            loss = nn.functional.cross_entropy(model(x), y, reduction="sum")
            grads = torch.autograd.grad(loss, params, create_graph=True)
            product = torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vector)), params)
            total = [t + h.detach() for t, h in zip(total, product)]
        return [t / count for t in total]

    generator = torch.Generator().manual_seed(seed)
    vector = [torch.randn(p.shape, generator=generator).to(p) for p in params]
    eigenvalue = 0.0
    for _ in range(iterations):
        norm = torch.sqrt(sum((v.double() ** 2).sum() for v in vector))
        vector = [v / norm for v in vector]
        product = hessian_times(vector)
        eigenvalue = float(sum((h.double() * v.double()).sum() for h, v in zip(product, vector)))
        vector = product
    return eigenvalue
