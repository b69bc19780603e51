"""The multimodal report's section on the ICSGLD paper's samplers (:mod:`.contour`): how they ran, and where their
verdicts are (:mod:`studies.accuracy.multimodal.report`)."""

from __future__ import annotations

import math

import pandas as pd

from studies.accuracy.multimodal import contour, reading, tuning, verdicts
from studies.accuracy.multimodal.chains import CANDIDATES, DRAWS
from studies.accuracy.multimodal.targets import SPECS


def family(found: pd.DataFrame, name: str) -> pd.DataFrame:
    """The verdicts of one family of :data:`.verdicts.FAMILIES`."""
    if found.empty:
        return found
    return found[[verdicts.family_of(m, b) == name for m, b in zip(found.method, found.baseline)]]


FROZEN_SHARE = 0.95   # a side "never crosses" where at least this share of its evaluation seeds' chains cross 0 times


def mark_still(found: pd.DataFrame, summary: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """``found`` with, per side, ``*_still``: its tuned setting (rank 1) is h = 0 (:data:`.tuning.LIMIT`), so the
    side is its start distribution; and ``*_frozen``: on at least :data:`FROZEN_SHARE` of the evaluation seeds its
    chains never crossed between modes (from ``runs``), so the side says where chains started and descended, not how
    they sample between modes."""
    if found.empty:
        return found
    first = summary[summary["rank"] == 1] if "rank" in summary.columns else summary
    still = {(r.target, int(r.budget), r.method) for r in first.itertuples() if float(r.step) == tuning.LIMIT}
    frozen = set()
    if runs is not None and "crossings" in runs.columns:
        ranked = runs[runs["rank"] == 1] if "rank" in runs.columns else runs
        share = ranked[ranked.method != "exact"].groupby(["target", "budget", "method"]).crossings.apply(
            lambda c: float((c == 0).mean()))
        frozen = {(t, int(b), m) for (t, b, m), value in share.items() if value >= FROZEN_SHARE}
    keys = list(zip(found.target, found.budget.astype(int)))
    return found.assign(
        method_still=[(t, b, m) in still for (t, b), m in zip(keys, found.method)],
        baseline_still=[(t, b, m) in still for (t, b), m in zip(keys, found.baseline)],
        method_frozen=[(t, b, m) in frozen for (t, b), m in zip(keys, found.method)],
        baseline_frozen=[(t, b, m) in frozen for (t, b), m in zip(keys, found.baseline)])


def pair(row) -> str:
    """A verdict's pair in words, a side at h = 0 or whose chains never cross marked so."""
    def side(name: str, still, frozen) -> str:
        return f"{name} (h = 0)" if still is True else f"{name} (never crosses)" if frozen is True else name
    return (f"{side(row.method, getattr(row, 'method_still', False), getattr(row, 'method_frozen', False))} - "
            f"{side(row.baseline, getattr(row, 'baseline_still', False), getattr(row, 'baseline_frozen', False))}")


def still_lines(summary: pd.DataFrame, found: pd.DataFrame) -> list[str]:
    """The choices at h = 0 and the sides whose chains never cross, in words, per family of verdicts."""
    first = summary[summary["rank"] == 1] if "rank" in summary.columns else summary
    still = first[first.step.astype(float) == tuning.LIMIT]
    lines = []
    if len(still):
        marked = found[found.method_still | found.baseline_still] if "method_still" in found.columns else found.iloc[:0]
        lines.append(f"- **Not moving is the best setting** in {len(still)} of the {len(first)} tuned cells: "
                     + ", ".join(f"{r.target} {r.method} at {int(r.budget):,}" for r in still.itertuples())
                     + ". There every step of the grid scored worse on the tuning seeds than h = 0, the limit below "
                     "the grid (the chains stay at their starts, uniform on the box; a contour method's weights still "
                     "come from a theta adapted on the starts' energies), so the tuning chose h = 0 and the evaluation "
                     "ran it: the method is scored as its start distribution. Its search is bracketed (h >= 0 is the "
                     f"domain's bound), not refused. {len(marked)} verdicts compare such a side (marked '(h = 0)' in "
                     "the tables below): they say how the start distribution compares, not how the method's moving "
                     "chains would.")
    if "method_frozen" in found.columns and (found.method_frozen | found.baseline_frozen).any():
        parts = []
        for name in verdicts.FAMILIES:
            block = family(found, name)
            one = block[block.method_frozen | block.baseline_frozen]
            if len(one):
                both = block[block.method_frozen & block.baseline_frozen]
                decided = one[one.verdict.isin(["helps", "hurts"])]
                parts.append(f"the {name} family: {len(one)} of its {len(block)} ({len(both)} with both sides so; "
                             f"{len(decided)} of them helps or hurts)")
        lines.append(f"- **Sides whose chains never cross** (marked '(never crosses)' in the tables below: on at "
                     f"least {FROZEN_SHARE:.0%} of the evaluation seeds the tuned setting's chains never entered "
                     "another mode's core): " + "; ".join(parts) + ". Such a verdict compares where the chains started "
                     "and descended (re-weighted, for a contour method), not how they sample between modes.")
    return ["## Where chains do not move", "", *lines, ""] if lines else []


def limit_text(tried: pd.DataFrame) -> str:
    """The tuning's runs at h = 0 in words (:data:`.tuning.LIMIT`: the step grids' low end bracketed by the limit)."""
    at = tried[tried.step.astype(float) == tuning.LIMIT].drop_duplicates(["target", "method", "budget"])
    if at.empty:
        return (" No best lay at its step grid's smallest step but on a plateau, so the limit h = 0 below every grid "
                "(the chains' starts) was not run.")
    cells = "; ".join(f"{target} {method} (scored at {', '.join(f'{int(b):,}' for b in sorted(block.budget))})"
                      for (target, method), block in at.groupby(["target", "method"], sort=False))
    return (f" The limit h = 0 below every step grid (the chains stay at their starts; it brackets a grid's low end) "
            f"ran where a best lay at the grid's smallest step and off a plateau, its chains as long as the longest "
            f"budget that wanted it, so the shorter budgets are scored too: {cells}.")


def robust_lines(found: pd.DataFrame, moved: pd.DataFrame | None) -> list[str]:
    """How the family's helps and hurts hold across each method's best settings (ranks 1 to 3), per pair, and how
    the largest gains and costs of the reading fare there."""
    if moved is None or "verdict_2" not in moved.columns:
        return []
    mine = family(moved, "ICSGLD")
    ranks = sorted(int(c.split("_")[1]) for c in mine.columns if c.startswith("verdict_"))
    parts = []
    for (method, baseline), block in mine.groupby(["method", "baseline"], sort=False):
        counts = [f"{int(block[block.verdict_1 == v].stable.sum())} of {int((block.verdict_1 == v).sum())} {v}"
                  for v in ("helps", "hurts") if (block.verdict_1 == v).any()]
        parts.append(f"{method} against {baseline}: " + (", ".join(counts) if counts else "no helps or hurts"))
    keys = ["target", "budget", "metric", "method", "baseline"]
    extremes = []
    for (method, baseline), pair_found in family(found, "ICSGLD").groupby(["method", "baseline"], sort=False):
        cells = pair_found[(pair_found.metric == "mode_error") & pair_found.verdict.isin(["helps", "hurts"])]
        for verdict in ("helps", "hurts"):
            chosen = cells[cells.verdict == verdict]
            if chosen.empty:
                continue
            cell = chosen.loc[chosen.difference.idxmin() if verdict == "helps" else chosen.difference.idxmax()]
            row = mine.set_index(keys).loc[tuple(cell[k] for k in keys)]
            later = ", ".join(f"rank {r}: {row[f'verdict_{r}']} ({row[f'difference_{r}']:+.3f})" for r in ranks[1:]
                              if isinstance(row[f"verdict_{r}"], str))
            extremes.append(f"{method} against {baseline} at {cell.target} {int(cell.budget):,} ({verdict}: {later})")
    return [f"- **Across each method's best {len(ranks)} settings** (the choice and the next by tuning score; "
            f"verdicts kept under every rank): {int(mine.stable.sum())} of the family's {len(mine)} comparisons; "
            + "; ".join(parts) + ". The largest gains and costs above, at the other ranks: " + "; ".join(extremes)
            + "."]


def departure_lines(tables: dict) -> list[str]:
    """What differs from the paper and the authors' code, which a reader of the paper would otherwise assume."""
    barriers = tables.get("barriers")
    widths = ""
    if barriers is not None and len(barriers):
        found = [contour.energy_range(barriers[barriers.target == t]).width for t in dict.fromkeys(barriers.target)]
        widths = f" (here {min(found):.2f} to {max(found):.2f} nats)"
    return [f"- **Departures from the paper and the authors' code**: theta starts uniform, with no pilot run (the "
            "authors' notebooks start it from the histogram of a 20,000-iteration SGLD pilot, and this project's "
            "ICSGLD simulation found the pilot decisive); CSGLD uses ICSGLD's random field, not its own paper's; the "
            "multiplier uses the current partition (the authors' code lags it one iteration) and is clipped; the "
            "importance weights are those of the density the clipped dynamics sample, not theta(J)^zeta (above); "
            f"the partitions' width follows each target's energy range{widths}, where the "
            "paper's 2-D run uses 0.125; reSGLD runs 2 chains at one step (the paper's: 5 chains, steps 0.001 to "
            "0.005, temperatures 1 to 5); energies and gradients are exact (the paper's are noisy)."]


def trend_lines(summary: pd.DataFrame, tried: pd.DataFrame | None = None) -> list[str]:
    """What the contour estimators' weights leave out, and where their error grows with the budget: in the tuned
    settings' evaluation (per two-mode target, against SGLD's) and across every setting the tuning ran (per zeta:
    settings whose mean core TV at the longest budget exceeds their lowest by more than 0.05)."""
    first = summary[summary["rank"] == 1] if "rank" in summary.columns else summary
    found, budgets = [], []
    for target in [t for t in SPECS if t.startswith("barrier") and t in set(first.target)]:
        block = first[first.target == target].set_index(["method", "budget"]).core_tv
        budgets = sorted(int(b) for b in set(first[first.target == target].budget))
        for method in ("CSGLD", "ICSGLD x4"):
            if (method, budgets[-1]) not in block or ("SGLD", budgets[-1]) not in block:
                continue
            mine = [block.get((method, b), math.nan) for b in budgets]
            plain = [block.get(("SGLD", b), math.nan) for b in budgets]
            if mine[-1] > min(mine) + 0.02 and plain[-1] <= min(plain) + 0.02:
                found.append(f"{method} on {target}: " + ", ".join(f"{v:.3f}" for v in mine) + " (SGLD: "
                             + ", ".join(f"{v:.3f}" for v in plain) + ")")
    evaluated = (f"In the tuned settings' evaluation the error is worse at the longest budget than at a shorter one "
                 f"where SGLD's keeps falling (core TV at {', '.join(f'{b // 1000}k' for b in budgets)}): "
                 + "; ".join(found) + "." if found else
                 "In the tuned settings' evaluation no contour method's core TV on a two-mode target is worse at the "
                 "longest budget than at a shorter one while SGLD's keeps falling.")
    grown = ""
    if tried is not None and len(tried):
        mine = tried[tried.method.isin(["CSGLD", "ICSGLD x4"])]
        keys = ["target", "method", "step", "explore"]
        longest = mine[mine.budget == mine.groupby(keys).budget.transform("max")].set_index(keys).core_tv
        growth = (longest - mine.groupby(keys).core_tv.min()).dropna()
        parts = [f"zeta {z:g}: {int((g > 0.05).sum())} of {len(g)}" for z, g in growth.groupby(level="explore")]
        if parts:
            grown = (" Across every setting the tuning ran, those whose mean core TV at their longest budget exceeds "
                     "their lowest by more than 0.05: " + ", ".join(parts)
                     + ("." if found else " (the tuning picked other settings where this happens)."))
    return ["- **Consistency**: the weights are those of the density the continuous-time dynamics sample at the "
            "current theta; at a finite step the discretised chain departs from it, and theta keeps adapting through "
            "the kept window (the paper's algorithm) while each flattened density's normaliser, which changes with "
            "theta, is left out (as in the paper's weights), so iterations under different theta are weighed on "
            "different scales and the estimator need not improve with more iterations. " + evaluated + grown]


def design_lines(protocol, tables: dict, found: pd.DataFrame, summary: pd.DataFrame,
                 moved: pd.DataFrame | None = None) -> list[str]:
    """The section: the samplers as run here, the added run, and the reading of their verdicts."""
    runs = tables["runs"]
    present = [m for m in ("reSGLD", "CSGLD", "ICSGLD x4") if m in set(runs.method)]
    if not present:
        return []
    facts = tables["targets"]
    added = ""
    if "added_methods" in facts.columns and "added_seconds" in facts.columns:
        seconds = float(facts.added_seconds.iloc[0])
        added = (f" They were added to the finished study by a run of their own ({facts.added_methods.iloc[0]}; "
                 f"{seconds / 60:.1f} min, `make accuracy-multimodal ARGS=\"methods=reSGLD,CSGLD,ICSGLDx4 "
                 "merge=true\"`), whose rows replaced theirs in the CSVs and left every other row as it was: every "
                 "method's runs see the noise and start points of its (target, seed, chain) streams whatever runs "
                 "with it.")
    targets = [t for t in SPECS if t in set(runs[runs.method.isin(present)].target)]
    grids = protocol.grids
    mine = family(found, "ICSGLD")
    lines = ["## The ICSGLD paper's samplers: reSGLD, CSGLD and ICSGLD x4", "",
             f"The ICSGLD paper's own methods (Deng et al. 2020, 2022), on {', '.join(targets)}, in the same vectorised run, "
             "tuning and scores as the others (studies/accuracy/multimodal/contour.py)." + added, "",
             "- **Budgets counted in full**: B gradient evaluations in total across a method's chains: reSGLD 2 chains "
             "of B / 2 (T = 1 and T_high), CSGLD one chain of B, ICSGLD x4 4 chains of B / 4 (the paper's "
             "comparison of ICSGLD with SGLD at an equal budget). A swap and a contour step cost no gradient (the "
             "full-batch energy comes with the gradient).",
             "- **reSGLD**: the two chains at the same step h, the hot one's noise sqrt(2 h T_high); each iteration "
             "they swap positions with probability min(1, S), log S = (1 - 1 / T_high)(U_cold - U_hot) (exact "
             "energies: no correction). Only the T = 1 chain is scored (its crossings, draws and weights); T_high "
             f"on {', '.join(f'{t:g}' for t in grids.temperatures)} (the paper's 2-D ladder ends at 5).",
             f"- **CSGLD, ICSGLD x4**: {contour.PARTITIONS} energy partitions over the authors' [min U - 1, max U + 1], "
             "min U the lowest minimum and max U the highest point of the minimum-energy paths (the barrier table: "
             "the range that holds every barrier), energies above it an overflow partition (multiplier 1, no "
             "update; the authors' bandit code); the random field theta(J)(1{i = J} - theta(i)) (ICSGLD's "
             "Eq. 8; ICSGLD x4's 4 chains share one theta and average their fields), the authors' step "
             "min(3e-3, 1 / (k^0.6 + 100)), the forward difference of their Appendix D.5 script, the multiplier "
             f"clipped to [-5, 5]; zeta on {', '.join(f'{z:g}' for z in grids.zetas)} (the paper's 2-D simulation: "
             "0.75; theta's fixed point makes theta^zeta the partition masses for any zeta, so zeta sets how far "
             "theta must move: a larger one flattens sooner).",
             "- **Importance weights**: a contour chain samples the density its multiplied gradient defines, so its mode "
             "weights and core shares are weighted means over its kept iterations, each weighing exp((Phi(U) - U) / T) "
             "at the current theta, Phi' the multiplier as applied (clipped; 1 in the overflow and above the range): "
             "the weight of what the chain samples (`EnergyPartition.dynamics_log_weights`). The paper's weight "
             "theta(J)^zeta equals it only where the multiplier is unclipped and theta smooth; with it, this study's "
             "first full run (2026-11-27) got errors that grew with the budget: theta ran away onto the partitions "
             "just above the light mode's minimum, and at zeta 4 the multiplier sat at its clip in many iterations "
             "(the diagnosis is in the message of the commit that changed the weights). The rerun changed three "
             "things at once (these weights, a fix at the overflow's edge, zeta 0.25 added), so its change in "
             "verdicts is not the weights' alone; CSGLD and ICSGLD x4 here name the paper's dynamics with these "
             "weights. Its W2 draws are "
             f"{CANDIDATES} weighted positions resampled to {DRAWS} by systematic resampling on the weights (then the "
             "same W2 as every method's). Covered counts its visits, unweighted.",
             "- **Tuning**: " + "; ".join(tuning.grid_text(grids, [tuning.BY_NAME[m] for m in present])[:len(present)])
             + "; the first round runs every setting, later rounds as for the others, the same one-standard-error "
             "rule; T_high and zeta each from a short list, not bracketed (the Tuning section says where the best "
             "settings lie).", *departure_lines(tables), *trend_lines(summary, tables.get("tuning")), ""]
    if mine.empty:
        return lines
    lines += ["**Reading** (their verdicts: below, in a Holm family of their own):", "",
              *reading.bullets(mine, summary, tables, extras=False), *robust_lines(found, moved), "",
              "![verdicts of the ICSGLD paper's samplers](accuracy_multimodal_icsgld.png)", ""]
    return lines

