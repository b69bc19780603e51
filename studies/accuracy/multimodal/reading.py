r"""The report's reading: where the cycles pay, where they cost, and why, in numbers from the study's tables.

Every sentence is built from the verdicts and the summary (nothing typed by hand), so a rerun rewrites it. The
*why* rests on three quantities per tuned setting: the ceiling of its M picks (:mod:`.ceiling`); the crossings
per cycle (how many of the cycles' restarts land in another mode); and the heat of its steps against the
curvature L of the sharpest mode: SGLD at step h on a Gaussian of curvature :math:`\lambda` samples a Gaussian of
variance :math:`1 / (\lambda (1 - h\lambda / 2))` (stable only for :math:`h\lambda < 2`), so a step near 2 / L
flattens every barrier by the factor :math:`1 - hL/2`. A cyclical step peaks at :math:`\alpha_0` in its
exploration stage (no noise: a restart only leaves a mode if :math:`\alpha_0 L > 2`) and its sampling stage opens
at :math:`\alpha_0 (1 + \cos \pi\beta) / 2`.
"""

from __future__ import annotations

import math

import pandas as pd

from csg.evaluation.comparison import tally
from studies.accuracy.multimodal.chains import BY_NAME



def heat(step: float) -> float:
    """The variance factor 1 / (1 - h L / 2) of SGLD at step h (in units of 1 / L); infinite at and past 2 / L."""
    return 1 / (1 - step / 2) if step < 2 else math.inf


def opening(row) -> float:
    """The step at which a setting's draws begin, in units of 1 / L: h, or alpha_0 (1 + cos(pi beta)) / 2."""
    if row.cycle <= 1:
        return row.step
    return row.step * (1 + math.cos(math.pi * row.explore)) / 2


def _heat(step: float) -> str:
    factor = heat(step)
    if math.isinf(factor):
        return "unbounded (at or past 2 / L the chain spreads over the box)"
    return f"{factor:.2g} x the target's" if factor < 100 else f"{factor:.0f} x the target's"


def _picks(count: float) -> str:
    return "1 pick" if int(count) == 1 else f"{int(count)} picks"


def _budgets(values) -> str:
    values = sorted(int(v) for v in values)
    return ", ".join(f"{v // 1000}k" for v in values)


def _cells(block: pd.DataFrame, verdict: str) -> str:
    parts = []
    for target, cells in block[block.verdict == verdict].groupby("target", sort=False):
        parts.append(f"{target} at {_budgets(cells.budget)} ({cells.difference.min():+.3f} to {cells.difference.max():+.3f})"
                     if len(cells) > 1 else f"{target} at {_budgets(cells.budget)} ({cells.difference.iloc[0]:+.3f})")
    return "; ".join(parts)


def _where(block: pd.DataFrame, verdict: str) -> str:
    cells = _cells(block, verdict)
    return f"on {cells}" if cells else "nowhere"


def _row(summary: pd.DataFrame, target: str, method: str, budget: int):
    found = summary[(summary.target == target) & (summary.method == method) & (summary.budget == budget)]
    return found.iloc[0] if len(found) else None


LIMIT = {"sgld": 2.0, "sghmc": 2 * 1.9 / 0.1}   # the noise-free rule's stability limit of h L (SGHMC: heavy ball)


