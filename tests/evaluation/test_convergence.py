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
        np.testing.assert_allclose(ess(x, method), _arviz("ess", x, method=method), rtol=1e-10, equal_nan=True,
                                   err_msg=method)


def test_the_shape_of_the_variables_is_kept_and_a_bad_method_is_refused():
    x = np.random.default_rng(1).standard_normal((2, 30, 4, 5))
    assert rank_rhat(x).shape == (4, 5) and ess(x, "tail").shape == (4, 5)
    np.testing.assert_allclose(ess(x).ravel(), ess(x.reshape(2, 30, 20)), rtol=0)
    with pytest.raises(ValueError, match="one of bulk, tail, mean"):
        ess(x, "median")
