r"""Fair, bracketed tuning: every method's settings chosen on the tuning seeds, never at the edge of what was tried.

**The lattice** (:class:`Grids`): a constant step h and a cyclical peak :math:`\alpha_0` each on its own geometric
grid (ratio 2, in units of 1/L) per update rule, wide enough for both ends to be worse than the inside;
:math:`\alpha_0` is chosen independently of any h (SGLD's grid spans from far below to 8 x above its stability
limit 2/L, SGHMC's past its heavy-ball limit 2 (1 + m) / (1 - m) = 38 / L). The cyclical methods also take the
exploration share :math:`\beta` and the cycle length C (iterations of one chain; at a budget of B gradient
evaluations M = B / C cycles in all) from lattices that span their domains: :math:`\beta` from 0 (no exploration
stage, the domain's bound) by 1/16, 1/8, 1/4 and then :math:`1 - 2^{-k}` towards 1, up to the largest that leaves
the cycle a sampling stage (the domain's other bound, which depends on C), C from 2 (the shortest cycle with a schedule, the domain's bound) to the
longest chain, by x5 to 1250 and then x4 through the budgets' chain lengths, so that one cycle per chain is on it.
At a budget a cycle must divide the chain's iterations; one cycle per chain is that budget's bound. The ICSGLD
paper's samplers (:mod:`.contour`) take a step h on their own grid and their own value on a short list
(:attr:`Grids.temperatures`: reSGLD's high temperature; :attr:`Grids.zetas`: the contour methods' zeta), held in
the setting's ``explore``; the list's ends count as its bounds (the values the paper's settings and the targets'
energy scale suggest, reported as bounds like beta 0), its step grid's ends as ends.

**The search** (:func:`wanted`, driven by :func:`studies.accuracy.multimodal.study.run_group`): the first
round runs every step of the grid at the first round's :math:`\beta` and C (:attr:`Grids.explore`,
:attr:`Grids.cycles`); each later round adds, around every choice that lacks a neighbour, the 3 x 3 x 3 block of
its neighbours in step, :math:`\beta` and C that lie in the domain, until every choice has all its axis
neighbours run (at most :attr:`Grids.rounds` rounds). Every round's rows see the noise and starts of the first
(common random numbers), so a setting scores the same whichever round runs it, and the choice is the lattice's.

**Choice** (:func:`choose`), per target, method and budget, from the tuning seeds' runs, by a one-standard-error
rule: the *best* setting has the lowest mean core TV over the seeds (:mod:`.study`: the shares of the kept
iterations in each mode's core and outside them against the exact shares; it punishes wrong mode weights and wrong
shapes alike, so a step so large that the chain spreads over the whole box, which gets an equal-weight grid's
weights right, loses); the *choice* is, among the settings whose mean core TV is within one standard error (over
the tuning seeds) of the best's, the one whose chains crossed between modes most (mean crossings per chain; ties:
the lower mean core TV, then the smaller setting). Five seeds cannot tell such settings apart, and a setting that
ties without crossing owes its score to where its chains happened to start, which fresh seeds do not repeat; where
none crosses, the choice is the best. A run that diverged scores 1, the worst. :func:`ranked` gives the choice and
the next settings by mean core TV (ranks 2, 3, ...): the study evaluates them too, so the report shows how each
verdict moves across the best settings.

**The edge check** (:func:`check_edges`): the best setting is *bracketed* when each of its neighbours along every axis was
run and scored no better, or lies outside the domain (:math:`\beta = 0` or no larger one with a sampling stage,
C = 2, one cycle per chain: the optimum is then on the domain's boundary, which the report counts). A choice at
the end of a grid or lattice that the domain goes past (a step's grid), or one whose neighbours were not all run,
means
the search did not bracket it: :class:`GridEdge` names every such choice in one line and no report is written.
**The step's low end** is bracketed by the limit itself: below every step grid lies h = 0 (:data:`LIMIT`, the
domain's bound h >= 0), where every chain stays at its start (a contour method's theta still adapts on the starts'
fixed energies), so that the score is that of the start distribution. Where the best is the grid's smallest step,
h = 0 is its lower neighbour and the search runs it like any other; where h = 0 itself is best, the method's best
setting is not to move: the choice is bracketed by the domain's bound (``bounds`` "step 0", ``still``), evaluated
there, and the report says so beside its verdicts rather than refusing (a finer grid cannot bracket a score that
keeps improving towards h -> 0: the full runs of 2026-11-27 from 1/256, 1/1024 and 1/4096 each ended at their
grid's end). Under the one-standard-error rule a best at the grid's smallest step whose upper neighbour scores
within one standard error of it (a *plateau*: the network's chains started from its burn-in, where nothing moves
between modes) counts as bracketed without running h = 0 (``plateau``, counted in the report), as before.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from csg.errors import CsgError
from studies.accuracy.multimodal.chains import BY_NAME, Method, Setting, chain_length, first_kept
from studies.accuracy.multimodal.contour import CONTOUR, REPLICA


def _powers(low: int, high: int) -> tuple[float, ...]:
    return tuple(2.0**k for k in range(low, high + 1))


@dataclass(frozen=True)
class Grids:
    """Step grids in units of 1 / L, per update rule and schedule (h for a constant step, alpha_0 for a cyclical
    one); the lattices of beta and C, and the values of them that the first round runs at every step."""

    sgld: tuple[float, ...] = field(default_factory=lambda: _powers(-10, 6))
    csgld: tuple[float, ...] = field(default_factory=lambda: _powers(-8, 4))
    sghmc: tuple[float, ...] = field(default_factory=lambda: _powers(-8, 7))
    csghmc: tuple[float, ...] = field(default_factory=lambda: _powers(-6, 8))
    explore: tuple[float, ...] = (0.25, 0.5)
    cycles: tuple[int, ...] = (50, 250, 1250)
    explore_lattice: tuple[float, ...] = (0.0, 1 / 16, 1 / 8, 1 / 4, *(1 - 2.0**-k for k in range(1, 21)))
    cycle_lattice: tuple[int, ...] = (2, 10, 50, 250, 1250, 5000, 20000, 80000, 320000)
    rounds: int = 12
    resgld: tuple[float, ...] = field(default_factory=lambda: _powers(-8, 3))     # reSGLD's h
    # CSGLD's and ICSGLD x4's h: from 1/4096, bracketed below by h = 0 (LIMIT). Full runs of 2026-11-27 without the
    # limit were refused by the edge check each time: from 1/256, barrier12 CSGLD at 80k chose 1/256; from 1/1024,
    # barrier12 ICSGLD x4 at 80k chose 1/1024; from 1/4096, barrier16 ICSGLD x4 at 80k chose 1/4096 (a chain that
    # barely moves keeps its start's mode: the score improves towards h -> 0, the start distribution)
    contour: tuple[float, ...] = field(default_factory=lambda: _powers(-12, 3))
    temperatures: tuple[float, ...] = (3.0, 8.0)   # reSGLD's T_high: about the paper's top rung 5, and higher
    # zeta: the paper's 0.75, a faster-flattening 4, and 0.25: a multiplier gain zeta T / Delta u of 0.4 to 5 on these
    # targets' partitions (at 4 the first full run's multiplier sat at its clip in about a third of its iterations)
    zetas: tuple[float, ...] = (0.25, 0.75, 4.0)

    def steps(self, method: Method) -> tuple[float, ...]:
        if method.kind != "plain":
            return self.resgld if method.kind == REPLICA else self.contour
        return getattr(self, ("c" if method.cyclical else "") + method.rule)

    def own(self, method: Method) -> tuple[float, ...]:
        """The values of a method's own hyperparameter (in the setting's ``explore``); none for the plain ones."""
        return {REPLICA: self.temperatures, CONTOUR: self.zetas}.get(method.kind, ())

    def settings(self, method: Method) -> list[Setting]:
        """The first round's settings of a method."""
        if self.own(method):
            return [Setting(h, value) for h in self.steps(method) for value in self.own(method)]
        if not method.cyclical:
            return [Setting(h) for h in self.steps(method)]
        return [Setting(a, beta, c) for a in self.steps(method) for beta in self.explore for c in self.cycles]


