"""csg.evaluation.convergence against ArviZ, whose formulas it transcribes: the same R-hat and ESS, variable by
variable, on draws built to reach every branch (ties, constants, NaN, few draws, odd lengths, the Geyer
sequences' stops on strongly positive and negative autocorrelation)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from csg.evaluation.convergence import ess, rank_rhat


def _arviz(function: str, draws: np.ndarray, **options) -> np.ndarray:
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = getattr(az, function)(az.convert_to_dataset(draws), **options)["x"].values
    return np.asarray(result, dtype=np.float64)


def _draws(chains: int, draws: int, seed: int = 0) -> np.ndarray:
    """Variables of every kind the branches need, side by side on the last axis."""
    rng = np.random.default_rng(seed)
    columns = [rng.standard_normal((chains, draws)) for _ in range(3)]
    for phi in (0.95, 0.6, -0.9, -0.5):  # AR(1): long and short positive, alternating (the sequences' stops)
        series = np.zeros((chains, draws))
        for t in range(1, draws):
            series[:, t] = phi * series[:, t - 1] + rng.standard_normal(chains)
        columns.append(series)
    columns += [rng.integers(0, 3, (chains, draws)).astype(float),  # ties
                np.full((chains, draws), 0.25),  # constant
                rng.standard_normal((chains, draws)) + np.arange(chains)[:, None] * 3,  # chains apart
                (rng.random((chains, draws)) < 0.03).astype(float)]  # a rare indicator
    nan = rng.standard_normal((chains, draws))
    nan[0, 1] = np.nan
    columns.append(nan)
    return np.stack(columns, axis=-1)


@pytest.mark.parametrize("chains, draws", [(4, 200), (2, 21), (1, 40), (3, 4), (2, 3), (2, 9)])
def test_rhat_and_every_ess_equal_arvizs_variable_by_variable(chains, draws):
    x = _draws(chains, draws, seed=chains * 100 + draws)
    np.testing.assert_allclose(rank_rhat(x), _arviz("rhat", x, method="rank"), rtol=1e-10, equal_nan=True)
    for method in ("bulk", "tail", "mean"):
        # the tail ESS's quantiles: 0.05 and 0.95 (Vehtari et al. 2021, ArviZ 0.x's default; 1.x's is its ci_prob)
        options = {"prob": (0.05, 0.95)} if method == "tail" else {}
        np.testing.assert_allclose(ess(x, method), _arviz("ess", x, method=method, **options), rtol=1e-10,
                                   equal_nan=True, err_msg=method)


def test_the_shape_of_the_variables_is_kept_and_a_bad_method_is_refused():
    x = np.random.default_rng(1).standard_normal((2, 30, 4, 5))
    assert rank_rhat(x).shape == (4, 5) and ess(x, "tail").shape == (4, 5)
    np.testing.assert_allclose(ess(x).ravel(), ess(x.reshape(2, 30, 20)), rtol=0)
    with pytest.raises(ValueError, match="one of bulk, tail, mean"):
        ess(x, "median")


def test_autocorrelation_is_its_definition_at_every_lag():
    """rho_t = sum_{i<n-t} (x_i - mean)(x_{i+t} - mean) / sum_i (x_i - mean)^2, written out, on AR(1) draws of
    several variables at once (and the lag-1 value the chain diagnostics report); a constant variable is NaN."""
    from csg.evaluation.convergence import autocorrelation

    rng = np.random.default_rng(3)
    draws = np.zeros((57, 2, 3))
    for t in range(1, 57):
        draws[t] = 0.8 * draws[t - 1] + rng.standard_normal((2, 3))
    draws[:, 1, 2] = 4.0
    found = autocorrelation(draws)
    assert found.shape == draws.shape
    for j, k in ((0, 0), (1, 1), (0, 2)):
        centred = draws[:, j, k] - draws[:, j, k].mean()
        direct = [centred[: 57 - t] @ centred[t:] / (centred @ centred) for t in range(57)]
        np.testing.assert_allclose(found[:, j, k], direct, rtol=1e-9, atol=1e-12)
    assert np.isnan(found[:, 1, 2]).all() and found[1, 0, 0] > 0.6  # AR(0.8): a strong lag-1 correlation
    with pytest.raises(ValueError, match="draws, \\*variables"):
        autocorrelation(np.float64(1.0))
