r"""Verdicts on one method against another, paired by seed, corrected across a report's comparisons.

Every table of csg that says one method helps, hurts or matches another says it through
:func:`compare_paired`. A comparison holds the metric of a method and of its baseline on the same seeds
(lower is better unless said). For each comparison the differences :math:`d_s = m_s - b_s` give the
paired t statistic :math:`t = \bar d / (s_d / \sqrt n)` with :math:`n - 1` degrees of freedom (scipy's
``ttest_1samp``). Across the :math:`K` comparisons of one report (a *family*) the 95 % intervals are
corrected by Holm's step-down rule: sorted by p-value, the :math:`i`-th (from 0) is tested at
:math:`\alpha / (K - i)` while every earlier one was rejected; once one is not, every later one is read at
that same level. Each comparison's interval is the t-interval at its level, so it excludes 0 exactly where
Holm rejects (Holm 1979; the compatible intervals of Strassburger and Bretz 2008, in their simple form).

Verdicts, from that one interval :math:`[l, u]`:

- ``helps`` / ``hurts``: the interval excludes 0 (the method's metric is lower / higher, for a
  lower-is-better metric);
- ``equivalent``: the interval lies inside :math:`(-\delta, \delta)`, the margin the report states (two
  one-sided tests at the corrected level, each at half of it: conservative);
- ``inconclusive``: neither; in particular always with one seed, or with no margin.

Each comparison also states the smallest difference it could detect: the :math:`|\Delta|` at which the
two-sided paired t-test at its corrected level has 80 % power, from the non-central t distribution with
the observed :math:`s_d` (:func:`detectable_difference`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

VERDICTS = ("helps", "hurts", "equivalent", "inconclusive")


@dataclass(frozen=True)
class Paired:
    """One comparison: the metric of ``method`` and of ``baseline``, entry ``s`` of each from seed ``s``.

    ``margin`` is the equivalence margin :math:`\\delta` in the metric's units (``nan``: none stated, so the
    comparison can never be ``equivalent``). ``lower_is_better`` orients ``helps`` / ``hurts``.
    """

    method: Sequence[float]
    baseline: Sequence[float]
    margin: float = math.nan
    lower_is_better: bool = True


@dataclass(frozen=True)
class Verdict:
    """The statistics of one comparison (differences are method - baseline)."""

    n: int                   # seeds with both values finite
    difference: float        # mean paired difference
    se: float                # its standard error, s_d / sqrt(n)
    low: float               # the corrected interval
    high: float
    confidence: float        # its level, 1 - alpha / (K - i) under Holm's rule
    p_value: float           # two-sided, uncorrected
    p_holm: float            # Holm-adjusted
    margin: float
    detectable: float        # smallest |difference| detectable with 80 % power at the corrected level
    verdict: str             # helps | hurts | equivalent | inconclusive

    def describe(self, digits: int = 3) -> str:
        """``+0.012 [-0.004, +0.028] (n = 5): inconclusive``: the difference, its corrected interval, the verdict."""
        if self.n < 2:
            return f"{self.difference:+.{digits}g} (n = {self.n}, no interval): {self.verdict}"
        # a mean of differences that cancel carries rounding noise (+2.96e-16 for 0); beside its interval it is 0
        shown = 0.0 if abs(self.difference) <= 1e-12 * max(abs(self.low), abs(self.high)) else self.difference
        return (f"{shown:+.{digits}g} [{self.low:+.{digits}g}, {self.high:+.{digits}g}] "
                f"(n = {self.n}): {self.verdict}")


def compare_paired(comparisons: Sequence[Paired], alpha: float = 0.05, power: float = 0.8) -> list[Verdict]:
    """Verdicts for a family of paired comparisons, Holm-corrected across the family (see the module)."""
    from scipy import stats

    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    differences = [_differences(c) for c in comparisons]
    p_values = []
    for d in differences:
        if len(d) < 2:
            p_values.append(math.nan)
        elif np.ptp(d) == 0:
            p_values.append(1.0 if d[0] == 0 else 0.0)  # no spread: a sure sign, or exactly no difference
        else:
            p_values.append(float(stats.ttest_1samp(d, 0.0).pvalue))
    levels, p_holm = _holm(p_values, alpha)
    verdicts = []
    for comparison, d, p, level, adjusted in zip(comparisons, differences, p_values, levels, p_holm):
        n = len(d)
        mean = float(np.mean(d)) if n else math.nan
        se = float(np.std(d, ddof=1) / math.sqrt(n)) if n > 1 else math.nan
        low = high = detectable = math.nan
        verdict = "inconclusive"
        if n > 1:
            if se > 0:
                half = float(stats.t.ppf(1 - level / 2, n - 1)) * se
                detectable = detectable_difference(se * math.sqrt(n), n, level, power)
            else:
                half, detectable = 0.0, 0.0
            low, high = mean - half, mean + half
            if low > 0 or high < 0:
                verdict = "helps" if (mean < 0) == comparison.lower_is_better else "hurts"
            elif math.isfinite(comparison.margin) and -comparison.margin < low and high < comparison.margin:
                verdict = "equivalent"
        verdicts.append(Verdict(n=n, difference=mean, se=se, low=low, high=high, confidence=1 - level,
                                p_value=p, p_holm=adjusted, margin=float(comparison.margin),
                                detectable=detectable, verdict=verdict))
    return verdicts


def detectable_difference(sd: float, n: int, alpha: float, power: float = 0.8) -> float:
    r"""The smallest :math:`|\Delta|` that a two-sided paired t-test of level ``alpha`` on ``n`` differences
    of standard deviation ``sd`` rejects with probability ``power``: the root in :math:`\Delta` of
    :math:`P(|T| > t_{1-\alpha/2,\,n-1}) = \text{power}`, :math:`T` non-central t with
    :math:`n - 1` degrees of freedom and non-centrality :math:`\Delta \sqrt n / \text{sd}`."""
    from scipy import optimize, stats

    if n < 2 or not sd > 0:
        return math.nan
    df = n - 1
    critical = stats.t.ppf(1 - alpha / 2, df)

    def shortfall(noncentrality: float) -> float:
        far_tail = stats.nct.cdf(-critical, df, noncentrality)  # scipy gives nan where it underflows
        rejects = stats.nct.sf(critical, df, noncentrality) + (far_tail if math.isfinite(far_tail) else 0.0)
        return rejects - power

    upper = 1.0
    while shortfall(upper) < 0:
        upper *= 2
    return float(optimize.brentq(shortfall, 0.0, upper, xtol=1e-10)) * sd / math.sqrt(n)


def verdict_frame(verdicts: Sequence[Verdict]) -> pd.DataFrame:
    """The verdicts as columns (n, difference, se, low, high, confidence, p_value, p_holm, margin,
    detectable, verdict), one row per comparison in the order given."""
    return pd.DataFrame([v.__dict__ for v in verdicts])


def tally(verdicts: Sequence[Verdict]) -> str:
    """``2 helps, 0 hurts, 1 equivalent, 37 inconclusive``: the counts of a family's verdicts."""
    counts = {name: 0 for name in VERDICTS}
    for v in verdicts:
        counts[v.verdict] += 1
    return ", ".join(f"{counts[name]} {name}" for name in VERDICTS)


