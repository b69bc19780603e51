"""Uncertainty of members, the diagnostics across chains on constructed chains, distances of tensors and arrays."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from csg.evaluation import posterior_distance as distance
from csg.evaluation.diagnostics import AGREE_RHAT, ChainDiagnostics, chain_diagnostics, exchangeable_rhat
from csg.evaluation.uncertainty import member_uncertainty

# three members, two inputs, three classes
MEMBERS = torch.tensor([[[0.7, 0.2, 0.1], [0.3, 0.3, 0.4]],
                        [[0.6, 0.3, 0.1], [0.1, 0.8, 0.1]],
                        [[0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]])


def _entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p.double() * p.double().log()).sum(-1)


@pytest.mark.parametrize("weights", [None, [0.5, 0.3, 0.2]])
def test_uncertainty_matches_its_equations(weights):
    w = torch.tensor(weights or [1 / 3] * 3, dtype=torch.float64)
    u = member_uncertainty(MEMBERS, weights)
    average = (w[:, None, None] * MEMBERS.double()).sum(0)
    expected = (w[:, None] * _entropy(MEMBERS)).sum(0)
    assert torch.allclose(u.predictive_entropy, _entropy(average))
    assert torch.allclose(u.expected_entropy, expected)
    assert torch.allclose(u.mutual_information, _entropy(average) - expected)
    assert bool((u.mutual_information > 0).all())  # members that differ: epistemic uncertainty
    # disagreement: two distinct members drawn by weight predict different classes, by brute force
    predicted = MEMBERS.argmax(-1)
    for example in range(2):
        pairs = [(i, j) for i, j in itertools.permutations(range(3), 2)]
        differ = sum(w[i] * w[j] for i, j in pairs if predicted[i, example] != predicted[j, example])
        assert float(u.disagreement[example]) == pytest.approx(float(differ / sum(w[i] * w[j] for i, j in pairs)))
    assert u.mean()["mutual_information"] == pytest.approx(float(u.mutual_information.mean()))


def test_disagreement_with_equal_weights_is_torch_uncertaintys_and_agreeing_members_have_none():
    predicted_classes = [0, 0, 1, 2, 2, 2]  # n_c = 2, 1, 3 of M = 6
    members = torch.nn.functional.one_hot(torch.tensor(predicted_classes), 3).float()[:, None, :] * 0.9 + 0.1 / 3
    counts, m = [2, 1, 3], 6
    assert float(member_uncertainty(members).disagreement[0]) == pytest.approx(
        1 - sum(n * (n - 1) for n in counts) / (m * (m - 1)))
    same = MEMBERS[:1].expand(4, -1, -1)
    u = member_uncertainty(same)
    assert torch.allclose(u.mutual_information, torch.zeros(2, dtype=torch.float64), atol=1e-12)
    assert torch.equal(u.disagreement, torch.zeros(2, dtype=torch.float64))
    assert torch.equal(member_uncertainty(MEMBERS[:1]).disagreement, torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="weights"):
        member_uncertainty(MEMBERS, [1.0, 2.0])


# ---------------------------------------------------------------------------------------- diagnostics
def _chains(chains: int, draws: int, shift: float, examples: int = 200, seed: int = 0):
    """(members, examples) log-likelihood-like draws, chain k's shifted by k * shift, and each member's chain."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((chains, draws, examples)) - 1.0 + shift * np.arange(chains)[:, None, None]
    return values.reshape(chains * draws, examples), np.repeat(np.arange(chains), draws).tolist()