def _why(found: pd.DataFrame, summary: pd.DataFrame, method: str, baseline: str, verdict: str) -> str | None:
    """The why of the pair's largest gain (or cost): picks and their ceiling, crossings per cycle, restart size and
    the heat of the opening step against the curvature."""
    cells = found[(found.metric == "mode_error") & (found.method == method) & (found.verdict == verdict)]
    if cells.empty:
        return None
    cell = cells.loc[cells.difference.idxmin() if verdict == "helps" else cells.difference.idxmax()]
    mine, theirs = _row(summary, cell.target, method, cell.budget), _row(summary, cell.target, baseline, cell.budget)
    chains = 4 if method.endswith("x4") else 1
    rule = "sghmc" if "HMC" in method else "sgld"
    per_cycle = mine.crossings * chains / mine.cycles
    lines = [f"At the largest {'gain' if verdict == 'helps' else 'cost'} ({cell.target}, {cell.budget:,} gradients, "
             f"{cell.difference:+.3f}): {baseline} (h = {theirs.step:g} / L) crosses {theirs.crossings:.3g} times per "
             f"chain, error {theirs.mode_error:.3f} and core TV {theirs.core_tv:.3f} (the ceiling of its "
             f"{_picks(theirs.cycles)}: {theirs.ceiling:.3f}); {method} (alpha_0 = {mine.step:g} / L, beta "
             f"{mine.explore:g}, C {int(mine.cycle)}) restarts M = {int(mine.cycles)} times and crosses "
             f"{mine.crossings:.3g} times per chain ({per_cycle:.2g} per cycle), error {mine.mode_error:.3f} and core "
             f"TV {mine.core_tv:.3f}, against the {mine.ceiling:.3f} of M independent picks"]
    if mine.mode_error > 1.5 * mine.ceiling:
        lines.append(": far above it, so its cycles are not independent picks (most end in the mode they began in)")
    else:
        lines.append(": near it, so the cycle count is what limits it")
    limit = LIMIT[rule]
    lines.append(f". The restart's peak alpha_0 L = {mine.step:g} is {'below' if mine.step < limit else 'at' if mine.step == limit else 'above'} "
                 f"the noise-free {rule.upper()} step's stability limit {limit:g} at the sharpest mode")
    if rule == "sgld":
        lines.append(f" ({'no restart leaves a mode' if mine.step <= limit else 'a restart throws the chain out'}); "
                     f"its sampling stage opens at {opening(mine):.2f} / L, a step at which SGLD's stationary variance is "
                     f"{_heat(opening(mine))}, flattening the barrier; the constant step's is {_heat(theirs.step)}")
        if theirs.step >= limit and theirs.core_tv > mine.core_tv and cell.target in ("mog25", "wang25"):
            lines.append(f". The constant step's weights come from spreading over the whole box (its core TV "
                         f"{theirs.core_tv:.3f} against {mine.core_tv:.3f}): right only because the grid's weights "
                         "are equal")
    return "".join(lines) + "."


def _why_other(found: pd.DataFrame, summary: pd.DataFrame, method: str, baseline: str, verdict: str) -> str | None:
    """The largest gain (or cost) of a pair of the ICSGLD paper's samplers: each method's setting, crossings per
    kept chain, mode-weight error and core TV there."""
    cells = found[(found.metric == "mode_error") & (found.method == method) & (found.baseline == baseline)
                  & (found.verdict == verdict)]
    if cells.empty:
        return None
    cell = cells.loc[cells.difference.idxmin() if verdict == "helps" else cells.difference.idxmax()]
    mine, theirs = _row(summary, cell.target, method, cell.budget), _row(summary, cell.target, baseline, cell.budget)
    if mine is None or theirs is None:
        return None
    better, worse = (mine, theirs) if verdict == "helps" else (theirs, mine)
    spread = (f" The lower mode-weight error ({better.method}'s) comes with the higher core TV: its chains spread "
              "beyond the modes' cores, which gets an equal-weight grid's weights right without sampling its modes."
              if better.core_tv > worse.core_tv and cell.target in ("mog25", "wang25") else "")
    return (f"At the largest {'gain' if verdict == 'helps' else 'cost'} of {method} against {baseline} ({cell.target}, "
            f"{cell.budget:,} gradients, {cell.difference:+.3f}): {baseline} ({_described(theirs)}) crosses "
            f"{theirs.crossings:.3g} times per chain, error {theirs.mode_error:.3f}, core TV {theirs.core_tv:.3f}; "
            f"{method} ({_described(mine)}) crosses {mine.crossings:.3g} times per kept chain, error "
            f"{mine.mode_error:.3f}, core TV {mine.core_tv:.3f}.{spread}")


_OWN = {"replica": "T_high", "contour": "zeta"}


