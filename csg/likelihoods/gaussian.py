r"""Gaussian likelihoods of regression, for targets :math:`y \in \mathbb{R}^d` (one model output per column).

- :class:`Gaussian`: a fixed noise, :math:`\ell = \tfrac12\log(2\pi\sigma^2) + \tfrac{(y - f)^2}{2\sigma^2}`;
- :class:`GaussianPrecision`: a noise precision :math:`\tau` sampled with the weights under a
  :math:`\mathrm{Gamma}(a, b)` prior (shape, rate);
  held as :math:`s = \log\tau`, so :math:`\ell = \tfrac12\log 2\pi - \tfrac{s}{2} + \tfrac{e^s (y - f)^2}{2}` and
  :math:`-\log p(s) = -a s + b e^s` (the Gamma density times the Jacobian :math:`e^s`);
- :class:`Heteroscedastic`: a variance per input from a second block of outputs, :math:`f = (\mu, \rho)`,
  :math:`\sigma^2 = \mathrm{softplus}(\rho) + \sigma^2_{\min}` (Lakshminarayanan et al. 2017, Sec. 2.2.1).

Each member predicts a Gaussian :math:`\mathcal{N}(\mu, \sigma^2)`; the posterior's prediction is their mixture
(:mod:`csg.evaluation.regression`). Sums run over the target columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from csg.errors import ConfigError
from csg.likelihoods.base import Likelihood

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def normal_log_density(y: Tensor, mean: Tensor, variance: Tensor | float) -> Tensor:
    """:math:`\\log \\mathcal{N}(y; \\mu, \\sigma^2)` elementwise: the Gaussian likelihoods' terms and the mixture's
    (:mod:`csg.evaluation.regression`)."""
    variance = torch.as_tensor(variance, dtype=mean.dtype, device=mean.device)
    return -0.5 * (math.log(2 * math.pi) + variance.log() + (y - mean).square() / variance)


def _positive(key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"likelihood.{key}", value, "a finite number > 0")
    return float(value)


def _targets(y: Tensor, like: Tensor) -> Tensor:
    return y.reshape(like.shape).to(like.dtype)


class Gaussian(Likelihood):
    """:math:`y \\sim \\mathcal{N}(f(x), \\sigma^2)` with a fixed ``noise_std`` :math:`\\sigma` (in the units the
    model sees: standardised targets for the UCI sets)."""

    task = "regression"

    def __init__(self, noise_std: float = 1.0):
        self.noise_std = _positive("noise_std", noise_std)

    def nll(self, output: Tensor, y: Tensor, params=None) -> Tensor:
        output = output.float()
        return -normal_log_density(_targets(y, output), output, self.noise_std**2).flatten(1).sum(1)

    def predictive(self, output: Tensor, params=None) -> tuple[Tensor, Tensor]:
        mean = output.float()
        return mean, torch.full_like(mean, self.noise_std**2)

    def __repr__(self) -> str:
        return f"Gaussian(noise_std={self.noise_std:g})"


class GaussianPrecision(Likelihood):
    """:math:`y \\sim \\mathcal{N}(f(x), 1/\\tau)`, :math:`\\tau \\sim \\mathrm{Gamma}(` ``shape``, ``rate`` :math:`)`
    sampled with the weights (one precision shared by every target column), starting at ``init_precision``."""

    task = "regression"

    def __init__(self, shape: float = 6.0, rate: float = 6.0, init_precision: float = 1.0):
        self.shape, self.rate = _positive("shape", shape), _positive("rate", rate)
        self.init_precision = _positive("init_precision", init_precision)

    def initial_parameters(self) -> dict[str, Tensor]:
        return {"log_precision": torch.tensor(math.log(self.init_precision))}

    def nll(self, output: Tensor, y: Tensor, params: Mapping[str, Tensor]) -> Tensor:
        output = output.float()
        s = params["log_precision"].float()
        residual = _targets(y, output) - output
        per_column = HALF_LOG_2PI - 0.5 * s + 0.5 * torch.exp(s) * residual.square()
        return per_column.flatten(1).sum(1)

    def prior_energy(self, params: Mapping[str, Tensor]) -> Tensor:
        s = params["log_precision"].float()
        return -self.shape * s + self.rate * torch.exp(s)

    def predictive(self, output: Tensor, params: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
        mean = output.float()
        return mean, torch.exp(-params["log_precision"].float()).expand_as(mean).clone()

    def __repr__(self) -> str:
        return f"GaussianPrecision(shape={self.shape:g}, rate={self.rate:g})"


class Heteroscedastic(Likelihood):
    """:math:`y \\sim \\mathcal{N}(\\mu(x), \\sigma^2(x))`: the model gives ``2 d`` outputs, the means then the
    raw variances, :math:`\\sigma^2 = \\mathrm{softplus}(\\rho) +` ``min_variance``."""

    task = "regression"

    def __init__(self, min_variance: float = 1e-6):
        self.min_variance = _positive("min_variance", min_variance)

    def num_outputs(self, targets: int) -> int:
        return 2 * targets

    def predictive(self, output: Tensor, params=None) -> tuple[Tensor, Tensor]:
        output = output.float()
        d = output.shape[-1] // 2
        return output[..., :d], F.softplus(output[..., d:]) + self.min_variance

    def nll(self, output: Tensor, y: Tensor, params=None) -> Tensor:
        mean, variance = self.predictive(output)
        return -normal_log_density(_targets(y, mean), mean, variance).flatten(1).sum(1)

    def __repr__(self) -> str:
        return f"Heteroscedastic(min_variance={self.min_variance:g})"
