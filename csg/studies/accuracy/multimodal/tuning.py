r"""Fair, bracketed tuning: every method's settings from grids, chosen on the tuning seeds, never at a grid's edge.

**Grids** (:class:`Grids`): a constant step h and a cyclical peak :math:`\alpha_0` each on its own geometric grid
(ratio 2, in units of 1/L) per update rule, wide enough for both ends to be worse than the inside; :math:`\alpha_0`
is chosen independently of any h (SGLD's grid spans from far below to 8 x above its stability limit 2/L, SGHMC's
past its heavy-ball limit 2 (1 + m) / (1 - m) = 38 / L).
The cyclical methods also take the exploration share :math:`\beta` and the cycle length C from small grids
(C: iterations of one chain; at a budget of B gradient evaluations the method runs M = B / C cycles in all, a
setting that leaves no whole cycle at a budget is skipped there).

**Choice** (:func:`choose`), per target, method and budget, from the tuning seeds' runs: the lowest mean core TV
over the seeds (:mod:`.study`: the shares of the kept iterations in each mode's core and outside them against the
exact shares; it punishes wrong mode weights and wrong shapes alike, so a step so large that the chain spreads over
the whole box, which gets an equal-weight grid's weights right, loses). It is estimated from every kept iteration,
so it separates settings that 128 draws' W2 cannot. A run that diverged scores 1, the worst.

**The edge check** (:func:`check_edges`): a chosen h or :math:`\alpha_0` at its grid's smallest or largest value
means the grid did not bracket the optimum; :class:`GridEdge` names every such choice in one line and the report
is not written. (:math:`\beta` and C are not checked: their grids are small by design and say so in the report.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from csg.errors import CsgError
from csg.studies.accuracy.multimodal.chains import BY_NAME, Method, Setting


def _powers(low: int, high: int) -> tuple[float, ...]:
    return tuple(2.0**k for k in range(low, high + 1))


@dataclass(frozen=True)
class Grids:
    """Step grids in units of 1 / L, per update rule and schedule (h for a constant step, alpha_0 for a cyclical
    one), and the cyclical methods' small grids of beta and C."""

    sgld: tuple[float, ...] = field(default_factory=lambda: _powers(-10, 6))
    csgld: tuple[float, ...] = field(default_factory=lambda: _powers(-8, 4))
    sghmc: tuple[float, ...] = field(default_factory=lambda: _powers(-8, 7))
    csghmc: tuple[float, ...] = field(default_factory=lambda: _powers(-6, 8))
    explore: tuple[float, ...] = (0.25, 0.5)
    cycles: tuple[int, ...] = (50, 250, 1250)

    def steps(self, method: Method) -> tuple[float, ...]:
        return getattr(self, ("c" if method.cyclical else "") + method.rule)

    def settings(self, method: Method) -> list[Setting]:
        if not method.cyclical:
            return [Setting(h) for h in self.steps(method)]
        return [Setting(a, beta, c) for a in self.steps(method) for beta in self.explore for c in self.cycles]


class GridEdge(CsgError):
    """A chosen step sits at its grid's edge: the grid did not bracket the optimum, so no report is written."""

    exit_code = 1


KEYS = ["target", "method", "budget"]
SETTING = ["step", "explore", "cycle"]
CRITERION = "core_tv"


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Per target, method, budget and setting: means (and standard errors) over the tuning seeds."""
    grouped = runs.groupby(KEYS + SETTING, sort=False)
    return grouped.agg(core_tv=("core_tv", "mean"), core_tv_se=("core_tv", "sem"), mode_error=("mode_error", "mean"),
                       mode_error_se=("mode_error", "sem"), crossings=("crossings", "mean"), cycles=("cycles", "first"),
                       diverged=("finite", lambda f: int((~f.astype(bool)).sum())), seeds=("seed", "count")).reset_index()


def choose(table: pd.DataFrame) -> pd.DataFrame:
    """Per target, method and budget, the setting with the lowest mean core TV over the tuning seeds (ties: the lower
    mode-weight error, then the smaller setting), from the :func:`summarise` d ``table``. Columns: the keys, the
    setting, its means, its grid's ends ``low`` and ``high`` and ``edge``."""
    rows = []
    for key, block in table.groupby(KEYS, sort=False):
        best = block.sort_values([CRITERION, "mode_error", *SETTING], kind="stable").iloc[0]
        grid = sorted(set(block.step))
        method = BY_NAME[key[1]]
        rows.append({**dict(zip(KEYS, key)), **{k: best[k] for k in SETTING}, "cycles": int(best.cycles),
                     CRITERION: float(best[CRITERION]), "mode_error": float(best.mode_error),
                     "low": grid[0], "high": grid[-1], "cyclical": method.cyclical,
                     "edge": bool(math.isclose(best.step, grid[0]) or math.isclose(best.step, grid[-1]))})
    return pd.DataFrame(rows)


def check_edges(chosen: pd.DataFrame) -> None:
    """Raise :class:`GridEdge` (one line) if any chosen h or alpha_0 is at its grid's edge."""
    edges = chosen[chosen.edge]
    if edges.empty:
        return
    listed = "; ".join(f"{r.target} {r.method} at {r.budget:,}: {'alpha_0' if r.cyclical else 'h'} = {r.step:g} / L, "
                       f"grid {r.low:g} .. {r.high:g}" for r in edges.itertuples())
    raise GridEdge(f"{len(edges)} tuned step(s) at a grid's edge, so the grid did not bracket them and no report "
                   f"was written (widen the grid): {listed}")


def cycles(method: Method, setting: Setting, budget: int) -> int:
    """M, the cycles of a setting at a budget (all chains together); a constant step: its chains (its picks)."""
    if not method.cyclical:
        return method.chains
    return budget // setting.cycle


def power(value: float) -> str:
    """2^k as a whole number or 1 / 2^-k."""
    return f"{value:g}" if value >= 1 else f"1/{round(1 / value)}"


def grid_text(grids: Grids, methods: Sequence[Method]) -> list[str]:
    """The grids in words, for the report."""
    lines = []
    for method in methods:
        values = grids.steps(method)
        name = "alpha_0" if method.cyclical else "h"
        lines.append(f"{method.name}: {name} from {power(min(values))} to {power(max(values))} / L (x2, {len(values)} "
                     "values)")
    lines.append(f"the cyclical methods: beta {', '.join(f'{b:g}' for b in grids.explore)}, C "
                 f"{', '.join(str(c) for c in grids.cycles)} iterations")
    return list(dict.fromkeys(lines))