def _described(row) -> str:
    kind = BY_NAME[row.method].kind
    if kind in _OWN:
        return f"h = {row.step:g} / L, {_OWN[kind]} {row.explore:g}"
    if row.cycle > 1:
        return f"alpha_0 = {row.step:g} / L, beta {row.explore:g}, C {int(row.cycle)}"
    return f"h = {row.step:g} / L"


def _arrivals(block: pd.DataFrame) -> str:
    """' Of the 10 helps, 7 are between two methods that both miss the bar; ...': a difference found is not an
    arrival."""
    parts = []
    for verdict in ("helps", "hurts"):
        found = block[block.verdict == verdict]
        if len(found):
            missed = found[(found.method_meets.astype(str) == "False") & (found.baseline_meets.astype(str) == "False")]
            met = found[found.method_meets.astype(str) == "True"]
            parts.append(f"of the {len(found)} {verdict}, {len(missed)} between two methods that both miss the bar "
                         f"and {len(met)} where {found.method.iloc[0]} meets it")
    return (" " + "; ".join(parts)[0].upper() + "; ".join(parts)[1:] + ".") if parts else ""


def bullets(found: pd.DataFrame, summary: pd.DataFrame, tables: dict, extras: bool = True) -> list[str]:
    """The reading's bullets (one Markdown line each); ``extras``: with the lines on the ceilings, the targets no
    method gets and the network."""
    lines = []
    for (method, baseline), pair in found.groupby(["method", "baseline"], sort=False):
        for metric, name in (("mode_error", "mode-weight error"), ("w2", "W2"), ("core_tv", "core TV")):
            block = pair[pair.metric == metric]
            if block.empty:
                continue
            lines.append(f"- **{method} against {baseline}, {name}** ({len(block)} target x budget cells): "
                         + tally(block.itertuples()) + f". {'The cyclical method' if BY_NAME[method].cyclical else method}'s "
                         "is lower "
                         + _where(block, "helps") + "; higher " + _where(block, "hurts") + "."
                         + _arrivals(block))
        for verdict in ("helps", "hurts"):
            why = (_why if BY_NAME[method].cyclical else _why_other)(found, summary, method, baseline, verdict)
            if why:
                lines.append(f"- {why}")
    if not extras:
        return lines
    lines += (_ceiling_lines(found, summary) + _stuck_lines(summary, tables.get("tuning"))
              + _network_lines(summary, tables.get("barriers"), tables.get("burnin")))
    return lines


def _ceiling_lines(found: pd.DataFrame, summary: pd.DataFrame) -> list[str]:
    """How close the cycles come to the ceiling of their M picks where they pay, per target."""
    helps = found[(found.metric == "mode_error") & (found.verdict == "helps")
                  & found.method.map(lambda m: BY_NAME[m].cyclical)]
    if helps.empty:
        return []
    rows = [_row(summary, cell.target, cell.method, cell.budget) for cell in helps.itertuples()]
    frame = pd.DataFrame([{"target": r.target, "method": r.method, "ratio": r.mode_error / r.ceiling,
                           "cycles": int(r.cycles), "cycle": int(r.cycle)} for r in rows])

    def span(values, digits: str = "") -> str:
        low, high = min(values), max(values)
        return f"{low:{digits}}" if low == high else f"{low:{digits}} to {high:{digits}}"

    parts = [f"{target} {method}: {span(block.ratio, '.1f')} x (M = {span(block.cycles)}, C = "
             f"{', '.join(str(c) for c in sorted(set(block.cycle)))})"
             for (target, method), block in frame.groupby(["target", "method"], sort=False)]
    return [f"- Where the cycles pay, their mode-weight error is {frame.ratio.min():.1f} to {frame.ratio.max():.1f} x "
            "the ceiling of their M perfect picks, so the cycle count is the limit only where the ratio is near 1: "
            + "; ".join(parts) + ". Far above it, most cycles end in the mode they began in."]


