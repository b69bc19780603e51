"""FunctionDraws.to_inference_data on the ArviZ that is installed: 0.x gives an ``InferenceData``, 1.x an
``xarray.DataTree``; the same groups, dimensions, values and attributes either way, and ``az.loo(data, reff=1.0)``
(what docs/posterior.md says to do with it) runs on it and agrees with PSIS-LOO written out by hand where the
importance weights need no smoothing."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from csg.posterior.draws import FunctionDraws, arviz_major


def _draws(chains: int = 2, per_chain: int = 40, examples: int = 6, classes: int = 3, seed: int = 0) -> FunctionDraws:
    generator = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(chains * per_chain, examples, classes, generator=generator) * 0.3, dim=-1)
    targets = torch.randint(0, classes, (examples,), generator=generator)
    log_likelihood = probs.gather(2, targets.expand(chains * per_chain, examples)[..., None]).squeeze(2).double().log()
    order = [c for c in range(chains) for _ in range(per_chain)]
    return FunctionDraws(log_likelihood=log_likelihood, predicted=probs.argmax(-1), targets=targets,
                         chains=[3 * c for c in order], weights=[1.0 / len(order)] * len(order),
                         names=[f"m{i}" for i in range(len(order))], probs=probs)


def test_the_groups_dimensions_and_attributes_on_either_arviz_major():
    draws = _draws()
    data = draws.to_inference_data({"run": "toy"})
    log_likelihood = data.log_likelihood["y"]
    assert log_likelihood.dims == ("chain", "draw", "example") and log_likelihood.shape == (2, 40, 6)
    assert log_likelihood.chain.values.tolist() == [0, 3]
    np.testing.assert_array_equal(log_likelihood.sel(chain=3).values, draws.log_likelihood[40:].numpy())
    assert data.posterior_predictive["probs"].dims == ("chain", "draw", "example", "class")
    np.testing.assert_array_equal(data.observed_data["y"].values, draws.targets.numpy())
    assert data.sample_stats["weight"].shape == (2, 40)
    assert (data.attrs["run"], data.attrs["members"], data.attrs["draws_left_out"]) == ("toy", 80, 0)
    uneven = FunctionDraws(**{**vars(draws), "chains": [0] * 50 + [3] * 30})  # chains cut to the shortest
    cut = uneven.to_inference_data()
    assert cut.log_likelihood["y"].shape == (2, 30, 6) and cut.attrs["draws_left_out"] == 20


def test_loo_on_it_is_psis_loo_of_the_draws():
    """With log-likelihoods this flat, the raw importance ratios 1 / p_s are tame (Pareto k well below 0.5) and
    PSIS-LOO's elpd is close to the plain importance-sampling one: sum_j -log mean_s exp(-log p_sj)."""
    import arviz as az

    draws = _draws()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(draws.to_inference_data(), reff=1.0)
    elpd = float(loo["elpd_loo"] if arviz_major() < 1 else loo.elpd)
    ll = draws.log_likelihood.numpy()
    by_hand = float(-np.log(np.exp(-ll).mean(axis=0)).sum())
    assert elpd == pytest.approx(by_hand, abs=0.05)


def test_arviz_1s_loo_needs_25_members_as_the_docs_say():
    """docs/posterior.md: ArviZ 1.x's loo fits a Pareto tail of a fifth of the draws, at least 5."""
    import arviz as az

    if arviz_major() < 1:
        pytest.skip(f"ArviZ {az.__version__}: 0.x has no such minimum (make test runs this on Python 3.13's 1.x)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        az.loo(_draws(chains=1, per_chain=25).to_inference_data(), reff=1.0)
        with pytest.raises(ValueError, match="at least 5"):
            az.loo(_draws(chains=1, per_chain=24).to_inference_data(), reff=1.0)
