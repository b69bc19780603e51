"""Analytic targets: an energy U(x) and its gradient, on many chains at once.

``x`` has shape (..., dim) (chains x dim in practice); ``energy`` returns
shape (...) and ``grad`` the shape of ``x``. The unnormalised density is
exp(-U(x)). Optional Gaussian noise on the gradient and on the energy mimics
mini-batch estimates, as the papers' simulations do.
"""

from __future__ import annotations

import torch
from torch import Tensor


class Target:
    """Base class of analytic targets exp(-U(x))."""

    dim: int

    def __init__(self, *, grad_noise: float = 0.0, energy_noise: float = 0.0):
        if grad_noise < 0 or energy_noise < 0:
            raise ValueError("noise scales must be >= 0")
        self.grad_noise = grad_noise
        self.energy_noise = energy_noise

    def energy(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def grad(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """U(x) and grad U(x) together; a target whose gradient comes from autograd overrides it with one pass."""
        return self.energy(x), self.grad(x)

    def noisy_grad(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """grad U(x) + grad_noise * N(0, I): a stochastic gradient."""
        g = self.grad(x)
        if self.grad_noise > 0:
            g = g + self.grad_noise * torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
        return g

    def noisy_energy(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """U(x) + energy_noise * N(0, 1): a stochastic energy."""
        u = self.energy(x)
        if self.energy_noise > 0:
            u = u + self.energy_noise * torch.randn(u.shape, generator=generator, dtype=x.dtype, device=x.device)
        return u

    def grid_density(self, low: float, high: float, points: int = 200) -> tuple[Tensor, Tensor, Tensor]:
        """A 2-D target's density on a ``points`` x ``points`` grid, normalised to sum to 1: (xs, ys, p)."""
        if self.dim != 2:
            raise ValueError("grid_density needs a 2-D target")
        axis = torch.linspace(low, high, points, dtype=torch.float64)
        xx, yy = torch.meshgrid(axis, axis, indexing="xy")
        log_p = -self.energy(torch.stack([xx, yy], dim=-1))
        p = torch.softmax(log_p.flatten(), 0).reshape(points, points)
        return axis, axis, p
