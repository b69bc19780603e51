"""The multimodal report's section on the ICSGLD paper's samplers (:mod:`.contour`): how they ran, and where their
verdicts are (:mod:`csg.studies.accuracy.multimodal.report`)."""

from __future__ import annotations

import pandas as pd

from csg.studies.accuracy.multimodal import contour, reading, tuning, verdicts
from csg.studies.accuracy.multimodal.chains import CANDIDATES, DRAWS


def family(found: pd.DataFrame, name: str) -> pd.DataFrame:
    """The verdicts of one family of :data:`.verdicts.FAMILIES`."""
    if found.empty:
        return found
    return found[[verdicts.family_of(m, b) == name for m, b in zip(found.method, found.baseline)]]


def mark_still(found: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """``found`` with ``method_still`` and ``baseline_still``: whether that side's tuned setting (rank 1) at the
    target and budget is h = 0 (:data:`.tuning.LIMIT`): its chains never moved, so the side is its start
    distribution (for a contour method, weighted by a theta adapted on the starts' energies)."""
    if found.empty:
        return found
    first = summary[summary["rank"] == 1] if "rank" in summary.columns else summary
    still = {(r.target, int(r.budget), r.method) for r in first.itertuples() if float(r.step) == tuning.LIMIT}
    return found.assign(
        method_still=[(t, int(b), m) in still for t, b, m in zip(found.target, found.budget, found.method)],
        baseline_still=[(t, int(b), m) in still for t, b, m in zip(found.target, found.budget, found.baseline)])


def pair(row) -> str:
    """A verdict's pair in words, a side at h = 0 marked so."""
    def side(name: str, still) -> str:
        return f"{name} (h = 0)" if still is True else name
    return (f"{side(row.method, getattr(row, 'method_still', False))} - "
            f"{side(row.baseline, getattr(row, 'baseline_still', False))}")


def still_lines(summary: pd.DataFrame, found: pd.DataFrame) -> list[str]:
    """The choices at h = 0 in words: the cells where a method's best is not to move."""
    first = summary[summary["rank"] == 1] if "rank" in summary.columns else summary
    still = first[first.step.astype(float) == tuning.LIMIT]
    if still.empty:
        return []
    marked = found[found.get("method_still", False) | found.get("baseline_still", False)] if len(found) else found
    return ["## Where not moving is best", "", f"- **Not moving is the best setting** in {len(still)} of the {len(first)} tuned cells: "
            + ", ".join(f"{r.target} {r.method} at {int(r.budget):,}" for r in still.itertuples())
            + ". There every step of the grid scored worse on the tuning seeds than h = 0, the limit below the grid "
            "(the chains stay at their starts, uniform on the box; a contour method's weights still come from a "
            "theta adapted on the starts' energies), so the tuning chose h = 0 and the evaluation ran it: the method "
            "is scored as its start distribution. Its search is bracketed (h >= 0 is the domain's bound), not "
            f"refused. {len(marked)} verdicts compare such a side (marked '(h = 0)' in the tables below): they say how "
            "the start distribution compares, not how the method's moving chains would.", ""]


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


def design_lines(protocol, tables: dict, found: pd.DataFrame, summary: pd.DataFrame) -> list[str]:
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
    targets = sorted(set(runs[runs.method.isin(present)].target))
    grids = protocol.grids
    mine = family(found, "ICSGLD")
    lines = ["## The ICSGLD paper's samplers: reSGLD, CSGLD and ICSGLD x4", "",
             f"The seeds' own methods (Deng et al. 2020, 2022), on {', '.join(targets)}, in the same vectorised run, "
             "tuning and scores as the others (csg/studies/accuracy/multimodal/contour.py)." + added, "",
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
             "update, weight 0; the authors' bandit code); the random field theta(J)(1{i = J} - theta(i)) (ICSGLD's "
             "Eq. 8; ICSGLD x4's 4 chains share one theta and average their fields), the authors' step "
             "min(3e-3, 1 / (k^0.6 + 100)), the forward difference of their Appendix D.5 script, the multiplier "
             f"clipped to [-5, 5]; zeta on {', '.join(f'{z:g}' for z in grids.zetas)} (the paper's 2-D simulation: "
             "0.75; theta's fixed point makes theta^zeta the partition masses for any zeta, so zeta sets how far "
             "theta must move: a larger one flattens sooner).",
             "- **Importance weights**: a contour chain samples the flattened density, so its mode weights and core "
             "shares are weighted means over its kept iterations, weight theta(J(x))^zeta; its W2 draws are "
             f"{CANDIDATES} weighted positions resampled to {DRAWS} by systematic resampling on the weights (then the "
             "same W2 as every method's). Covered counts its visits, unweighted.",
             "- **Tuning**: " + "; ".join(tuning.grid_text(grids, [tuning.BY_NAME[m] for m in present])[:len(present)])
             + "; the first round runs every setting, later rounds as for the others, the same one-standard-error "
             "rule; an end of the T_high or zeta list counts as a bound (listed below with beta 0 and C = 2).", ""]
    if mine.empty:
        return lines
    lines += ["**Reading** (their verdicts: below, in a Holm family of their own):", "",
              *reading.bullets(mine, summary, tables, extras=False), "",
              "![verdicts of the ICSGLD paper's samplers](accuracy_multimodal_icsgld.png)", ""]
    return lines

