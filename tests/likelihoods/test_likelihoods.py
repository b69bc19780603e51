"""The likelihoods' math against torch.distributions, their names and keys, and their refusals (issue 60)."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Gamma, Normal

from csg.errors import ConfigError
from csg.likelihoods import (LIKELIHOODS, Categorical, Gaussian, GaussianPrecision, Heteroscedastic, attach,
                             create_likelihood, own_parameters, parameter_names)
from csg.likelihoods.settings import KEYS, NAMES


def _batch(columns=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(7, columns, generator=g), torch.randn(7, columns, generator=g)


def test_the_names_and_keys_the_checks_read_are_the_registrys():
    assert tuple(LIKELIHOODS) == NAMES
    for name, kind in LIKELIHOODS.items():
        assert tuple(inspect.signature(kind).parameters) == KEYS[name]


def test_categorical_is_the_cross_entropy_the_loop_always_computed():
    logits, y = torch.randn(9, 4), torch.arange(9) % 4
    assert torch.equal(Categorical().loss(logits, y, {}, 100), F.cross_entropy(logits, y))
    assert torch.equal(Categorical().loss(logits, y, {}, 100, scale=0.5), F.cross_entropy(logits, y, reduction="sum") * 0.5)
    assert torch.allclose(Categorical().nll(logits, y), -torch.log_softmax(logits, 1)[torch.arange(9), y])
    assert int(Categorical().score(logits, y, {})) == int((logits.argmax(1) == y).sum())


@pytest.mark.parametrize("columns", [1, 3])
def test_gaussian_nll_is_the_normal_log_density(columns):
    output, y = _batch(columns)
    expected = -Normal(output, 0.7).log_prob(y).sum(1)
    assert torch.allclose(Gaussian(0.7).nll(output, y), expected, atol=1e-6)
    assert torch.allclose(Gaussian(0.7).nll(output, y.reshape(7, columns)), expected, atol=1e-6)
    mean, variance = Gaussian(0.7).predictive(output)
    assert torch.equal(mean, output) and torch.allclose(variance, torch.full_like(output, 0.49))


def test_sampled_precision_nll_prior_and_loss():
    likelihood = GaussianPrecision(shape=3.0, rate=2.0)
    output, y = _batch(2)
    s = torch.tensor(0.4)
    expected = -Normal(output, math.exp(-0.2)).log_prob(y).sum(1)  # sd = tau^-1/2
    assert torch.allclose(likelihood.nll(output, y, {"log_precision": s}), expected, atol=1e-6)
    # -log p(s) = -log Gamma(e^s) - s (the Jacobian), up to a constant: compare differences at two points
    gamma = Gamma(3.0, 2.0)
    energy = [likelihood.prior_energy({"log_precision": torch.tensor(v)}) for v in (0.4, -1.3)]
    reference = [-(gamma.log_prob(torch.tensor(v).exp()) + v) for v in (0.4, -1.3)]
    assert torch.allclose(energy[0] - energy[1], reference[0] - reference[1], atol=1e-5)
    loss = likelihood.loss(output, y, {"log_precision": s}, num_data=50)
    assert torch.allclose(loss, expected.mean() + energy[0] / 50, atol=1e-6)
    _, variance = likelihood.predictive(output, {"log_precision": s})
    assert torch.allclose(variance, torch.full_like(output, math.exp(-0.4)))


def test_heteroscedastic_reads_a_variance_per_input_from_the_second_half():
    likelihood = Heteroscedastic(min_variance=1e-3)
    assert likelihood.num_outputs(2) == 4
    output, y = torch.randn(7, 4), torch.randn(7, 2)
    mean, variance = likelihood.predictive(output)
    assert torch.equal(mean, output[:, :2]) and torch.allclose(variance, F.softplus(output[:, 2:]) + 1e-3)
    assert torch.allclose(likelihood.nll(output, y), -Normal(mean, variance.sqrt()).log_prob(y).sum(1), atol=1e-5)


def test_the_precision_lives_on_the_model_and_is_read_through_wrappers():
    likelihood = GaussianPrecision(init_precision=4.0)
    model = attach(likelihood, torch.nn.Linear(3, 1))
    assert parameter_names(likelihood) == ["likelihood_log_precision"]
    assert "likelihood_log_precision" in model.state_dict()
    assert math.isclose(float(model.likelihood_log_precision), math.log(4.0), rel_tol=1e-6)
    wrapped = torch.nn.Sequential()  # a wrapper holding the model as .module, as DDP does
    wrapped.module = model
    assert own_parameters(likelihood, wrapped)["log_precision"] is model.likelihood_log_precision
    assert own_parameters(Gaussian(), model) == {}
    with pytest.raises(ValueError, match="no likelihood parameter likelihood_log_precision"):
        own_parameters(likelihood, torch.nn.Linear(3, 1))


@pytest.mark.parametrize("name, options, fragment", [
    ("poisson", {}, "likelihood.name='poisson' is not allowed: one of categorical, gaussian, gaussian_precision, "
                    "heteroscedastic, or likelihood=custom with a _target_"),
    ("gaussian", {"noise_std": -1.0}, "likelihood.noise_std=-1.0 is not allowed: a finite number > 0"),
    ("gaussian", {"noise_std": float("nan")}, "likelihood.noise_std=nan is not allowed: a finite number > 0"),
    ("gaussian_precision", {"noise_std": 1.0}, "likelihood.noise_std=1.0 is not allowed: a key of "
                                               "likelihood=gaussian_precision (shape, rate, init_precision)"),
    ("categorical", {"shape": 1.0}, "a key of likelihood=categorical (none)"),
])
def test_a_bad_likelihood_is_one_line(name, options, fragment):
    with pytest.raises(ConfigError) as refused:
        create_likelihood(name, **options)
    assert fragment in str(refused.value) and "\n" not in str(refused.value)