def method_statement(alpha: float = 0.05, power: float = 0.8, margin: str = "") -> str:
    """The sentence a report prints above its verdicts: what they mean and how they were reached."""
    equivalence = (f"equivalent where that interval lies inside the margin ({margin})" if margin
                   else "no margin is stated, so nothing is called equivalent")
    return (f"Verdicts (csg.evaluation.comparison): paired by seed, difference = method - baseline, a t-interval "
            f"per comparison, Holm-corrected to {100 * (1 - alpha):g} % across the comparisons of this report; "
            f"helps / hurts where the corrected interval excludes 0, {equivalence}, else inconclusive. "
            f"'detectable': the smallest difference the comparison had {100 * power:g} % power to find.")


@dataclass(frozen=True)
class Unpaired:
    """One comparison of independent samples: the metric of ``method`` on its repeats and of ``baseline`` on
    others, which share no seed (the two may differ in length). ``margin`` and ``lower_is_better`` as in
    :class:`Paired`."""

    method: Sequence[float]
    baseline: Sequence[float]
    margin: float = math.nan
    lower_is_better: bool = True


def compare_unpaired(comparisons: Sequence[Unpaired], alpha: float = 0.05, power: float = 0.8) -> list[Verdict]:
    r"""Verdicts for a family of unpaired comparisons: :func:`compare_paired` where the repeats of the two
    methods are independent. Welch's t (scipy's ``ttest_ind(equal_var=False)``): difference
    :math:`\bar m - \bar b`, standard error :math:`\sqrt{s_m^2 / n_m + s_b^2 / n_b}`, Welch-Satterthwaite
    degrees of freedom; the same Holm correction across the family, the same verdicts from the corrected
    interval, and the detectable difference from the non-central t at those degrees of freedom. A verdict's
    ``n`` is the smaller of the two samples (finite values only); below 2 there is no interval."""
    from scipy import stats

    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    samples = [(_finite(c.method), _finite(c.baseline)) for c in comparisons]
    p_values, moments = [], []
    for m, b in samples:
        if min(len(m), len(b)) < 2:
            p_values.append(math.nan)
            moments.append((math.nan, math.nan, math.nan))
            continue
        vm, vb = np.var(m, ddof=1) / len(m), np.var(b, ddof=1) / len(b)
        mean, se = float(m.mean() - b.mean()), float(math.sqrt(vm + vb))
        if se == 0:
            p_values.append(1.0 if mean == 0 else 0.0)  # no spread in either: a sure sign, or none
            moments.append((mean, 0.0, float(len(m) + len(b) - 2)))
            continue
        df = float((vm + vb) ** 2 / (vm**2 / (len(m) - 1) + vb**2 / (len(b) - 1)))
        p_values.append(float(stats.ttest_ind(m, b, equal_var=False).pvalue))
        moments.append((mean, se, df))
    levels, p_holm = _holm(p_values, alpha)
    verdicts = []
    for comparison, (m, b), p, level, adjusted, (mean, se, df) in zip(comparisons, samples, p_values, levels,
                                                                        p_holm, moments):
        n = min(len(m), len(b))
        low = high = detectable = math.nan
        if n > 1:
            half = float(stats.t.ppf(1 - level / 2, df)) * se if se > 0 else 0.0
            # detectable_difference at df + 1 "seeds" of sd se sqrt(df + 1): the non-central t at df, times se
            detectable = detectable_difference(se * math.sqrt(df + 1), df + 1, level, power) if se > 0 else 0.0
            low, high = mean - half, mean + half
        verdicts.append(Verdict(n=n, difference=mean if n else math.nan, se=se, low=low, high=high,
                                confidence=1 - level, p_value=p, p_holm=adjusted, margin=float(comparison.margin),
                                detectable=detectable,
                                verdict=_verdict_of(mean, low, high, comparison.margin, comparison.lower_is_better)))
    return verdicts


