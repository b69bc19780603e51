"""The shared verdict function on constructed data: helps, hurts, equivalent, both fail, inconclusive; Holm's
correction, its compatible simultaneous intervals and the equivalence family, with their error rates by simulation."""

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
    # compatible intervals: a rejected comparison's ends at 0 on the side of 0, the others hold 0 inside
    assert helps.high == 0 and helps.low < 0 and hurts.low == 0 and hurts.high > 0
    assert inconclusive.low < 0 < inconclusive.high
    assert equivalent.p_equivalence < 0.05 < inconclusive.p_equivalence
    assert tally([helps, hurts, equivalent, inconclusive]) == (
        "1 helps, 1 hurts, 1 equivalent, 0 both fail, 1 inconclusive")


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
    # nothing rejected: every interval is the two-sided t-interval at alpha / K (Bonferroni's width)
    d = lone.method - lone.baseline
    half = stats.t.ppf(1 - 0.05 / 20, 7) * np.std(d, ddof=1) / math.sqrt(8)
    assert (family[0].low, family[0].high) == pytest.approx((d.mean() - half, d.mean() + half))
    assert family[0].confidence == 0.95


def test_holm_step_down_intervals_match_its_rejections():
    # strong effects are rejected step by step; an interval ends at 0 exactly where its comparison is rejected
    pairs = [_pair(s, 0.2) for s in (-0.6, 0.5, -0.3, 0.15, 0.05, 0.0)]
    verdicts = compare_paired(pairs)
    for v in verdicts:
        rejected = v.verdict in ("helps", "hurts")
        assert rejected == (v.p_holm < 0.05)
        assert rejected == (v.low == 0 or v.high == 0)
        assert rejected or v.low < 0 < v.high
    assert [v.verdict for v in verdicts][:3] == ["helps", "hurts", "helps"]
    # the kept comparisons' bounds are taken at alpha / |A|: wider than a lone t-interval, narrower than Bonferroni
    kept = verdicts[-1]
    bonferroni = compare_paired(pairs, intervals="bonferroni")[-1]
    alone = compare_paired([pairs[-1]])[0]
    assert alone.high - alone.low < kept.high - kept.low < bonferroni.high - bonferroni.low
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
    assert helps.high == 0 and helps.p_holm < 0.05 and equivalent.p_equivalence < 0.05
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
    assert smaller.high == 0 and level.low < 0 < level.high and math.isnan(untested.p_value)
    assert smaller.difference == pytest.approx(math.log(1 / 16))
    # the function's p is the two-sided F-test's: under equal variances it rejects 5 % of the time, at the
    # detectable ratio (found at the kept hypotheses' two-sided level 2 alpha / |A|: one of the four one-sided
    # hypotheses of the two tested comparisons rejected, so |A| = 3) 80 %
    rng = np.random.default_rng(5)
    for log_ratio, expected, at in ((0.0, 0.05, 0.05), (-level.detectable, 0.8, 2 * 0.05 / 3)):
        a = rng.normal(0.0, math.exp(log_ratio / 2), size=(4000, 10)).std(axis=1, ddof=1)
        b = rng.normal(0.0, 1.0, size=(4000, 10)).std(axis=1, ddof=1)
        p = 2 * np.minimum(stats.f.cdf((a / b) ** 2, 9, 9), stats.f.sf((a / b) ** 2, 9, 9))
        assert np.mean(p < at) == pytest.approx(expected, abs=0.03)
        (first,) = compare_variances([VarianceRatio(a[0], 10, b[0], 10)])
        assert first.p_value == pytest.approx(p[0])


def test_a_mean_difference_that_cancels_is_shown_as_zero_beside_its_interval():
    # differences that cancel: their mean is 0, but float arithmetic leaves 7.4e-17
    values = np.array([2.1, 1.7, 2.2])
    [verdict] = compare_paired([Paired(values, np.full(3, values.mean()))])
    assert verdict.difference != 0 and abs(verdict.difference) < 1e-15
    assert verdict.describe().startswith("+0 [")
    [clear] = compare_paired([Paired([1.1, 1.2, 1.15], [1.0, 1.0, 1.0])])
    assert clear.describe().startswith("+0.15 (0, +0.234]")  # rejected: open at 0


# the family's error rates by simulation: intervals, equivalence, the old rule as the control that fails