def test_chains_that_agree_read_agree_and_chains_that_do_not_read_disagree():
    values, chains = _chains(4, 100, shift=0.0)
    agree = chain_diagnostics(torch.from_numpy(values), chains, predicted=torch.from_numpy(values > -1.0).long())
    assert agree.verdict == "agree" and agree.rhat_median <= AGREE_RHAT and agree.reading.startswith("chains agree")
    assert agree.draws_per_chain == [100] * 4 and agree.examples == 200 and agree.ess_bulk_median > 200
    assert all(abs(a) < 0.2 for a in agree.lag1_autocorrelation)  # independent draws
    assert all(0.3 < g < 0.7 for g in agree.consecutive_agreement)  # a fair coin from draw to draw
    values, chains = _chains(4, 100, shift=1.0)
    disagree = chain_diagnostics(values, chains)
    assert disagree.verdict == "disagree" and disagree.rhat_median > disagree.rhat_reference
    assert disagree.reading.startswith("chains disagree") and "\n" not in disagree.reading
    # a few draws per chain: agreeing chains are not called disagreeing, nor shown to agree; a gross gap shows
    few, chains = _chains(2, 6, shift=0.0)
    assert chain_diagnostics(few, chains).verdict == "no disagreement found"
    far, chains = _chains(2, 6, shift=5.0)
    assert chain_diagnostics(far, chains).verdict == "disagree"
    assert exchangeable_rhat(2, 6) > exchangeable_rhat(4, 100) > 1.0


def test_chains_wander_within_chain_is_autocorrelated():
    rng = np.random.default_rng(1)
    walk = np.cumsum(rng.standard_normal((2, 50, 100)), axis=1)  # random walks: no chain has mixed
    result = chain_diagnostics(walk.reshape(100, 100), np.repeat([0, 1], 50).tolist())
    assert all(a > 0.7 for a in result.lag1_autocorrelation) and result.verdict == "disagree"
    assert result.ess_bulk_median < 20


def test_one_chain_too_few_draws_and_unequal_chains():
    values, chains = _chains(1, 10, shift=0.0)
    one = chain_diagnostics(values, chains)
    assert one.verdict == "one chain" and one.rhat_median is None and one.ess_bulk_median is not None
    values, chains = _chains(2, 3, shift=0.0)
    few = chain_diagnostics(values, chains)
    assert few.verdict == "too few draws" and "at least 4 draws per chain" in few.reading
    values, _ = _chains(1, 9, shift=0.0)
    unequal = chain_diagnostics(values, [0] * 5 + [1] * 4)  # cut to the shortest chain for R-hat
    assert unequal.draws_per_chain == [5, 4] and unequal.rhat_median is not None
    assert ChainDiagnostics.from_dict(unequal.to_dict()) == unequal and str(unequal) == unequal.reading
    with pytest.raises(ValueError, match="one chain label per member"):
        chain_diagnostics(values, [0, 1])


# ------------------------------------------------------------------------------ distances of tensors
def test_posterior_distances_take_tensors_and_arrays_alike():
    generator = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(20, 4, generator=generator), 1).requires_grad_()
    reference = torch.softmax(torch.randn(20, 4, generator=generator), 1)
    as_arrays = probs.detach().numpy(), reference.numpy()
    assert distance.predictive_agreement(probs, reference) == distance.predictive_agreement(*as_arrays)
    assert distance.predictive_total_variation(probs, reference) == pytest.approx(
        distance.predictive_total_variation(*as_arrays))
    assert distance.predictive_agreement(probs, reference.numpy()) == distance.predictive_agreement(*as_arrays)
    draws = torch.randn(50, 3, generator=generator, dtype=torch.float64)
    assert np.allclose(distance.sd_ratio(draws, torch.ones(3)), distance.sd_ratio(draws.numpy(), np.ones(3)))
    assert np.allclose(distance.standardised_mean_error(draws, torch.zeros(3), torch.ones(3)),
                       np.abs(draws.numpy().mean(0)))
    covariance = torch.eye(2, dtype=torch.float64)
    assert distance.gaussian_w2(torch.zeros(2), covariance, np.ones(2), np.eye(2)) == pytest.approx(math.sqrt(2))
    assert np.allclose(distance.two_class(torch.tensor([0.25])), [[0.75, 0.25]])
