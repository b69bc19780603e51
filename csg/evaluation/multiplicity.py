r"""The multiple-comparison machinery behind :mod:`csg.evaluation.comparison`: one comparison's estimate and its
test distribution (:class:`Estimate`), Holm's step-down rule (:func:`holm`), and what a family of comparisons
decides (:func:`decide`): the directional Holm test of the differences with its compatible simultaneous intervals
(Strassburger and Bretz 2008) or Bonferroni's, and the Holm family of the equivalence tests (TOST). The math is
stated in :mod:`csg.evaluation.comparison`; this module holds it so that each of the comparison kinds (paired,
unpaired, variance ratio) is only its estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

INTERVALS = ("holm", "bonferroni")


@dataclass(frozen=True)
class Estimate:
    """One comparison's estimate and the distribution that tests it: ``kind`` "t" (estimate - theta is se times a
    t with ``df`` degrees of freedom) or "logF" (estimate - theta is the log of an F(d1, d2) variable). Its
    distribution functions are scipy.special's (``stdtr``, ``fdtr`` and their inverses): the same numbers as
    scipy.stats' t and f, at a small fraction of the cost, which the coverage simulations need."""

    value: float
    se: float
    kind: str = "t"
    df: float = math.nan
    d1: float = math.nan
    d2: float = math.nan

    def p_above(self, c: float) -> float:
        """The p-value of H: theta <= c (small where the estimate lies far above c)."""
        from scipy import special

        if self.kind == "logF":
            return float(special.fdtrc(self.d1, self.d2, math.exp(self.value - c)))
        if self.se == 0:
            return 0.0 if self.value > c else 1.0
        return float(special.stdtr(self.df, -(self.value - c) / self.se))

    def p_below(self, c: float) -> float:
        """The p-value of H: theta >= c."""
        from scipy import special

        if self.kind == "logF":
            return float(special.fdtr(self.d1, self.d2, math.exp(self.value - c)))
        if self.se == 0:
            return 0.0 if self.value < c else 1.0
        return float(special.stdtr(self.df, (self.value - c) / self.se))

    def lower(self, level: float) -> float:
        """The one-sided lower confidence bound at error ``level``."""
        from scipy import special

        if self.kind == "logF":
            return self.value - math.log(float(special.fdtri(self.d1, self.d2, 1 - level)))
        return self.value - (float(special.stdtrit(self.df, 1 - level)) * self.se if self.se > 0 else 0.0)

    def upper(self, level: float) -> float:
        """The one-sided upper confidence bound at error ``level``."""
        from scipy import special

        if self.kind == "logF":
            return self.value - math.log(float(special.fdtri(self.d1, self.d2, level)))
        return self.value + (float(special.stdtrit(self.df, 1 - level)) * self.se if self.se > 0 else 0.0)


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` decides for each comparison of a family (nan / False where it has no estimate)."""

    low: list[float]
    high: list[float]
    p_value: list[float]
    p_adjusted: list[float]
    rejected_above: list[bool]   # theta > 0 claimed
    rejected_below: list[bool]   # theta < 0 claimed
    p_equivalence: list[float]
    equivalent: list[bool]
    level: float                 # the two-sided level of the kept comparisons: what 'detectable' is taken at


def decide(estimates: Sequence[Estimate | None], margins: Sequence[float], alpha: float,
            intervals: str) -> Decision:
    """The two Holm families of the module docstring (or Bonferroni's test and intervals), over the comparisons
    with an estimate."""
    if intervals not in INTERVALS:
        raise ValueError(f"intervals must be one of {', '.join(INTERVALS)}, got {intervals!r}")
    size = len(estimates)
    tested = [k for k, e in enumerate(estimates) if e is not None]
    family = len(tested)
    low, high = [math.nan] * size, [math.nan] * size
    p_value, p_adjusted = [math.nan] * size, [math.nan] * size
    above, below = [False] * size, [False] * size
    level = alpha / max(family, 1)
    if family:
        p_up = {k: float(estimates[k].p_above(0.0)) for k in tested}
        p_down = {k: float(estimates[k].p_below(0.0)) for k in tested}
        for k in tested:
            p_value[k] = min(1.0, 2 * min(p_up[k], p_down[k]))
        if intervals == "bonferroni":
            for k in tested:
                e = estimates[k]
                low[k], high[k] = e.lower(alpha / (2 * family)), e.upper(alpha / (2 * family))
                above[k], below[k] = low[k] > 0, high[k] < 0
                p_adjusted[k] = min(1.0, family * p_value[k])
        else:
            one_sided = [(p_up[k], k, +1) for k in tested] + [(p_down[k], k, -1) for k in tested]
            adjusted, kept = holm([p for p, _, _ in one_sided], alpha)
            for (_, k, side), p, keep in zip(one_sided, adjusted, kept):
                p_adjusted[k] = p if math.isnan(p_adjusted[k]) else min(p_adjusted[k], p)
                if not keep:
                    (above if side > 0 else below)[k] = True
            accepted = sum(kept)  # at least K: a comparison's two hypotheses are never both rejected
            level = 2 * alpha / accepted
            for k in tested:
                e = estimates[k]
                low[k] = 0.0 if above[k] else e.lower(alpha / accepted)
                high[k] = 0.0 if below[k] else e.upper(alpha / accepted)
    p_equivalence, equivalent = [math.nan] * size, [False] * size
    with_margin = [k for k in tested if math.isfinite(margins[k]) and margins[k] > 0]
    if with_margin:
        tost = [max(float(estimates[k].p_above(-margins[k])), float(estimates[k].p_below(margins[k])))
                for k in with_margin]
        adjusted, kept = holm(tost, alpha)
        for k, p, keep in zip(with_margin, adjusted, kept):
            p_equivalence[k], equivalent[k] = p, not keep
    return Decision(low, high, p_value, p_adjusted, above, below, p_equivalence, equivalent, level)


def holm(p_values: Sequence[float], alpha: float) -> tuple[list[float], list[bool]]:
    """Holm's step-down rule at ``alpha`` over ``p_values``: each one's adjusted p-value, and whether it is kept
    (not rejected)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    size = len(p_values)
    adjusted, kept = [math.nan] * size, [True] * size
    running, stopped = 0.0, False
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (size - rank) * p_values[index]))
        adjusted[index] = running
        stopped = stopped or not p_values[index] < alpha / (size - rank)
        kept[index] = stopped
    return adjusted, kept