class GridEdge(CsgError):
    """A choice is not bracketed by what was tried: no report is written."""

    exit_code = 1


KEYS = ["target", "method", "budget"]
SETTING = ["step", "explore", "cycle"]
CRITERION = "core_tv"
END, BOUND = "end", "bound"     # a neighbour past a grid's end (not bracketed) / past the domain's bound (bracketed)
LIMIT = 0.0                     # below every step grid: h -> 0, the chains' starts (run only where the search needs it)


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Per target, method, budget and setting: means (and standard errors) over the tuning seeds."""
    grouped = runs.groupby(KEYS + SETTING, sort=False)
    return grouped.agg(core_tv=("core_tv", "mean"), core_tv_se=("core_tv", "sem"), mode_error=("mode_error", "mean"),
                       mode_error_se=("mode_error", "sem"), crossings=("crossings", "mean"), cycles=("cycles", "first"),
                       diverged=("finite", lambda f: int((~f.astype(bool)).sum())), seeds=("seed", "count")).reset_index()


def _index(values: Sequence[float], value: float) -> int:
    return next(i for i, v in enumerate(values) if math.isclose(v, value, rel_tol=1e-9, abs_tol=1e-12))


def _cycles_at(grids: Grids, method: Method, budget: int) -> list[int]:
    """The lattice's cycle lengths that fit a budget: dividing its chain's iterations."""
    n = chain_length(method, budget)
    return [c for c in grids.cycle_lattice if c <= n and n % c == 0]


def axes(grids: Grids, method: Method, setting: Setting, budget: int) -> dict[str, tuple[object, object]]:
    """Per axis, the lower and upper neighbour of ``setting`` at ``budget``: a value, :data:`END` (past a grid's
    end) or :data:`BOUND` (past the domain's bound)."""
    def around(values, value, low_end, high_end):
        i = _index(values, value)
        return (values[i - 1] if i > 0 else low_end, values[i + 1] if i + 1 < len(values) else high_end)

    found = {"step": around((LIMIT, *grids.steps(method)), setting.step, BOUND, END)}
    if grids.own(method):
        found["explore"] = around(grids.own(method), setting.explore, BOUND, BOUND)
    if method.cyclical:
        low, high = around(grids.explore_lattice, setting.explore, BOUND, END)
        if high != END and first_kept(Setting(setting.step, high, setting.cycle)) >= setting.cycle:
            high = BOUND                       # a larger beta leaves the cycle no sampling stage
        found["explore"] = (low, high)
        found["cycle"] = around(_cycles_at(grids, method, budget), setting.cycle, BOUND, BOUND)
    return found


def _cube(grids: Grids, method: Method, setting: Setting, budget: int) -> list[Setting]:
    """The setting and its neighbours along every axis and diagonal, in the domain."""
    options = {axis: [v for v in (low, getattr(setting, axis), high) if v not in (END, BOUND)]
               for axis, (low, high) in axes(grids, method, setting, budget).items()}
    if not method.cyclical:
        return [Setting(h, b) for h in options["step"] for b in options.get("explore", [setting.explore])]
    return [Setting(a, b, c) for a, b, c in itertools.product(options["step"], options["explore"], options["cycle"])]


def _key(target: str, method: str, budget: int, setting: Setting) -> tuple:
    return target, method, int(budget), float(setting.step), float(setting.explore), int(setting.cycle)


def _tried(table: pd.DataFrame) -> set[tuple]:
    return {_key(r.target, r.method, r.budget, Setting(r.step, r.explore, r.cycle))
            for r in table[KEYS + SETTING].itertuples()}


def _ordered(block: pd.DataFrame, one_se: bool = True) -> tuple[pd.Series, pd.DataFrame]:
    """One target, method and budget's settings: the best (lowest mean core TV; ties: the lower mode-weight error,
    then the smaller setting) and every setting ranked, the one-standard-error pick first (module docstring), then
    the others by mean core TV (``one_se=False``: the best first, the rule of the study before this one)."""
    by_score = block.sort_values([CRITERION, "mode_error", *SETTING], kind="stable")
    best = by_score.iloc[0]
    if not one_se:
        return best, by_score
    se = float(best[CRITERION + "_se"]) if f"{CRITERION}_se" in best and math.isfinite(best[CRITERION + "_se"]) else 0.0
    near = by_score[by_score[CRITERION] <= best[CRITERION] + se]
    pick = near.sort_values(["crossings", CRITERION, *SETTING], ascending=[False, True, True, True, True],
                            kind="stable").index[0]
    return best, pd.concat([by_score.loc[[pick]], by_score.drop(index=pick)])


def ranked(table: pd.DataFrame, ranks: int = 3) -> pd.DataFrame:
    """Per target, method and budget, the first ``ranks`` settings of :func:`_ordered` (rank 1: the choice), from the
    :func:`summarise` d ``table``: the keys, ``rank``, the setting and its tuning means."""
    found = []
    for _, block in table.groupby(KEYS, sort=False):
        order = _ordered(block)[1].head(ranks)
        found.append(order.assign(rank=range(1, len(order) + 1)))
    if not found:
        return pd.DataFrame(columns=[*KEYS, "rank", *SETTING])
    return pd.concat(found, ignore_index=True)[[*KEYS, "rank", *SETTING, CRITERION, "mode_error", "crossings",
                                                "cycles"]]


def choose(table: pd.DataFrame, grids: Grids, one_se: bool = True) -> pd.DataFrame:
    """Per target, method and budget, the choice (rank 1 of :func:`_ordered`: the one-standard-error rule) from the
    :func:`summarise` d ``table``. Columns: the keys, the chosen setting, its means, ``best_*`` (the setting with the
    lowest mean core TV, which the search brackets), ``window`` (the best's standard error: the rule's window),
    ``edge`` (a neighbour of the best past a grid's end), ``missing`` (neighbours of the best in the domain not
    run), ``bounds`` (the chosen setting's axes at the domain's bound, e.g. ``beta 0``) and ``low`` / ``high`` of
    its step grid. ``one_se=False``: the best is the choice (``window`` NaN), the rule of a study before this one."""
    tried, rows = _tried(table), []
    for key, block in table.groupby(KEYS, sort=False):
        best, order = _ordered(block, one_se)
        pick = order.iloc[0]
        method, budget = BY_NAME[key[1]], int(key[2])
        setting = Setting(float(best.step), float(best.explore), int(best.cycle))
        chosen = Setting(float(pick.step), float(pick.explore), int(pick.cycle))
        neighbours = axes(grids, method, setting, budget)
        se = best.get(CRITERION + "_se", math.nan)
        plateau = one_se and _plateau(block, best, neighbours, se)
        missing = sum(1 for axis, pair in neighbours.items() for v in pair if v not in (END, BOUND)
                      and not (plateau and axis == "step" and v == LIMIT)
                      and _key(*key[:2], budget, replace(setting, **{axis: v})) not in tried)
        bounds = [f"{axis_name(method, axis)} {_value(axis, getattr(chosen, axis))}"
                  for axis, pair in axes(grids, method, chosen, budget).items() if BOUND in pair]
        steps = grids.steps(method)
        rows.append({**dict(zip(KEYS, key)), **{k: pick[k] for k in SETTING}, "cycles": int(pick.cycles),
                     CRITERION: float(pick[CRITERION]), "mode_error": float(pick.mode_error),
                     "crossings": float(pick.crossings),
                     **{f"best_{k}": best[k] for k in SETTING}, f"best_{CRITERION}": float(best[CRITERION]),
                     "window": (float(se) if math.isfinite(se) else 0.0) if one_se else math.nan,
                     "low": steps[0], "high": steps[-1], "cyclical": method.cyclical,
                     "edge": any(END in pair for pair in neighbours.values()),
                     "still": float(pick.step) == LIMIT,
                     "plateau": plateau, "missing": missing, "bounds": ", ".join(bounds)})
    return pd.DataFrame(rows)


def _plateau(block: pd.DataFrame, best: pd.Series, neighbours: dict, se: float) -> bool:
    """Whether the best lies at its step grid's low end on a plateau: its upper step neighbour ran and its mean core
    TV is within one standard error of the best's. Towards h -> 0 a chain stays where it starts, so the score tends
    to its start's; a plateau there means a smaller step cannot be shown better, and the low end counts as
    bracketed (module docstring)."""
    low, high = neighbours["step"]
    if low != LIMIT or high in (END, BOUND):
        return False
    above = block[(block.step == high) & (block.explore == best.explore) & (block.cycle == best.cycle)]
    width = float(se) if math.isfinite(se) else 0.0
    return len(above) > 0 and float(above[CRITERION].iloc[0]) <= float(best[CRITERION]) + width


_NAMES = {"step": "step", "explore": "beta", "cycle": "C"}
OWN = {REPLICA: "T_high", CONTOUR: "zeta"}


def axis_name(method: Method, axis: str) -> str:
    """An axis in words: ``explore`` is beta, or reSGLD's T_high, or the contour methods' zeta."""
    return OWN[method.kind] if axis == "explore" and method.kind in OWN else _NAMES[axis]


def _value(axis: str, value) -> str:
    return str(int(value)) if axis == "cycle" else f"{value:g}"


def wanted(chosen: pd.DataFrame, table: pd.DataFrame, grids: Grids) -> dict[tuple[str, str, Setting], int]:
    """The next round: around every choice with a neighbour not run, each setting of its neighbourhood not yet run
    at that budget, with the largest budget it is wanted at (its chains run that long)."""
    tried, found = _tried(table), {}
    for row in chosen[chosen.missing > 0].itertuples():
        method, budget = BY_NAME[row.method], int(row.budget)
        best = Setting(float(row.best_step), float(row.best_explore), int(row.best_cycle))
        for setting in _cube(grids, method, best, budget):
            if _key(row.target, row.method, budget, setting) not in tried:
                key = (row.target, row.method, setting)
                found[key] = max(found.get(key, 0), budget)
    return found


def check_edges(chosen: pd.DataFrame) -> None:
    """Raise :class:`GridEdge` (one line) if any choice is not bracketed (module docstring)."""
    edges = chosen[chosen.edge | (chosen.missing > 0)]
    if edges.empty:
        return
    listed = "; ".join(f"{r.target} {r.method} at {r.budget:,}: {_described(r)}"
                       + (f", grid {r.low:g} .. {r.high:g}" if r.edge else f", {r.missing} neighbour(s) not run")
                       for r in edges.itertuples())
    raise GridEdge(f"{len(edges)} tuned setting(s) not bracketed, so no report was written (widen the grid or allow "
                   f"more rounds): {listed}")


def _described(row) -> str:
    """The best setting of a :func:`choose` row (the one the search brackets) in words."""
    step, explore, cycle = (getattr(row, f"best_{k}", getattr(row, k)) for k in SETTING)
    method = BY_NAME[row.method]
    if method.kind in OWN:
        return f"h = {step:g} / L, {OWN[method.kind]} {explore:g}"
    if not row.cyclical:
        return f"h = {step:g} / L"
    return f"alpha_0 = {step:g} / L, beta {explore:g}, C {int(cycle)}"


def cycles(method: Method, setting: Setting, budget: int) -> int:
    """M, the cycles of a setting at a budget (all chains together); a constant step: its kept chains (its picks)."""
    if not method.cyclical:
        return method.sampled
    return budget // setting.cycle


def power(value: float) -> str:
    """2^k as a whole number or 1 / 2^-k (0: the limit h -> 0)."""
    return f"{value:g}" if value >= 1 or value == LIMIT else f"1/{round(1 / value)}"


def grid_text(grids: Grids, methods: Sequence[Method]) -> list[str]:
    """The grids in words, for the report."""
    lines = []
    for method in methods:
        values = grids.steps(method)
        name = "alpha_0" if method.cyclical else "h"
        own = (f", {OWN[method.kind]} on {', '.join(f'{v:g}' for v in grids.own(method))}"
               if method.kind in OWN else "")
        lines.append(f"{method.name}: {name} from {power(min(values))} to {power(max(values))} / L (x2, {len(values)} "
                     f"values){own}")
    lines.append(f"the cyclical methods: beta on {_lattice(grids.explore_lattice)}, C on "
                 f"{', '.join(str(c) for c in grids.cycle_lattice)} iterations (the first round: beta "
                 f"{', '.join(_fraction(b) for b in grids.explore)}, C {', '.join(str(c) for c in grids.cycles)})")
    return list(dict.fromkeys(lines))


def _fraction(value: float) -> str:
    if value in (0.0, 1.0):
        return f"{value:g}"
    k = max(0, math.ceil(-math.log2(min(value, 1 - value))))
    return f"1 - 2^-{k}" if value > 0.5 and k > 4 else f"{round(value * 2**k)}/{2**k}"


def _lattice(values: Sequence[float]) -> str:
    shown = [_fraction(v) for v in values]
    return ", ".join(shown if len(shown) <= 10 else [*shown[:9], "...", shown[-1]])
