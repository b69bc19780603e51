"""Gaussian mixtures with isotropic components: the 25-mode grids of the papers and the 1-D bias example."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from studies.targets.base import Target


class GaussianMixture(Target):
    r"""p(x) = sum_i w_i N(x | mu_i, sigma_i^2 I), energy U(x) = -log p(x).

    The gradient is :math:`\nabla U(x) = \sum_i r_i(x)\,(x - \mu_i)/\sigma_i^2` with
    responsibilities :math:`r_i(x) \propto w_i N(x\mid\mu_i,\sigma_i^2 I)`.
    """

    def __init__(self, means: Tensor, variances: Tensor, weights: Tensor | None = None, **noise: float):
        super().__init__(**noise)
        self.means = torch.as_tensor(means, dtype=torch.float64)
        if self.means.ndim == 1:
            self.means = self.means[:, None]
        count, self.dim = self.means.shape
        self.variances = torch.as_tensor(variances, dtype=torch.float64).expand(count).clone()
        weights = torch.full((count,), 1.0 / count, dtype=torch.float64) if weights is None else torch.as_tensor(weights, dtype=torch.float64)
        if weights.shape != (count,) or torch.any(weights <= 0) or torch.any(self.variances <= 0):
            raise ValueError("need one positive weight and variance per component")
        self.weights = weights / weights.sum()
        self._log_norm = self.weights.log() - 0.5 * self.dim * torch.log(2 * math.pi * self.variances)
        self._precision = 1.0 / self.variances
        self._half_sq_means = 0.5 * self.means.pow(2).sum(-1)
        self._cache: dict[tuple, tuple[Tensor, ...]] = {}

    def _constants(self, x: Tensor) -> tuple[Tensor, ...]:
        key = (x.dtype, x.device)
        if key not in self._cache:
            self._cache[key] = tuple(
                t.to(x) for t in (self.means, self._precision, self._log_norm, self._half_sq_means)
            )
        return self._cache[key]

    def _log_components(self, x: Tensor) -> Tensor:
        """log w_i + log N(x | mu_i, sigma_i^2 I), shape (..., components)."""
        means, precision, log_norm, half_sq_means = self._constants(x)
        # -|x - mu|^2 / 2 = x.mu - |x|^2 / 2 - |mu|^2 / 2, with one matrix product
        half_sq = 0.5 * x.pow(2).sum(-1, keepdim=True) - x @ means.T + half_sq_means
        return log_norm - half_sq * precision

    def energy(self, x: Tensor) -> Tensor:
        return -torch.logsumexp(self._log_components(x), dim=-1)

    def grad(self, x: Tensor) -> Tensor:
        means, precision, _, _ = self._constants(x)
        a = torch.softmax(self._log_components(x), dim=-1) * precision  # r_i / sigma_i^2
        return x * a.sum(-1, keepdim=True) - a @ means

    def component(self, x: Tensor) -> Tensor:
        """The most responsible component of each point (an index per point)."""
        return self._log_components(x).argmax(-1)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """n exact draws from the mixture."""
        index = torch.multinomial(self.weights, n, replacement=True, generator=generator)
        noise = torch.randn(n, self.dim, generator=generator, dtype=torch.float64)
        return self.means[index] + noise * self.variances[index].sqrt()[:, None]


def grid_means(values: Sequence[float] = (-4, -2, 0, 2, 4)) -> Tensor:
    """The 25 centres {-4, -2, 0, 2, 4}^2, ordered (x, y) with y fastest: index 24 is (4, 4)."""
    axis = torch.tensor(list(values), dtype=torch.float64)
    return torch.cartesian_prod(axis, axis)


def mog25(variance: float = 0.03, **noise: float) -> GaussianMixture:
    """cSG-MCMC Appendix A.1: 25 equally weighted modes on {-4,...,4}^2, covariance 0.03 I."""
    return GaussianMixture(grid_means(), torch.tensor(variance), **noise)


def mog25_unequal(variance: float = 0.2, unequal: bool = False, **noise: float) -> GaussianMixture:
    """Wang et al. 2024 Section 4.2.1: sigma_i^2 = 0.2 (equal) or 0.2 / i, i = 1..25 (unequal)."""
    scale = torch.arange(1, 26, dtype=torch.float64) if unequal else torch.ones(25, dtype=torch.float64)
    return GaussianMixture(grid_means(), variance / scale, **noise)


def mixture1d(c: float = 1.0, **noise: float) -> GaussianMixture:
    """Wang et al. 2024 Section 3.1: 0.5 N(5, 1) + 0.5 N(-5, c^2)."""
    return GaussianMixture(torch.tensor([5.0, -5.0]), torch.tensor([1.0, c * c]), **noise)
