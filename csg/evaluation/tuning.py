r"""The rule ``csg-tune`` picks a sampler's settings by, without a reference: held-out NLL, then the members' spread.

Each grid point g is run at seeds s = 1..S on the training split less a held-out share (``data.holdout``) and scored
by its ensemble's NLL on the held-out examples, :math:`\bar\ell_g = \frac1S\sum_s \ell_{g,s}` with standard error
:math:`\mathrm{se}_g` over the seeds (a diverged run scores :math:`+\infty`). The rule:

1. the best point :math:`b = \arg\min_g \bar\ell_g`;
2. the points the seeds cannot tell from it: :math:`\{g : \bar\ell_g \le \bar\ell_b + \mathrm{se}_b\}` (the
   one-standard-error rule of Breiman et al. 1984, Hastie et al. 2009 section 7.10);
3. among them, those whose end-of-run sampling check (:mod:`csg.evaluation.sampling_check`) passed at every seed,
   if any; then the most effective members (:mod:`csg.evaluation.spread`: 1 + the participation ratio of the
   members' centred predictions), ties to the lower NLL.

Why: held-out NLL rewards an ensemble's average, which a snapshot ensemble reaches without spread; where the seeds
cannot tell the NLL apart the rule takes the most spread members, the first thing a posterior has that a snapshot
ensemble lacks. The rule sees no reference; the sampling study (``make sampling-study``) reports how close its pick
comes to the pick of an oracle that tunes on the distance to NUTS.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["GridPoint", "Pick", "pick"]


@dataclass(frozen=True)
class GridPoint:
    """One grid point: its overrides and, per seed, the held-out NLL, the effective members and the end-of-run
    sampling check's line (empty where it passed)."""

    overrides: tuple[str, ...]
    nll: tuple[float, ...]
    effective_members: tuple[float, ...] = ()
    checks: tuple[str, ...] = ()

    @property
    def mean_nll(self) -> float:
        """The mean held-out NLL over the seeds; infinity where any seed's is not finite."""
        values = [v if math.isfinite(v) else math.inf for v in self.nll]
        return math.inf if not values or math.inf in values else sum(values) / len(values)

    @property
    def stderr_nll(self) -> float:
        """The standard error of :attr:`mean_nll` over the seeds (0 with one seed)."""
        n = len(self.nll)
        if n < 2 or not math.isfinite(self.mean_nll):
            return 0.0
        mean = self.mean_nll
        return math.sqrt(sum((v - mean) ** 2 for v in self.nll) / (n - 1) / n)

    @property
    def mean_effective_members(self) -> float:
        """The mean effective number of members over the seeds that report one (0 where none does)."""
        values = [v for v in self.effective_members if v is not None and math.isfinite(v)]
        return sum(values) / len(values) if values else 0.0

    @property
    def samples(self) -> bool:
        """Whether the end-of-run check passed at every seed."""
        return bool(self.checks) and not any(self.checks)


@dataclass(frozen=True)
class Pick:
    """The rule's choice: the point, the best-NLL point, the points within one standard error of it and why."""

    point: GridPoint
    best_nll: GridPoint
    within: tuple[GridPoint, ...] = field(default=())
    reason: str = ""


def pick(points: Sequence[GridPoint]) -> Pick:
    """The module's rule over ``points``; a ``ValueError`` where none has a finite held-out NLL."""
    finite = [p for p in points if math.isfinite(p.mean_nll)]
    if not finite:
        raise ValueError("no grid point has a finite held-out NLL at every seed: every point diverged at a seed "
                         "(try smaller steps: sampler.lr0)")
    best = min(finite, key=lambda p: p.mean_nll)
    bound = best.mean_nll + best.stderr_nll
    within = tuple(p for p in finite if p.mean_nll <= bound)
    sampling = [p for p in within if p.samples]
    pool = sampling or list(within)
    chosen = max(pool, key=lambda p: (p.mean_effective_members, -p.mean_nll))
    reason = (f"held-out NLL {chosen.mean_nll:.4f} within one standard error of the best "
              f"({best.mean_nll:.4f} + {best.stderr_nll:.4f}; {len(within)} of {len(finite)} points), the most "
              f"effective members ({chosen.mean_effective_members:.2f})"
              + ("" if sampling else "; no point within it passed the end-of-run sampling check at every seed"))
    return Pick(chosen, best, within, reason)