def _stuck_lines(summary: pd.DataFrame, tuned: pd.DataFrame | None = None) -> list[str]:
    """Where no method gets the weights: the largest error of any method at the largest budget, per target."""
    last = summary[summary.budget == summary.budget.max()]
    worst = last.groupby("target").mode_error.min()
    stuck = worst[worst > 0.25]
    if stuck.empty:
        return []
    lines = []
    for target, best in stuck.items():
        chosen = last[(last.target == target) & last.method.isin(["SGLD", "cSGLD"])]
        steps = ", ".join(f"{r.method} {'alpha_0' if r.cycle > 1 else 'h'} = {r.step:g} / L" for r in chosen.itertuples())
        past = bool(len(chosen)) and bool((chosen.step >= LIMIT["sgld"]).all())
        below = ""
        if past and tuned is not None:
            stable = tuned[(tuned.target == target) & (tuned.method == "SGLD") & (tuned.budget == summary.budget.max())
                           & (tuned.step < LIMIT["sgld"])]
            if len(stable):
                top = stable.loc[stable.step.idxmax()]
                below = (f"; the largest step those modes can hold, h = {top.step:g} / L, crosses {top.crossings:.3g} "
                         f"times per chain on the tuning seeds and still errs by {top.mode_error:.3f}")
        lines.append(f"- No method comes near the weights on {target} (the best mode-weight error at "
                     f"{int(summary.budget.max()) // 1000}k: {best:.3f}). Its tuned SGLD steps ({steps})"
                     + (" are at or past the stability limit 2 / L of its sharpest modes, which therefore cannot hold "
                        f"a chain{below}: its unequal curvatures (Wang et al.'s point) defeat one step size, cyclical "
                        "or not." if past else "."))
    return lines


def _network_lines(summary: pd.DataFrame, barriers: pd.DataFrame | None, burnin: pd.DataFrame | None = None) -> list[str]:
    """Whether any chain moves between the network's modes, against one pick per chain and the restarts' size."""
    network = summary[(summary.target == "network") & summary.method.map(lambda m: BY_NAME[m].kind == "plain")]
    if network.empty:
        return []
    groups = (("one chain", ["SGLD", "cSGLD", "SGHMC", "cSGHMC"], "SGLD"), ("four chains", ["SGLD x4", "cSGLD x4"],
                                                                         "SGLD x4"))
    picks = "; ".join(f"{name}: {block.mode_error.min():.3f} to {block.mode_error.max():.3f} against the "
                      f"{network[network.method == plain].ceiling.iloc[0]:.3f} of {_picks(BY_NAME[plain].chains)}"
                      for name, methods, plain in groups
                      for block in [network[network.method.isin(methods)]] if len(block))
    restarts = "; ".join(f"{rule.upper()}: alpha_0 L up to {block.step.max():g} against {LIMIT[rule]:g}"
                         for rule, block in (("sgld", network[network.method.isin(["cSGLD", "cSGLD x4"])]),
                                             ("sghmc", network[network.method == "cSGHMC"])) if len(block))
    failed = network.diverged.sum() / network.seeds.sum()
    shared = burnin is not None and not burnin.empty
    heights = barriers[barriers.target == "network"].barrier if barriers is not None else pd.Series(dtype=float)
    over = f"the {heights.min():.1f} to {heights.max():.1f} nats of its barriers" if len(heights) else "its barriers"
    return [f"- On the network (budgets up to {int(network.budget.max()) // 1000}k) no SGLD or SGHMC method, cyclical or "
            "constant, moves between its modes: "
            f"at most {network.crossings.max():.2g} crossings per chain in any cell, cyclical or not, so each chain "
            f"keeps the mode it {'started in after the shared burn-in' if shared else 'reached from the box'}; the "
            f"mode-weight errors are of the order of one pick per chain ({picks}), and {failed:.0%} of the runs had "
            f"kept iterations {'' if shared else 'still '}100 nats above the lowest minimum (scored 1). The tuned restarts stay within the noise-free step's stability limit at the sharpest mode "
            f"({restarts}), so none throws a chain out of its mode, and the sampling stages' heat does not carry one "
            f"over {over}."]
