"""The regression model average (csg.evaluation.regression): the Gaussian mixture's moments, density, quantiles
and the metrics of the UCI benchmark, against torch.distributions and draws (issue 60)."""

from __future__ import annotations

import math

import torch
from torch.distributions import Categorical, MixtureSameFamily, Normal

from csg.data.splits import TargetScale, standardize_targets
from csg.evaluation.regression import GaussianMixture, regression_metrics


def _mixture(points=200, members=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(members, points, 1, generator=g)
    variances = 0.1 + torch.rand(members, points, 1, generator=g)
    return GaussianMixture.of(list(means), list(variances), [0.5, 0.3, 0.2][:members])


def _torch_mixture(mixture: GaussianMixture):
    means = mixture.means[..., 0].T  # (points, members)
    sds = mixture.variances[..., 0].T.sqrt()
    return MixtureSameFamily(Categorical(probs=mixture.weights.expand(means.shape[0], -1)), Normal(means, sds))


def test_moments_density_and_quantiles_are_the_mixtures():
    mixture = _mixture()
    reference = _torch_mixture(mixture)
    y = torch.randn(200, 1, dtype=torch.float64)
    assert torch.allclose(mixture.log_density(y), reference.log_prob(y[:, 0]), atol=1e-10)
    assert torch.allclose(mixture.mean()[:, 0], reference.mean, atol=1e-12)
    assert torch.allclose(mixture.variance()[:, 0], reference.variance, atol=1e-12)
    assert torch.allclose(mixture.aleatoric() + mixture.epistemic(), mixture.variance())
    for q in (0.025, 0.5, 0.9):
        assert torch.allclose(mixture.cdf(mixture.quantile(q)), torch.full((200, 1), q, dtype=torch.float64),
                              atol=1e-9)


def test_a_model_that_knows_the_noise_covers_and_is_calibrated_and_an_overconfident_one_is_not():
    g = torch.Generator().manual_seed(1)
    mean, sd = torch.randn(4000, 1, generator=g), 0.5
    y = mean + sd * torch.randn(4000, 1, generator=g)
    right = GaussianMixture.of([mean], [torch.full_like(mean, sd**2)], [1.0])
    metrics = regression_metrics(right, y)
    for level in (50, 90, 95):
        assert abs(metrics[f"coverage_{level}"] - level / 100) < 0.02
    assert metrics["calibration_error"] < 0.015
    assert abs(metrics["rmse"] - sd) < 0.02
    assert abs(metrics["log_likelihood"] - (-0.5 * math.log(2 * math.pi * sd**2) - 0.5)) < 0.03
    assert metrics["nll"] == -metrics["log_likelihood"] and metrics["epistemic_var"] == 0.0
    narrow = regression_metrics(GaussianMixture.of([mean], [torch.full_like(mean, (sd / 3) ** 2)], [1.0]), y)
    assert narrow["coverage_95"] < 0.5 and narrow["calibration_error"] > 0.1
    assert narrow["log_likelihood"] < metrics["log_likelihood"]


def test_metrics_in_the_original_units_of_standardised_targets():
    g = torch.Generator().manual_seed(2)
    raw_train, raw_test = 40 + 8 * torch.randn(100, 1, generator=g), 40 + 8 * torch.randn(50, 1, generator=g)
    train, test, scale = standardize_targets(raw_train, raw_test)
    assert abs(float(train.mean())) < 1e-6 and abs(float(train.std()) - 1) < 1e-6
    assert torch.allclose(scale.targets(test.double()), raw_test.double(), atol=1e-5)
    z_mixture = GaussianMixture.of([torch.zeros(50, 1)], [torch.ones(50, 1)], [1.0])
    in_z = regression_metrics(z_mixture, test)
    in_units = regression_metrics(z_mixture.in_units(scale), scale.targets(test.double()))
    assert math.isclose(in_units["rmse"], in_z["rmse"] * scale.scale[0], rel_tol=1e-6)
    assert math.isclose(in_units["log_likelihood"], in_z["log_likelihood"] - math.log(scale.scale[0]), rel_tol=1e-6)
    assert in_units["coverage_90"] == in_z["coverage_90"]
    assert TargetScale((1.0,), (2.0,)).mean_and_variance(torch.ones(1), torch.ones(1))[1].item() == 4.0
