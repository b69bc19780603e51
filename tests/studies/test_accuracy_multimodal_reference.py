"""The network reference's Monte Carlo errors and its check of another kind, on cases with known answers."""

import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import norm
from scipy.stats import t as student

from studies.accuracy.multimodal import reference, study
from studies.accuracy.multimodal.importance import StudentMixture, batch_errors, self_normalised
from studies.accuracy.multimodal.smc import tempered_smc

WEIGHT, LEFT, RIGHT = 0.7, (-2.0, 0.3), (2.0, 0.5)   # 0.7 N(-2, 0.3^2) + 0.3 N(2, 0.5^2): ~20 nats between them


def _bimodal(x):
    x = x[:, 0]
    left = math.log(WEIGHT) - 0.5 * ((x - LEFT[0]) / LEFT[1]) ** 2 - math.log(LEFT[1])
    right = math.log(1 - WEIGHT) - 0.5 * ((x - RIGHT[0]) / RIGHT[1]) ** 2 - math.log(RIGHT[1])
    return -torch.logsumexp(torch.stack([left, right]), 0)     # its integral of e^-U: sqrt(2 pi)


def test_batch_errors_cover_a_known_share_where_the_weights_have_infinite_variance():
    """p = N(0, 1) from q = N(0, 0.4): the weights' tail has k = 1 - 0.4 = 0.6 (> 0.5, infinite variance)."""
    rng, sd, batches = np.random.default_rng(0), math.sqrt(0.4), 10
    x = rng.normal(0, sd, (200, 4000))
    log_w, marks = -0.5 * x**2 - norm.logpdf(x, 0, sd), (x > 1).astype(float)[..., None]
    truth, quantile = norm.sf(1.0), student.ppf(0.975, batches - 1)
    covered = []
    for lw, f in zip(log_w, marks):
        value, _ = self_normalised(lw, f)
        each, se = batch_errors(lw, f, batches)
        assert each.shape == (batches, 1) and se[0] > 0
        covered.append(abs(value[0] - truth) < quantile * se[0])
    assert np.mean(covered) >= 0.85, np.mean(covered)
    with pytest.raises(ValueError, match="batches"):
        batch_errors(log_w[0], marks[0], 1)


def test_tempered_smc_recovers_the_weights_of_a_bimodal_target_that_no_random_walk_crosses():
    runs = [tempered_smc(_bimodal, [3.0], 1000, 5, 4, seed=s) for s in range(4)]
    left = np.array([(r["particles"][:, 0] < 0).double().mean().item() for r in runs])
    assert abs(left.mean() - WEIGHT) < max(0.03, 4 * left.std(ddof=1) / 2), left
    assert all(abs(r["log_evidence"] - 0.5 * math.log(2 * math.pi)) < 0.15 for r in runs)
    assert all(r["betas"][0] == 0 and r["betas"][-1] == 1 and np.all(np.diff(r["betas"]) > 0) for r in runs)


def test_jumps_that_miss_a_mode_do_not_take_its_weight():
    """Independence jumps onto the left mode only: the right one keeps its 0.3, held by particles from the prior."""
    blind = StudentMixture(torch.tensor([[LEFT[0]]], dtype=torch.float64), torch.tensor([[[LEFT[1]]]], dtype=torch.float64),
                           torch.ones(1, dtype=torch.float64), 3)
    runs = [tempered_smc(_bimodal, [3.0], 1000, 5, 4, seed=10 + s, jump=blind, jumps=3) for s in range(4)]
    right = np.array([(r["particles"][:, 0] > 0).double().mean().item() for r in runs])
    assert abs(right.mean() - (1 - WEIGHT)) < 0.03, right
    assert all(0 < r["jump_acceptance"] < 1 for r in runs)


def _facts(check_weights, check_se=0.003):
    chosen = {"weights": [0.31, 0.47, 0.22], "weights_se": [0.002] * 3, "khat": 0.6}
    shares = {"tempering": chosen, "laplace": {**chosen, "khat": 0.8}, "reference": "tempering", "difference": 0.005,
              "se_max": 0.003, "khat_max": 0.8}
    return shares, {"weights": check_weights, "weights_se": [check_se] * 3}


def test_the_reference_is_refused_where_the_check_disagrees_or_is_too_noisy():
    assert reference.accepted(*_facts([0.30, 0.48, 0.22]))
    assert not reference.accepted(*_facts([0.28, 0.50, 0.22]))                  # 0.03 apart on two modes
    assert not reference.accepted(*_facts([0.30, 0.48, 0.22], check_se=0.02))  # agreeing, but it could not tell
    shares, check = _facts([0.28, 0.50, 0.22])
    versus = reference.compare(shares["tempering"], check)
    assert versus["difference"] == pytest.approx(0.03) and versus["z"][0] == pytest.approx(-0.03 / math.hypot(0.002, 0.003))


def test_the_committed_reference_carries_its_check_and_says_what_it_did():
    facts = json.loads(study.NETWORK_REFERENCE.read_text())
    check, shares = facts["smc"], facts["importance"]
    assert facts["accepted"] == reference.accepted(shares, check) and facts["accepted"]
    assert check["difference"] <= reference.AGREEMENT and max(check["weights_se"]) <= reference.CHECK_SE_MAX
    assert facts["weights_se"] == shares[shares["reference"]]["weights_se"]
    lines = " ".join(reference.report_lines(facts))
    assert "independent proposal" not in lines and "built independently" not in lines
    assert "of one family" in lines and "tempered sequential Monte Carlo" in lines
    refused = " ".join(reference.report_lines({**facts, "accepted": False, "smc": {**check, "difference": 0.05}}))
    assert "the check differs from the reference by 0.050" in refused and "no reference is accepted" in refused
