"""Stochastic gradient Langevin dynamics, written as a user writes a torch.optim.Optimizer.

csg constructs it as ``LangevinSampler(params, lr=..., num_data=N, temperature=T, weight_decay=wd,
generator=...)`` and sets every param group's ``lr`` and ``temperature`` before each step from its
schedule (temperature 0 in the exploration stages of a cycle). With the gradient g of the MEAN
mini-batch loss, one step is

    theta <- theta - lr * (g + wd * theta) + sqrt(2 lr T / N) * xi,    xi ~ N(0, I),

Langevin dynamics on exp(-U / T), U = N * mean loss + (N wd / 2) |theta|^2, with step lr / N.
"""

from __future__ import annotations

import math

import torch


class LangevinSampler(torch.optim.Optimizer):
    def __init__(self, params, lr: float, num_data: int, temperature: float = 1.0, weight_decay: float = 0.0,
                 generator: torch.Generator | None = None):
        super().__init__(params, dict(lr=lr, num_data=num_data, temperature=temperature, weight_decay=weight_decay))
        self.generator = generator

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, decay = group["lr"], group["weight_decay"]
            scale = math.sqrt(2.0 * lr * group["temperature"] / group["num_data"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.mul_(1.0 - lr * decay).add_(p.grad, alpha=-lr)
                if scale > 0:
                    p.add_(torch.randn(p.shape, generator=self.generator, dtype=p.dtype, device=p.device), alpha=scale)
