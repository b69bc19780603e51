r"""Verdicts on one method against another, paired by seed, corrected across a report's comparisons.

Every table of csg that says one method helps, hurts, matches or fails alike with another says it through
:func:`compare_paired` (or its unpaired and variance-ratio forms). A comparison holds the metric of a method and
of its baseline; its estimate :math:`\hat\theta` is the method's minus the baseline's (lower is better unless
said). For paired seeds, the differences :math:`d_s = m_s - b_s` give :math:`\hat\theta = \bar d`, standard
error :math:`s_d / \sqrt n` and the t distribution with :math:`n - 1` degrees of freedom.

**Differences: one directional Holm family.** Each of the :math:`K` comparisons of a report (the *family*) is two
one-sided hypotheses, :math:`H^+_k: \theta_k \le 0` and :math:`H^-_k: \theta_k \ge 0`, and Holm's step-down rule
(Holm 1979) runs over all :math:`2K` at level :math:`\alpha`: sorted by p-value, the :math:`r`-th (from 0) is
rejected at :math:`\alpha / (2K - r)` while every earlier one was. ``helps`` / ``hurts`` where one of a
comparison's two is rejected (the method's metric lower / higher, for a lower-is-better metric); the family-wise
rate of any wrong claim of a direction is at most :math:`\alpha`.

**Intervals, simultaneous and compatible with that test** (Strassburger and Bretz 2008, their Holm case, applied to
the :math:`2K` one-sided hypotheses): with :math:`A` the hypotheses Holm kept (never empty: a comparison's two
cannot both be rejected), a comparison's lower bound is 0 where :math:`H^+_k` was rejected, else the one-sided
bound at level :math:`\alpha / |A|`; its upper bound likewise from :math:`H^-_k`. All :math:`K` intervals cover
their :math:`\theta_k` together with probability at least :math:`1 - \alpha`. A rejected comparison's interval
ends at 0 on the side of 0, open there (:math:`(0, u]` for a claimed :math:`\theta_k > 0`): it says the
direction, not how far from 0; every other interval holds 0 inside. With ``intervals="bonferroni"`` both the test and the intervals are Bonferroni's
instead (each two-sided at :math:`\alpha / K`): less powerful, but every interval is a plain t-interval.

**Equivalence: two one-sided tests in their own Holm family.** A comparison with a margin :math:`\delta` (absolute,
in the metric's units, stated by the report) has the TOST p-value
:math:`\max(P(\hat\theta \ge \text{obs} \mid \theta = -\delta),\ P(\hat\theta \le \text{obs} \mid \theta = \delta))`;
Holm's rule across the comparisons with a margin, at :math:`\alpha`, rejects non-equivalence. So at most
:math:`\alpha` is the chance of calling any comparison whose true difference lies outside its margin
``equivalent``, whatever the number of comparisons.

**Both fail.** A comparison may state a competence bar (``bar``, in the metric's units). A method *meets* it where
its mean over the seeds is at most the bar (at least, for a higher-is-better metric), and *fails* it only where the
one-sided t confidence bound of its mean clears the bar: the lower bound above it (below it, higher is better), at
level :math:`\alpha / (2B)` for the :math:`B` comparisons of the family with a bar (Bonferroni over their
:math:`2B` methods, so every "fails" of a family is right together with probability at least :math:`1 - \alpha`);
a mean above the bar whose bound does not clear it is neither (``None``). Where both methods fail and the test of
the difference rejects nothing, the verdict is ``both fail``, never ``equivalent`` (the tests' reading is kept in
``tested``): two methods that miss the target alike are not "equivalent". A rejected difference stays ``helps`` /
``hurts`` (one method is closer, even if neither arrives), and ``method_meets`` / ``baseline_meets`` say where
either met or failed the bar, for the report to say so beside it.

**Error rates.** The differences' family and the equivalence family each err with probability at most
:math:`\alpha`, and the "fails" statements at most :math:`\alpha`: a report's claims of all three kinds together
at most :math:`3\alpha`.

Verdicts, in that order of precedence: ``helps`` / ``hurts``; ``both fail``; ``equivalent``; else
``inconclusive`` (always with one seed, or with no margin and no rejection).

Each comparison also states the smallest difference it could detect: the :math:`|\Delta|` at which its two-sided
test at the level the family's kept hypotheses were tested at (:math:`2\alpha / |A|`; Bonferroni:
:math:`\alpha / K`) has 80 % power, from the non-central t distribution with the observed spread
(:func:`detectable_difference`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from csg.evaluation.multiplicity import INTERVALS, Estimate, decide

VERDICTS = ("helps", "hurts", "equivalent", "both fail", "inconclusive")


@dataclass(frozen=True)
class Paired:
    """One comparison: the metric of ``method`` and of ``baseline``, entry ``s`` of each from seed ``s``.

    ``margin`` is the equivalence margin :math:`\\delta`, absolute, in the metric's units (``nan``: none stated, so
    the comparison can never be ``equivalent``). ``bar`` the competence bar in the same units (``nan``: none, so
    never ``both fail``). ``lower_is_better`` orients ``helps`` / ``hurts`` and the bar.
    """

    method: Sequence[float]
    baseline: Sequence[float]
    margin: float = math.nan
    lower_is_better: bool = True
    bar: float = math.nan


@dataclass(frozen=True)
class Verdict:
    """The statistics of one comparison (differences are method - baseline)."""

    n: int                   # seeds with both values finite (unpaired: the smaller sample)
    difference: float        # the estimate: mean paired difference (unpaired: difference of means)
    se: float                # its standard error
    low: float               # the simultaneous interval (module docstring: which kind)
    high: float
    confidence: float        # the family's simultaneous level, 1 - alpha
    p_value: float           # two-sided, uncorrected
    p_holm: float            # adjusted for the family of differences (Holm over 2K one-sided; Bonferroni: K p)
    margin: float
    p_equivalence: float     # TOST, adjusted over the family of comparisons with a margin (nan: no margin)
    bar: float
    method_meets: bool | None    # meets the bar (True), fails it (False: its bound clears it), neither or no bar (None)
    baseline_meets: bool | None
    detectable: float        # smallest |difference| detectable with 80 % power (module docstring: at what level)
    tested: str              # what the tests alone say: helps | hurts | equivalent | inconclusive
    verdict: str             # helps | hurts | equivalent | both fail | inconclusive

    def describe(self, digits: int = 3) -> str:
        """``+0.012 [-0.004, +0.028] (n = 5): inconclusive``: the difference, its interval, the verdict."""
        if self.n < 2 or not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"{self.difference:+.{digits}g} (n = {self.n}, no interval): {self.verdict}"
        # a mean of differences that cancel carries rounding noise (+2.96e-16 for 0); beside its interval it is 0
        shown = 0.0 if abs(self.difference) <= 1e-12 * max(abs(self.low), abs(self.high)) else self.difference
        return f"{shown:+.{digits}g} {interval_text(self.low, self.high, f'+.{digits}g')} (n = {self.n}): {self.verdict}"


def interval_text(low: float, high: float, spec: str = "+.3g", shown=None) -> str:
    """``[-0.1, +0.2]``; a bound at exactly 0 (a rejection's) open, ``(0, 0.3]``; ``-`` for no interval. ``shown`` maps
    the bounds before they are written (``math.exp`` for a log ratio: ``(1, 3.2]``), the open end still the 0's."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "-"

    def bound(value: float) -> str:
        return "0" if value == 0 and shown is None else f"{(shown or float)(value):{spec}}"

    return f"{'(' if low == 0 else '['}{bound(low)}, {bound(high)}{')' if high == 0 else ']'}"


def _meets(values: np.ndarray, bar: float, lower_is_better: bool, level: float) -> bool | None:
    """True: the mean meets the bar; False: its one-sided bound at ``level`` clears it; None: neither, or no bar."""
    from scipy import special

    finite = values[np.isfinite(values)]
    if not math.isfinite(bar) or not len(finite):
        return None
    mean = float(finite.mean())
    if (mean <= bar) if lower_is_better else (mean >= bar):
        return True
    if len(finite) < 2:
        return None
    half = float(special.stdtrit(len(finite) - 1, 1 - level)) * float(np.std(finite, ddof=1)) / math.sqrt(len(finite))
    return False if ((mean - half > bar) if lower_is_better else (mean + half < bar)) else None


def _verdicts(comparisons, estimates: Sequence[Estimate | None], sizes: Sequence[int], sides, alpha: float,
              power: float, intervals: str, detectable, untested=None) -> list[Verdict]:
    """The verdicts of a family, from its estimates; ``sides`` the (method, baseline) values for the bar,
    ``detectable(estimate, level, power)`` the smallest detectable difference, ``untested(k)`` the difference shown
    for a comparison without an estimate (default: from ``sides``)."""
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    margins = [float(c.margin) for c in comparisons]
    found = decide(estimates, margins, alpha, intervals)
    barred = sum(math.isfinite(float(getattr(c, "bar", math.nan))) for c in comparisons)
    bar_level = alpha / (2 * max(barred, 1))
    verdicts = []
    for k, (comparison, estimate, n, (mine, theirs)) in enumerate(zip(comparisons, estimates, sizes, sides)):
        tested = "inconclusive"
        if found.rejected_above[k] or found.rejected_below[k]:
            tested = "hurts" if found.rejected_above[k] == getattr(comparison, "lower_is_better", True) else "helps"
        elif found.equivalent[k]:
            tested = "equivalent"
        bar = float(getattr(comparison, "bar", math.nan))
        lower_is_better = getattr(comparison, "lower_is_better", True)
        method_meets = _meets(mine, bar, lower_is_better, bar_level)
        baseline_meets = _meets(theirs, bar, lower_is_better, bar_level)
        both_fail = method_meets is False and baseline_meets is False
        verdict = "both fail" if both_fail and tested in ("equivalent", "inconclusive") else tested
        value = estimate.value if estimate is not None else (untested(k) if untested else _fallback(mine, theirs))
        verdicts.append(Verdict(
            n=n, difference=value, se=estimate.se if estimate is not None else math.nan,
            low=found.low[k], high=found.high[k], confidence=1 - alpha, p_value=found.p_value[k],
            p_holm=found.p_adjusted[k], margin=margins[k], p_equivalence=found.p_equivalence[k], bar=bar,
            method_meets=method_meets, baseline_meets=baseline_meets,
            detectable=detectable(estimate, found.level, power) if estimate is not None else math.nan,
            tested=tested, verdict=verdict))
    return verdicts


def _fallback(mine: np.ndarray, theirs: np.ndarray) -> float:
    """The difference of a comparison with no test (under two seeds): the mean difference, nan for none."""
    if len(mine) and len(mine) == len(theirs):
        return float(np.mean(mine - theirs))
    return float(np.mean(mine) - np.mean(theirs)) if len(mine) and len(theirs) else math.nan


def compare_paired(comparisons: Sequence[Paired], alpha: float = 0.05, power: float = 0.8,
                   intervals: str = "holm") -> list[Verdict]:
    """Verdicts for a family of paired comparisons (see the module): ``intervals`` "holm" (the default) or
    "bonferroni"."""
    estimates, sizes, sides = [], [], []
    for comparison in comparisons:
        method, baseline = _pair(comparison)
        d = method - baseline
        finite = np.isfinite(d)
        d, n = d[finite], int(finite.sum())
        sizes.append(n)
        sides.append((method[finite], baseline[finite]))
        if n < 2:
            estimates.append(None)
            continue
        estimates.append(Estimate(float(np.mean(d)), float(np.std(d, ddof=1) / math.sqrt(n)), df=n - 1))

    def detectable(estimate: Estimate, level: float, power: float) -> float:
        n = int(estimate.df) + 1
        return detectable_difference(estimate.se * math.sqrt(n), n, level, power) if estimate.se > 0 else 0.0

    return _verdicts(comparisons, estimates, sizes, sides, alpha, power, intervals, detectable)


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
    """The verdicts as columns (the fields of :class:`Verdict`), one row per comparison in the order given."""
    return pd.DataFrame([v.__dict__ for v in verdicts])


def tally(verdicts: Sequence[Verdict]) -> str:
    """``2 helps, 0 hurts, 1 equivalent, 0 both fail, 37 inconclusive``: the counts of a family's verdicts."""
    counts = {name: 0 for name in VERDICTS}
    for v in verdicts:
        counts[v.verdict] += 1
    return ", ".join(f"{counts[name]} {name}" for name in VERDICTS)


def method_statement(alpha: float = 0.05, power: float = 0.8, margin: str = "", bar: str = "",
                     intervals: str = "holm", pairing: str = "paired by seed") -> str:
    """The sentences a report prints above its verdicts: what they mean and how they were reached. ``margin`` and
    ``bar`` say the report's equivalence margins and competence bar (in the metric's units); empty: none."""
    if intervals not in INTERVALS:
        raise ValueError(f"intervals must be one of {', '.join(INTERVALS)}, got {intervals!r}")
    level = f"{100 * (1 - alpha):g} %"
    if intervals == "holm":
        test = (f"Holm's step-down test over both directions of every comparison of this report (family-wise error "
                f"{100 * alpha:g} %); intervals: simultaneous {level}, compatible with that test (Strassburger and "
                f"Bretz 2008): an interval excludes 0 exactly where its comparison is rejected, and then ends at 0 "
                f"on that side, open there, written (a, 0) or (0, b)")
    else:
        test = f"Bonferroni: each comparison's t-interval at {100 * alpha:g} % / K, simultaneous {level} over the K"
    equivalence = (f"equivalent where two one-sided tests reject a difference beyond the margin ({margin}), "
                   f"Holm-corrected in a family of their own (so an equivalent comparison's interval, which belongs "
                   f"to the differences' family, may reach past its margin)" if margin
                   else "no margin is stated, so nothing is called equivalent")
    failing = (f"both fail where both methods fail the bar ({bar}: a method fails it where the one-sided confidence "
               f"bound of its mean, Bonferroni over the family's methods, clears it) and no difference is found "
               f"(never equivalent then)" if bar else "no competence bar is stated")
    return (f"Verdicts (csg.evaluation.comparison): {pairing}, difference = method - baseline; {test}. "
            f"helps / hurts where the difference is rejected in that direction; {failing}; {equivalence}; "
            f"else inconclusive. Each kind of claim errs with probability at most {100 * alpha:g} % (so all "
            f"together at most {100 * alpha * (1 + bool(margin) + bool(bar)):g} %). 'detectable': the smallest "
            f"difference the comparison had {100 * power:g} % power to find.")


@dataclass(frozen=True)
class Unpaired:
    """One comparison of independent samples: the metric of ``method`` on its repeats and of ``baseline`` on
    others, which share no seed (the two may differ in length). ``margin``, ``lower_is_better`` and ``bar`` as in
    :class:`Paired`."""

    method: Sequence[float]
    baseline: Sequence[float]
    margin: float = math.nan
    lower_is_better: bool = True
    bar: float = math.nan


def compare_unpaired(comparisons: Sequence[Unpaired], alpha: float = 0.05, power: float = 0.8,
                     intervals: str = "holm") -> list[Verdict]:
    r"""Verdicts for a family of unpaired comparisons: :func:`compare_paired` where the repeats of the two
    methods are independent. Welch's t: difference :math:`\bar m - \bar b`, standard error
    :math:`\sqrt{s_m^2 / n_m + s_b^2 / n_b}`, Welch-Satterthwaite degrees of freedom; the same families,
    intervals and verdicts, and the detectable difference from the non-central t at those degrees of freedom. A
    verdict's ``n`` is the smaller of the two samples (finite values only); below 2 there is no test."""
    estimates, sizes, sides = [], [], []
    for c in comparisons:
        m, b = _finite(c.method), _finite(c.baseline)
        sizes.append(min(len(m), len(b)))
        sides.append((m, b))
        if min(len(m), len(b)) < 2:
            estimates.append(None)
            continue
        vm, vb = np.var(m, ddof=1) / len(m), np.var(b, ddof=1) / len(b)
        se = float(math.sqrt(vm + vb))
        df = float((vm + vb) ** 2 / (vm**2 / (len(m) - 1) + vb**2 / (len(b) - 1))) if se > 0 else len(m) + len(b) - 2.0
        estimates.append(Estimate(float(m.mean() - b.mean()), se, df=df))

    def detectable(estimate: Estimate, level: float, power: float) -> float:
        # detectable_difference at df + 1 "seeds" of sd se sqrt(df + 1): the non-central t at df, times se
        if estimate.se == 0:
            return 0.0
        return detectable_difference(estimate.se * math.sqrt(estimate.df + 1), estimate.df + 1, level, power)

    return _verdicts(comparisons, estimates, sizes, sides, alpha, power, intervals, detectable)


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


def compare_variances(comparisons: Sequence[VarianceRatio], alpha: float = 0.05, power: float = 0.8,
                      intervals: str = "holm") -> list[Verdict]:
    r"""Verdicts for a family of variance ratios: the F-test of :math:`F = s_m^2 / s_b^2` on
    :math:`(n_m - 1, n_b - 1)` degrees of freedom (normal repeats), with the families, intervals and verdicts of
    :func:`compare_paired`, on the log scale :math:`\theta = \log(\sigma_m^2 / \sigma_b^2)`, whose estimate minus
    :math:`\theta` is the log of an F variable; ``helps`` where the method's variance is smaller. ``se`` is the
    delta method's :math:`\sqrt{2/(n_m-1) + 2/(n_b-1)}`; ``detectable`` the smallest :math:`|\log \rho|` (either
    direction, the larger of the two) at which the two-sided F-test at the family's level rejects with
    probability ``power``. A zero or non-finite standard deviation is no test."""
    from scipy import optimize, stats

    estimates, sizes, sides = [], [], []
    for c in comparisons:
        d1, d2 = c.method_n - 1, c.baseline_n - 1
        sizes.append(min(c.method_n, c.baseline_n))
        sides.append((np.array([]), np.array([])))
        usable = d1 >= 1 and d2 >= 1 and all(math.isfinite(s) and s > 0 for s in (c.method_sd, c.baseline_sd))
        estimates.append(Estimate(2 * math.log(c.method_sd / c.baseline_sd), math.sqrt(2 / d1 + 2 / d2),
                                   kind="logF", d1=d1, d2=d2) if usable else None)

    def detectable(estimate: Estimate, level: float, power: float) -> float:
        d1, d2 = estimate.d1, estimate.d2
        upper, lower = stats.f.ppf(1 - level / 2, d1, d2), stats.f.ppf(level / 2, d1, d2)

        def shortfall(r: float, sign: float) -> float:  # power at log rho = sign * r, minus the power asked
            rho = math.exp(sign * r)
            return float(stats.f.cdf(lower / rho, d1, d2) + stats.f.sf(upper / rho, d1, d2)) - power

        found = 0.0
        for sign in (-1.0, 1.0):
            top = 1.0
            while shortfall(top, sign) < 0:
                top *= 2
            found = max(found, float(optimize.brentq(shortfall, 0.0, top, args=(sign,), xtol=1e-10)))
        return found

    def untested(k: int) -> float:  # the log ratio where both spreads are usable numbers, else nan
        c = comparisons[k]
        usable = all(math.isfinite(s) and s > 0 for s in (c.method_sd, c.baseline_sd))
        return 2 * math.log(c.method_sd / c.baseline_sd) if usable else math.nan

    return _verdicts(comparisons, estimates, sizes, sides, alpha, power, intervals, detectable, untested)


def _finite(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"an unpaired comparison needs 1-D sequences, got shape {array.shape}")
    return array[np.isfinite(array)]


def _pair(comparison: Paired) -> tuple[np.ndarray, np.ndarray]:
    method = np.asarray(comparison.method, dtype=float)
    baseline = np.asarray(comparison.baseline, dtype=float)
    if method.shape != baseline.shape or method.ndim != 1:
        raise ValueError(f"a paired comparison needs two 1-D sequences of one length, got {method.shape} and "
                         f"{baseline.shape}")
    return method, baseline


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