@dataclass(frozen=True)
class VarianceRatio:
    """One comparison of two spreads, each a sample standard deviation over independent repeats: ``method_sd``
    over ``method_n`` repeats against ``baseline_sd`` over ``baseline_n``. Compared on the log scale,
    difference = log(method variance / baseline variance); a smaller variance is better. ``margin``: on that log
    scale (``nan``: none)."""

    method_sd: float
    method_n: int
    baseline_sd: float
    baseline_n: int
    margin: float = math.nan


def compare_variances(comparisons: Sequence[VarianceRatio], alpha: float = 0.05,
                      power: float = 0.8) -> list[Verdict]:
    r"""Verdicts for a family of variance ratios: the F-test of :math:`F = s_m^2 / s_b^2` on
    :math:`(n_m - 1, n_b - 1)` degrees of freedom (normal repeats), two-sided, with the same Holm correction,
    interval rule and verdicts as :func:`compare_paired`, on the log scale: the interval of
    :math:`\log(\sigma_m^2 / \sigma_b^2)` at level :math:`c` is
    :math:`[\log F - \log F_{(1+c)/2}, \log F - \log F_{(1-c)/2}]`; ``helps`` where it lies below 0 (the
    method's variance is smaller). ``se`` is the delta method's :math:`\sqrt{2/(n_m-1) + 2/(n_b-1)}`;
    ``detectable`` the smallest :math:`|\log \rho|` (either direction, the larger of the two) at which the
    corrected test rejects with probability ``power``. A zero or non-finite standard deviation is no test."""
    from scipy import optimize, stats

    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    p_values = []
    for c in comparisons:
        d1, d2 = c.method_n - 1, c.baseline_n - 1
        usable = d1 >= 1 and d2 >= 1 and all(math.isfinite(s) and s > 0 for s in (c.method_sd, c.baseline_sd))
        if not usable:
            p_values.append(math.nan)
            continue
        ratio = (c.method_sd / c.baseline_sd) ** 2
        p_values.append(min(1.0, 2 * min(float(stats.f.cdf(ratio, d1, d2)), float(stats.f.sf(ratio, d1, d2)))))
    levels, p_holm = _holm(p_values, alpha)
    verdicts = []
    for c, p, level, adjusted in zip(comparisons, p_values, levels, p_holm):
        d1, d2 = c.method_n - 1, c.baseline_n - 1
        n = min(c.method_n, c.baseline_n)
        if not math.isfinite(p):
            ratio = c.method_sd / c.baseline_sd if c.baseline_sd else math.nan
            difference = 2 * math.log(ratio) if ratio and math.isfinite(ratio) else math.nan
            verdicts.append(Verdict(n=n, difference=difference, se=math.nan, low=math.nan, high=math.nan,
                                    confidence=1 - level, p_value=p, p_holm=adjusted, margin=float(c.margin),
                                    detectable=math.nan, verdict="inconclusive"))
            continue
        log_ratio = 2 * math.log(c.method_sd / c.baseline_sd)
        upper, lower = stats.f.ppf(1 - level / 2, d1, d2), stats.f.ppf(level / 2, d1, d2)
        low, high = log_ratio - math.log(upper), log_ratio - math.log(lower)

        def shortfall(r: float, sign: float) -> float:  # power at log rho = sign * r, minus the power asked
            rho = math.exp(sign * r)
            return float(stats.f.cdf(lower / rho, d1, d2) + stats.f.sf(upper / rho, d1, d2)) - power

        detectable = 0.0
        for sign in (-1.0, 1.0):
            top = 1.0
            while shortfall(top, sign) < 0:
                top *= 2
            detectable = max(detectable, float(optimize.brentq(shortfall, 0.0, top, args=(sign,), xtol=1e-10)))
        verdicts.append(Verdict(n=n, difference=log_ratio, se=math.sqrt(2 / d1 + 2 / d2), low=low, high=high,
                                confidence=1 - level, p_value=p, p_holm=adjusted, margin=float(c.margin),
                                detectable=detectable, verdict=_verdict_of(log_ratio, low, high, c.margin, True)))
    return verdicts