def _simulated_families(effects: np.ndarray, n: int, repeats: int, seed: int):
    """``repeats`` families of paired comparisons with true differences ``effects`` (unit-sd differences on ``n``
    seeds): per family, the estimates and what :func:`csg.evaluation.multiplicity.decide` makes of them."""
    from csg.evaluation.multiplicity import Estimate, decide

    rng = np.random.default_rng(seed)
    for _ in range(repeats):
        d = rng.normal(effects[:, None], 1.0, size=(len(effects), n))
        estimates = [Estimate(float(x.mean()), float(x.std(ddof=1) / math.sqrt(n)), df=n - 1) for x in d]
        yield estimates, decide(estimates, [math.nan] * len(effects), 0.05, "holm")


@pytest.mark.parametrize("effects", [np.linspace(1.0, 3.0, 10), np.zeros(10), np.r_[np.zeros(5), np.full(5, 2.5)]],
                         ids=["all real", "all null", "half real"])
def test_holm_compatible_intervals_cover_every_difference_together_at_95_percent(effects):
    # 2000 families of K = 10 comparisons on 5 seeds: all 10 intervals cover their truth together in at least
    # 95 % of them (minus 3 Monte Carlo s.e.), and no family claims a wrong direction more than 5 % of the time
    repeats, covered, wrong = 2000, 0, 0
    for _, decision in _simulated_families(effects, 5, repeats, seed=11):
        covered += all(low <= e <= high for low, high, e in zip(decision.low, decision.high, effects))
        wrong += any((a and e <= 0) or (b and e >= 0) for a, b, e in
                     zip(decision.rejected_above, decision.rejected_below, effects))
    floor = 0.95 - 3 * math.sqrt(0.05 * 0.95 / repeats)
    assert covered / repeats >= floor
    assert wrong / repeats <= 1 - floor


def test_the_old_step_down_level_intervals_miss_the_joint_coverage_the_new_ones_keep():
    # the rule csg used before: each comparison's t-interval at its own step-down level alpha / (K - i). With all
    # ten effects large (all rejected, 20 seeds) its joint coverage is about 0.88 (Bonferroni's bound on it:
    # 1 - alpha (1 + 1/2 + ... + 1/10) = 0.85); the compatible intervals on the same data keep 95 %
    from scipy import special

    effects, repeats, old, new = np.linspace(2.0, 4.0, 10), 2000, 0, 0
    for estimates, decision in _simulated_families(effects, 20, repeats, seed=12):
        p = [2 * special.stdtr(19, -abs(e.value) / e.se) for e in estimates]
        levels, stopped = [0.0] * 10, None
        for rank, k in enumerate(sorted(range(10), key=lambda i: p[i])):
            if stopped is None and p[k] >= 0.05 / (10 - rank):
                stopped = 0.05 / (10 - rank)
            levels[k] = stopped if stopped is not None else 0.05 / (10 - rank)
        halves = [special.stdtrit(19, 1 - level / 2) * e.se for e, level in zip(estimates, levels)]
        old += all(abs(e.value - t) <= h for e, h, t in zip(estimates, halves, effects))
        new += all(low <= t <= high for low, high, t in zip(decision.low, decision.high, effects))
    assert old / repeats < 0.92 and new / repeats >= 0.94


def test_equivalence_at_the_margin_is_claimed_at_most_alpha_of_the_time_in_a_family_of_twenty():
    # twenty comparisons whose true difference sits exactly at the margin (0.5 sd of a seed's difference, 10 seeds):
    # a family may call any of them equivalent in at most 5 % of repeats; the same comparisons with no true
    # difference and a wide margin are found equivalent (the test has power)
    from csg.evaluation.multiplicity import Estimate, decide

    rng, repeats, false, found = np.random.default_rng(13), 2000, 0, 0
    for _ in range(repeats):
        at_margin = rng.normal(0.5, 1.0, size=(20, 10))
        estimates = [Estimate(float(x.mean()), float(x.std(ddof=1) / math.sqrt(10)), df=9) for x in at_margin]
        false += any(decide(estimates, [0.5] * 20, 0.05, "holm").equivalent)
    assert false / repeats <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / repeats)
    for _ in range(200):
        null = rng.normal(0.0, 1.0, size=(20, 10))
        estimates = [Estimate(float(x.mean()), float(x.std(ddof=1) / math.sqrt(10)), df=9) for x in null]
        found += sum(decide(estimates, [2.5] * 20, 0.05, "holm").equivalent)
    assert found / (200 * 20) > 0.9


