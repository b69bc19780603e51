"""The shared verdict function on constructed data: helps, hurts, equivalent, inconclusive, Holm's correction."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from csg.evaluation.comparison import Paired, compare_paired, detectable_difference, tally, verdict_frame

RNG = np.random.default_rng(0)
BASE = RNG.normal(1.0, 0.3, size=8)          # the baseline's metric on 8 seeds
NOISE = RNG.normal(0.0, 1.0, size=8)
NOISE = (NOISE - NOISE.mean()) / NOISE.std(ddof=1)   # mean 0, sd 1: a pair's mean difference is its shift


def _pair(shift: float, spread: float, margin: float = math.nan, lower_is_better: bool = True) -> Paired:
    return Paired(BASE + shift + spread * NOISE, BASE, margin=margin, lower_is_better=lower_is_better)


def test_the_four_verdicts_on_constructed_data():
    helps, hurts, equivalent, inconclusive = compare_paired([
        _pair(-0.5, 0.05),                     # clearly lower: helps
        _pair(+0.5, 0.05),                     # clearly higher: hurts
        _pair(0.001, 0.005, margin=0.05),     # tiny and tight, inside the margin
        _pair(0.1, 0.5, margin=0.05),          # noisy: neither
    ])
    assert (helps.verdict, hurts.verdict, equivalent.verdict, inconclusive.verdict) == (
        "helps", "hurts", "equivalent", "inconclusive")
    assert helps.high < 0 < hurts.low
    assert -0.05 < equivalent.low <= equivalent.high < 0.05
    assert inconclusive.low < 0 < inconclusive.high
    assert tally([helps, hurts, equivalent, inconclusive]) == "1 helps, 1 hurts, 1 equivalent, 1 inconclusive"


def test_higher_is_better_turns_the_verdict():
    (verdict,) = compare_paired([_pair(+0.5, 0.05, lower_is_better=False)])
    assert verdict.verdict == "helps"


def test_without_a_margin_nothing_is_equivalent():
    (verdict,) = compare_paired([_pair(0.001, 0.005)])
    assert verdict.verdict == "inconclusive"


def test_one_seed_gives_no_interval_and_no_verdict():
    (verdict,) = compare_paired([Paired([0.1], [0.9], margin=1.0)])
    assert verdict.n == 1 and math.isnan(verdict.low) and verdict.verdict == "inconclusive"
    assert "no interval" in verdict.describe()


def test_the_interval_is_scipys_t_interval_for_a_single_comparison():
    d = BASE + 0.2 + 0.3 * NOISE - BASE
    (verdict,) = compare_paired([_pair(0.2, 0.3)])
    expected = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert (verdict.low, verdict.high) == pytest.approx((expected.low, expected.high))
    assert verdict.p_value == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue)


def test_holm_keeps_a_lone_significant_difference_from_passing_in_a_large_family():
    # p of about 0.02 alone: significant; among 10 comparisons the others null, Holm needs p < 0.005
    # t = 2.8 on 7 degrees of freedom: p = 0.027
    shift = 2.8 * 0.3 / math.sqrt(8)
    lone = _pair(shift, 0.3)
    (alone,) = compare_paired([lone])
    assert 0.005 < alone.p_value < 0.05 and alone.verdict == "hurts"
    family = compare_paired([lone] + [_pair(0.0, 0.3)] * 9)
    assert family[0].verdict == "inconclusive" and family[0].low < 0
    assert family[0].p_holm == pytest.approx(min(1.0, 10 * alone.p_value))
    assert family[0].confidence > 0.995 - 1e-12


def test_holm_step_down_intervals_match_its_rejections():
    # strong effects are rejected step by step at alpha / K, alpha / (K - 1), ...; every interval excludes 0
    # exactly where the adjusted p-value is below alpha
    pairs = [_pair(s, 0.2) for s in (-0.6, 0.5, -0.3, 0.15, 0.05, 0.0)]
    verdicts = compare_paired(pairs)
    for v in verdicts:
        assert (v.low > 0 or v.high < 0) == (v.p_holm < 0.05)
    assert sorted(v.confidence for v in verdicts)[0] >= 1 - 0.05 / 2  # the weakest kept at most alpha / 2
    frame = verdict_frame(verdicts)
    assert list(frame.verdict) == [v.verdict for v in verdicts] and len(frame) == 6


def test_detectable_difference_has_the_stated_power_by_simulation():
    n, sd, alpha = 5, 1.0, 0.05
    delta = detectable_difference(sd, n, alpha, power=0.8)
    # normal approximation's lower bound: (z_{0.975} + z_{0.8}) sd / sqrt(n) = 1.25 at n = 5; t's is larger
    assert delta > (1.96 + 0.8416) * sd / math.sqrt(n)
    rng = np.random.default_rng(1)
    draws = rng.normal(delta, sd, size=(20000, n))
    p = stats.ttest_1samp(draws, 0.0, axis=1).pvalue
    assert np.mean(p < alpha) == pytest.approx(0.8, abs=0.015)


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="one length"):
        compare_paired([Paired([1.0, 2.0], [1.0])])


# the unpaired (Welch) and variance-ratio (F) variants: the same family rule and verdicts


def test_unpaired_is_scipys_welch_interval_for_a_single_comparison():
    from csg.evaluation.comparison import Unpaired, compare_unpaired

    rng = np.random.default_rng(2)
    method, baseline = rng.normal(0.0, 1.0, 20), rng.normal(0.5, 2.0, 15)  # unequal lengths and spreads
    (verdict,) = compare_unpaired([Unpaired(method, baseline)])
    welch = stats.ttest_ind(method, baseline, equal_var=False)
    expected = welch.confidence_interval(0.95)
    assert (verdict.low, verdict.high) == pytest.approx((expected.low, expected.high))
    assert verdict.p_value == pytest.approx(welch.pvalue) and verdict.n == 15


def test_unpaired_verdicts_on_constructed_data():
    from csg.evaluation.comparison import Unpaired, compare_unpaired

    rng = np.random.default_rng(3)
    base = rng.normal(1.0, 0.1, 20)
    helps, noisy, equivalent, single = compare_unpaired([
        Unpaired(rng.normal(0.5, 0.1, 20), base),                 # clearly lower: helps
        Unpaired(rng.normal(1.05, 1.0, 20), base, margin=0.05),   # noisy: neither
        Unpaired(base + 0.002 * NOISE.repeat(3)[:20], base, margin=0.1),  # the same but for tiny noise
        Unpaired([0.1], base, margin=1.0),                        # one repeat: no interval
    ])
    assert (helps.verdict, noisy.verdict, equivalent.verdict, single.verdict) == (
        "helps", "inconclusive", "equivalent", "inconclusive")
    assert helps.confidence == pytest.approx(1 - 0.05 / 3)  # the strongest of a family of 3 (one untested)
    assert math.isnan(single.low) and math.isnan(single.p_value)
    (higher,) = compare_unpaired([Unpaired(rng.normal(0.5, 0.1, 20), base, lower_is_better=False)])
    assert higher.verdict == "hurts"


def test_unpaired_detectable_difference_has_the_stated_power_by_simulation():
    from csg.evaluation.comparison import Unpaired, compare_unpaired

    rng = np.random.default_rng(4)
    method, baseline = rng.normal(0.0, 1.0, 8), rng.normal(0.0, 2.0, 12)
    (verdict,) = compare_unpaired([Unpaired(method, baseline)])
    # samples with the observed spreads and the detectable shift: Welch rejects about 80 % of the time
    sm, sb = np.std(method, ddof=1), np.std(baseline, ddof=1)
    draws_m = rng.normal(verdict.detectable, sm, size=(20000, 8))
    draws_b = rng.normal(0.0, sb, size=(20000, 12))
    p = stats.ttest_ind(draws_m, draws_b, axis=1, equal_var=False).pvalue
    assert np.mean(p < 0.05) == pytest.approx(0.8, abs=0.03)


def test_variance_ratio_verdicts_level_and_power():
    from csg.evaluation.comparison import VarianceRatio, compare_variances

    smaller, level, untested = compare_variances([
        VarianceRatio(1.0, 20, 4.0, 20),    # a variance 16 times smaller: helps
        VarianceRatio(1.0, 10, 1.2, 10),    # close: inconclusive
        VarianceRatio(0.0, 10, 1.0, 10),    # a zero spread: no test
    ])
    assert (smaller.verdict, level.verdict, untested.verdict) == ("helps", "inconclusive", "inconclusive")
    assert smaller.high < 0 < level.high and level.low < 0 and math.isnan(untested.p_value)
    assert smaller.difference == pytest.approx(math.log(1 / 16))
    # the function's p is the two-sided F-test's: under equal variances it rejects 5 % of the time, at the
    # detectable ratio (found at level 0.05, the second step of this family) 80 %
    assert level.confidence == pytest.approx(0.95)
    rng = np.random.default_rng(5)
    for log_ratio, expected in ((0.0, 0.05), (-level.detectable, 0.8)):
        a = rng.normal(0.0, math.exp(log_ratio / 2), size=(4000, 10)).std(axis=1, ddof=1)
        b = rng.normal(0.0, 1.0, size=(4000, 10)).std(axis=1, ddof=1)
        p = 2 * np.minimum(stats.f.cdf((a / b) ** 2, 9, 9), stats.f.sf((a / b) ** 2, 9, 9))
        assert np.mean(p < 0.05) == pytest.approx(expected, abs=0.03)
        (first,) = compare_variances([VarianceRatio(a[0], 10, b[0], 10)])
        assert first.p_value == pytest.approx(p[0])


def test_a_mean_difference_that_cancels_is_shown_as_zero_beside_its_interval():
    # differences that cancel: their mean is 0, but float arithmetic leaves 7.4e-17
    values = np.array([2.1, 1.7, 2.2])
    [verdict] = compare_paired([Paired(values, np.full(3, values.mean()))])
    assert verdict.difference != 0 and abs(verdict.difference) < 1e-15
    assert verdict.describe().startswith("+0 [")
    [clear] = compare_paired([Paired([1.1, 1.2, 1.15], [1.0, 1.0, 1.0])])
    assert clear.describe().startswith("+0.15 [")