def _finite(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"an unpaired comparison needs 1-D sequences, got shape {array.shape}")
    return array[np.isfinite(array)]


def _verdict_of(mean: float, low: float, high: float, margin: float, lower_is_better: bool) -> str:
    """:func:`compare_paired`'s rule: helps / hurts where [low, high] excludes 0, equivalent inside the margin."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "inconclusive"
    if low > 0 or high < 0:
        return "helps" if (mean < 0) == lower_is_better else "hurts"
    if math.isfinite(margin) and -margin < low and high < margin:
        return "equivalent"
    return "inconclusive"


def _differences(comparison: Paired) -> np.ndarray:
    method = np.asarray(comparison.method, dtype=float)
    baseline = np.asarray(comparison.baseline, dtype=float)
    if method.shape != baseline.shape or method.ndim != 1:
        raise ValueError(f"a paired comparison needs two 1-D sequences of one length, got {method.shape} and "
                         f"{baseline.shape}")
    d = method - baseline
    return d[np.isfinite(d)]


def _holm(p_values: Sequence[float], alpha: float) -> tuple[list[float], list[float]]:
    """Per comparison, the level of its interval under Holm's step-down rule, and its adjusted p-value.

    Comparisons without a p-value (fewer than 2 seeds) are left out of the family."""
    tested = [i for i, p in enumerate(p_values) if math.isfinite(p)]
    family = len(tested)
    levels = [alpha] * len(p_values)
    adjusted = [math.nan] * len(p_values)
    running, stopped = 0.0, None
    for rank, index in enumerate(sorted(tested, key=lambda i: p_values[i])):
        running = max(running, min(1.0, (family - rank) * p_values[index]))
        adjusted[index] = running
        if stopped is None and p_values[index] >= alpha / (family - rank):
            stopped = alpha / (family - rank)
        levels[index] = stopped if stopped is not None else alpha / (family - rank)
    return levels, adjusted


def mean_se(values: Sequence[float], digits: int, plus_minus: str = "+-") -> str:
    """``mean +- s.e.`` of the finite ``values`` (the standard error s / sqrt(n)), each to ``digits`` decimals; the
    mean alone for one value, ``-`` for none."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return "-"
    mean = sum(finite) / len(finite)
    if len(finite) < 2:
        return f"{mean:.{digits}f}"
    se = float(np.std(finite, ddof=1)) / math.sqrt(len(finite))
    return f"{mean:.{digits}f} {plus_minus} {se:.{digits}f}"

