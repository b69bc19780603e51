"""How far apart are the members (csg.evaluation.spread)? Independent members read their number, groups of near
copies the number of groups, identical members 1; the line at the end of a run (csg.evaluation.sampling_check)
names near copies and a loss still falling."""

from __future__ import annotations

import pytest
import torch

from csg.evaluation.diversity import pairwise_total_variation
from csg.evaluation.sampling_check import falling_loss, sampling_check
from csg.evaluation.spread import MemberSpread, member_spread, spread_examples
from csg.evaluation.uncertainty import member_uncertainty


def _members(logits: torch.Tensor) -> torch.Tensor:
    return logits.softmax(-1)


def test_independent_members_read_their_number_and_near_copies_the_number_of_groups():
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(2000, 10, generator=generator)
    independent = _members(base + torch.randn(12, 2000, 10, generator=generator))
    spread = member_spread(independent)
    assert spread.effective_members == pytest.approx(12, rel=0.05)
    centres = base + torch.randn(4, 2000, 10, generator=generator)  # 4 cycles, 3 near copies of each
    copies = _members(centres.repeat_interleave(3, 0) + 0.01 * torch.randn(12, 2000, 10, generator=generator))
    near = member_spread(copies)
    assert near.effective_members == pytest.approx(4, rel=0.05)
    assert member_spread(_members(base.expand(5, -1, -1))).effective_members == 1.0
    # the sizes: mutual information as csg.evaluation.uncertainty computes it, TVs as diversity's matrix
    assert spread.mutual_information == pytest.approx(float(member_uncertainty(independent).mutual_information.mean()))
    distances = pairwise_total_variation(copies)
    assert near.member_tv == pytest.approx(float(distances.sum() / (12 * 11)), rel=1e-9)
    assert near.tv_to_average < spread.tv_to_average


def test_weights_count_and_bad_input_is_refused():
    generator = torch.Generator().manual_seed(1)
    probs = _members(torch.randn(6, 500, 3, generator=generator) * 3)
    one_heavy = member_spread(probs, [0.95, 0.01, 0.01, 0.01, 0.01, 0.01])
    assert one_heavy.effective_members < member_spread(probs).effective_members
    assert MemberSpread.from_dict(one_heavy.to_dict()) == one_heavy
    with pytest.raises(ValueError, match="member_probs: a \\(members, examples, classes\\) tensor"):
        member_spread(probs[0])
    with pytest.raises(ValueError, match="member_probs: finite"):
        member_spread(torch.full((2, 3, 4), float("nan")))
    with pytest.raises(ValueError, match="weights: 6 non-negative numbers"):
        member_spread(probs, [1.0])
    assert spread_examples(10) == 20_000 and spread_examples(100) == 2_000 and spread_examples(10_000) == 200


def test_the_end_of_run_line_names_near_copies_and_an_undertrained_network_and_is_silent_otherwise():
    fine = {"members": 12, "effective_members": 11.0}
    near = {"members": 12, "effective_members": 4.6}
    warm = {"target": 1.0, "configurational": 0.9, "kinetic": 1.1, "relaxation": 3.0}
    assert sampling_check(warm, fine) is None
    line = sampling_check(warm, near)
    assert line == ("does the chain sample? not as run: the 12 members are worth 4.6: near copies (fewer samples "
                    "per cycle, sampler.samples_per_cycle, or more cycles: sampler.cycles)")
    hot = sampling_check({**warm, "kinetic": 5.0}, fine)
    assert "kinetic temperature 5 against T = 1" in hot and "data.batch_size" in hot
    assert sampling_check({**warm, "kinetic": 5.0, "configurational": 0.01}, fine, judge_temperatures=False) is None
    # the loss at the end of each cycle's exploration: still falling by 20 % and 0.005 nats
    cycles = [{"cycle": c, "stage": stage, "train_loss": loss} for c, loss in enumerate([0.5, 0.3, 0.2, 0.1])
              for stage in ["exploration"] * 4 + ["sampling"]]
    assert falling_loss(cycles) == (0.2, 0.1)
    assert "the training loss is still falling (0.2 -> 0.1)" in sampling_check(warm, fine, epochs=cycles)
    slow = [dict(row, train_loss=[0.52, 0.21, 0.144, 0.119][row["cycle"]]) for row in cycles]  # 17 % a cycle, twice
    assert falling_loss(slow) == (0.21, 0.119)
    wobbly = [dict(row, train_loss=[0.52, 0.15, 0.144, 0.119][row["cycle"]]) for row in cycles]  # 4 % then 17 %
    assert falling_loss(wobbly) is None
    flat = [dict(row, train_loss=0.001 * (1 + row["cycle"] % 2)) for row in cycles]
    assert falling_loss(flat) is None  # 0.002 -> 0.001 is below 0.005 nats
    steady = [{"train_loss": 1.0 - epoch / 50} for epoch in range(40)]  # no cycles: the last tenth against the one before
    assert falling_loss(steady) == pytest.approx((0.33, 0.25)) and falling_loss(steady[:5]) is None
    assert falling_loss([{"train_loss": 1.0 / (1 + epoch)} for epoch in range(40)]) is None  # 0.029 -> 0.026


def test_a_regression_ensemble_spoiled_by_one_member_is_said_at_the_end_of_the_run():
    """issue 74: a run ended at RMSE 1e9 and test LL -inf without a word."""
    from csg.evaluation.sampling_check import OUTLIER, sampling_check

    members = [{"file": f"sample_{i}.pt", "rmse": r} for i, r in enumerate([2.3, 2.6, 4.1, 33170.0])]
    line = sampling_check(None, None, regression={"ensemble": {"rmse": 8307.7, "log_likelihood": -1e6},
                                                  "per_sample": members})
    assert line.startswith("does the chain sample? not as run: the ensemble's RMSE 8308 is 3.61e+03 x its best "
                           "member's (2.3;") and "sample_3.pt, RMSE 3.317e+04" in line
    infinite = sampling_check(None, None, regression={"ensemble": {"rmse": 2.4, "log_likelihood": float("-inf")},
                                                      "per_sample": members})
    assert "test log-likelihood -inf" in infinite
    sane = {"ensemble": {"rmse": OUTLIER * 2.3 - 0.01, "log_likelihood": -2.1}, "per_sample": members}
    assert sampling_check(None, None, regression=sane) is None
