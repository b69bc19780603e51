"""The regression likelihoods' samplers against exact posteriors (issue 60).

Bayesian linear regression with a known noise has a Gaussian posterior in closed form: with the sampler's weight
decay wd a prior N(0, (N wd)^-1 I), the posterior of the weights is N(m, S), S = (N wd I + X^T X / sigma^2)^-1,
m = S X^T y / sigma^2. SGLD and SGHMC step csg's own training step (csg.engine.step.single.Step, the loss of
csg.likelihoods.Gaussian) on the full batch, so the only error left is the discretisation's (O(lr)) and the Monte
Carlo error of the draws. The sampled noise precision is checked on a model that predicts 0 (no weights to learn):
then tau | y ~ Gamma(a + N / 2, b + sum y^2 / 2) exactly, which the prior energy and its Jacobian must give.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from csg.engine.devices import Precision
from csg.engine.step.single import Step
from csg.likelihoods import Gaussian, GaussianPrecision, attach, own_parameters
from csg.samplers import SGHMC, SGLD

N, D, SIGMA, WD = 40, 2, 0.5, 0.05


def _data():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(N, D, generator=g)
    x[:, 1] = 0.6 * x[:, 0] + 0.8 * x[:, 1]  # correlated inputs: a posterior correlation of about -0.6
    y = x @ torch.tensor([1.0, -0.5]) + SIGMA * torch.randn(N, generator=g)
    return x, y.reshape(N, 1)


def _exact(x, y):
    x64, y64 = x.double(), y.double().reshape(-1)
    covariance = torch.linalg.inv(N * WD * torch.eye(D, dtype=torch.float64) + x64.T @ x64 / SIGMA**2)
    return covariance @ x64.T @ y64 / SIGMA**2, covariance


def _draws(sampler_kind, steps=6_000, burn=500, lr=0.02):
    x, y = _data()
    torch.manual_seed(0)
    model = nn.Linear(D, 1, bias=False)
    generator = torch.Generator().manual_seed(11)
    options = dict(lr=lr, num_data=N, temperature=1.0, weight_decay=WD, generator=generator)
    sampler = SGLD(model.parameters(), **options) if sampler_kind == "sgld" else SGHMC(
        model.parameters(), momentum=0.9, **options)
    step = Step(model, sampler, Precision("32", torch.device("cpu")), likelihood=Gaussian(SIGMA), num_data=N)
    draws = []
    for k in range(steps):
        step(x, y)
        if k >= burn:
            draws.append(model.weight.detach().reshape(-1).clone())
    return torch.stack(draws).double(), x, y


@pytest.mark.parametrize("kind", ["sgld", "sghmc"])
def test_gaussian_likelihood_samplers_draw_the_exact_linear_regression_posterior(kind):
    draws, x, y = _draws(kind, steps=10_000 if kind == "sgld" else 6_000)
    mean, covariance = _exact(x, y)
    sd = covariance.diagonal().sqrt()
    # Monte Carlo error of the mean: draws are autocorrelated (about 25 steps apart), so allow 4 standard errors of
    # 100 effective draws
    assert torch.all((draws.mean(0) - mean).abs() < 4 * sd / math.sqrt(100)), (draws.mean(0), mean)
    sampled = torch.from_numpy(np.cov(draws.numpy().T))
    assert torch.allclose(sampled.diagonal(), covariance.diagonal(), rtol=0.2), (sampled, covariance)
    correlation = covariance[0, 1] / (sd[0] * sd[1])
    assert correlation < -0.4
    assert abs(sampled[0, 1] / sampled.diagonal().sqrt().prod() - correlation) < 0.15  # ~2 standard errors


def test_a_wrong_noise_misses_the_exact_posterior():
    """The check above can fail: the posterior of a likelihood with twice the noise is twice as wide."""
    x, y = _data()
    torch.manual_seed(0)
    model = nn.Linear(D, 1, bias=False)
    sampler = SGLD(model.parameters(), lr=0.02, num_data=N, weight_decay=WD, generator=torch.Generator().manual_seed(1))
    step = Step(model, sampler, Precision("32", torch.device("cpu")), likelihood=Gaussian(2 * SIGMA), num_data=N)
    draws = []
    for k in range(3_000):
        step(x, y)
        if k >= 500:
            draws.append(model.weight.detach().reshape(-1).clone())
    _, covariance = _exact(x, y)
    sampled = torch.from_numpy(np.cov(torch.stack(draws).double().numpy().T))
    assert not torch.allclose(sampled.diagonal(), covariance.diagonal(), rtol=0.2)


class _Zero(nn.Module):
    """Predicts 0 for every input; its one weight never meets the data (only the likelihood's precision does)."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return torch.zeros(x.shape[0], 1) + 0 * self.unused


def test_the_sampled_noise_precision_draws_its_exact_gamma_posterior():
    shape, rate = 3.0, 2.0
    likelihood = GaussianPrecision(shape=shape, rate=rate, init_precision=1.0)
    _, y = _data()
    model = attach(likelihood, _Zero())
    phi = own_parameters(likelihood, model)["log_precision"]
    groups = [{"params": [model.unused]}, {"params": [phi], "weight_decay": 0.0}]
    sampler = SGLD(groups, lr=0.01, num_data=N, weight_decay=WD, generator=torch.Generator().manual_seed(5))
    step = Step(model, sampler, Precision("32", torch.device("cpu")), likelihood=likelihood, num_data=N)
    draws = []
    for k in range(6_000):
        step(torch.zeros(N, 1), y)
        if k >= 500:
            draws.append(phi.detach().exp().item())
    draws = np.asarray(draws)
    a, b = shape + N / 2, rate + float(y.square().sum()) / 2
    exact_mean, exact_sd = a / b, math.sqrt(a) / b
    assert abs(draws.mean() - exact_mean) < 4 * exact_sd / math.sqrt(100)
    assert abs(draws.std() / exact_sd - 1) < 0.2