def test_both_fail_replaces_equivalent_and_inconclusive_never_a_found_difference():
    # the bar 0.5: the baseline's mean is about 1, so it fails it; the method meets it only where it is lower
    cases = [_pair(0.001, 0.005, margin=0.05),  # equivalent by the tests, both miss the bar: both fail
             _pair(0.1, 0.5),                   # inconclusive; too noisy for its bound to clear the bar
             _pair(-0.3, 0.05),                 # helps by the tests, both still miss: helps stands
             _pair(+0.5, 0.05),                 # hurts, both miss: hurts stands
             _pair(-0.8, 0.05)]                 # the method meets the bar: the tests decide
    plain = compare_paired(cases)
    barred = compare_paired([Paired(p.method, p.baseline, p.margin, p.lower_is_better, bar=0.5) for p in cases])
    assert [v.verdict for v in plain] == ["equivalent", "inconclusive", "helps", "hurts", "helps"]
    assert [v.tested for v in barred] == [v.verdict for v in plain]
    assert [v.verdict for v in barred] == ["both fail", "inconclusive", "helps", "hurts", "helps"]
    assert [(v.method_meets, v.baseline_meets) for v in barred] == [
        (False, False), (None, False), (False, False), (False, False), (True, False)]
    assert plain[0].method_meets is None  # no bar stated
    # for a higher-is-better metric the bar is a floor
    (higher,) = compare_paired([Paired(BASE, BASE + 0.001 + 0.005 * NOISE, margin=0.05, lower_is_better=False,
                                       bar=2.0)])
    assert higher.tested == "equivalent" and higher.verdict == "both fail"
    assert tally([higher]) == "0 helps, 0 hurts, 0 equivalent, 1 both fail, 0 inconclusive"


def test_bonferroni_intervals_are_t_intervals_at_alpha_over_k_and_decide_alone():
    pairs = [_pair(-0.6, 0.2), _pair(0.0, 0.3), _pair(0.2, 0.3)]
    verdicts = compare_paired(pairs, intervals="bonferroni")
    for pair, v in zip(pairs, verdicts):
        d = pair.method - pair.baseline
        expected = stats.ttest_1samp(d, 0.0).confidence_interval(1 - 0.05 / 3)
        assert (v.low, v.high) == pytest.approx((expected.low, expected.high))
        assert (v.verdict in ("helps", "hurts")) == (v.low > 0 or v.high < 0)
    with pytest.raises(ValueError, match="intervals must be one of holm, bonferroni"):
        compare_paired(pairs, intervals="scheffe")


def test_the_method_statement_names_the_intervals_the_margin_and_the_bar():
    from csg.evaluation.comparison import method_statement

    holm = method_statement(margin="0.02 of mass", bar="mode error <= 0.1")
    assert "Strassburger and Bretz" in holm and "0.02 of mass" in holm and "mode error <= 0.1" in holm
    assert "two one-sided tests" in holm and "both fail" in holm
    plain = method_statement(intervals="bonferroni")
    assert "Bonferroni" in plain and "nothing is called equivalent" in plain and "no competence bar" in plain


def test_a_mean_just_past_the_bar_is_no_failure_until_its_bound_clears_it():
    # means 0.1005 and 0.1014 against a bar of 0.1 (the referee's cases): above it, but within their noise
    rng = np.random.default_rng(21)
    near = 0.1005 + 0.02 * rng.standard_normal(50)
    near = near - near.mean() + 0.1005
    other = 0.1014 + 0.02 * rng.standard_normal(50)
    other = other - other.mean() + 0.1014
    (v,) = compare_paired([Paired(near, other, margin=0.02, bar=0.1)])
    assert v.method_meets is None and v.baseline_meets is None and v.verdict != "both fail"
    # far past the bar with the same spread: its one-sided bound (Bonferroni over the 2 methods) clears it
    (far,) = compare_paired([Paired(near + 0.1, other + 0.1, margin=0.02, bar=0.1)])
    assert far.method_meets is False and far.baseline_meets is False and far.verdict == "both fail"
    from scipy import special

    bound = near.mean() + 0.1 - special.stdtrit(49, 1 - 0.05 / 2) * near.std(ddof=1) / math.sqrt(50)
    assert bound > 0.1  # what 'fails' means, computed by hand


def test_interval_text_opens_the_bound_at_zero_also_where_the_bounds_are_shown_transformed():
    from csg.evaluation.comparison import interval_text

    assert interval_text(-0.5, 0.0, "+.2f") == "[-0.50, 0)"
    assert interval_text(0.0, 1.0, ".3g", math.exp) == "(1, 2.72]"  # a log ratio's interval, shown as a ratio
    assert interval_text(-1.0, 1.0, ".3g", math.exp) == "[0.368, 2.72]" and interval_text(math.nan, 1.0) == "-"
