r"""Do the cycles help, and do the ICSGLD paper's samplers? Two families of paired comparisons, each Holm-corrected.

:data:`FAMILIES`: *cycles*, each cyclical method against its constant-step counterpart (:data:`.chains.PAIRS`);
*ICSGLD*, the ICSGLD paper's samplers against the plain and cyclical ones (:data:`.chains.CONTOUR_PAIRS`: ICSGLD
x4 against SGLD x4 and against CSGLD, the paper's comparisons at an equal budget, and against cSGLD x4; CSGLD and
reSGLD against SGLD). For every target, budget and metric, and each pair of a family, both at their tuned settings of that
budget, the evaluation seeds give paired differences metric(method) - metric(baseline) (a seed's runs share their
start points and their noise): :func:`csg.evaluation.comparison.compare_paired`, Holm-corrected across every
comparison of the family (the two families answer two questions; adding the second left the first's verdicts as
they were). Verdicts: helps / hurts where the corrected interval excludes 0, equivalent where it lies inside the
margin, else inconclusive; each with the smallest difference it had 80 % power to detect.

Metrics: the mode-weight error, W2, and core TV (the metric the settings were tuned on, :data:`METRICS`). Margins,
absolute: the mode-weight error and core TV, :data:`MODE_MARGIN` (two points of probability mass); W2,
:data:`W2_MARGIN` times the target's exact floor (W2 between two exact samples of the same size: a property of the
target and budget, the same for every method). Competence bars, the same for both methods of a comparison:
mode-weight error and core TV at most :data:`MODE_BAR` (a tenth of the mass misplaced), W2 at most :data:`W2_BAR`
times the exact floor. Where neither method meets its bar and no difference is found, the verdict is "both fail",
never "equivalent".

:func:`arrived` is a second, descriptive family: on the network, the mode-weight error on the seeds where both
methods' chains arrived (no kept iteration 100 nats above the lowest minimum), which separates hopping between modes
from descending to them. It conditions on an outcome of the runs, so it is no verdict of the study.

:func:`sensitivity`: the same comparisons with both methods at their rank-r settings (:func:`.tuning.ranked`), each
rank a family of its own: how each verdict moves across the settings tuning could barely tell apart. The study's
verdicts are rank 1's (:func:`at_rank`).
"""

from __future__ import annotations

import math

import pandas as pd

from csg.evaluation.comparison import Paired, compare_paired, verdict_frame
from studies.accuracy.multimodal.chains import CONTOUR_PAIRS, PAIRS

MODE_MARGIN = 0.02
W2_MARGIN = 0.25
MODE_BAR = 0.1
W2_BAR = 2.0
METRICS = {"mode_error": "mode-weight error", "w2": "W2", "core_tv": "core TV (the tuning metric)"}
SHARES = ("mode_error", "core_tv")  # metrics of probability mass: the same margin and bar
FAMILIES = {"cycles": PAIRS, "ICSGLD": CONTOUR_PAIRS}


def family_of(method: str, baseline: str) -> str:
    """The family a pair's comparisons belong to."""
    return next(name for name, pairs in FAMILIES.items() if (method, baseline) in pairs)


def _margin(metric: str, floor: float) -> float:
    if metric in SHARES:
        return MODE_MARGIN
    return W2_MARGIN * floor if math.isfinite(floor) and floor > 0 else math.nan


def _bar(metric: str, floor: float) -> float:
    if metric in SHARES:
        return MODE_BAR
    return W2_BAR * floor if math.isfinite(floor) and floor > 0 else math.nan


def statement() -> tuple[str, str]:
    """The margins and bars as the report states them (for :func:`csg.evaluation.comparison.method_statement`)."""
    return (f"mode-weight error and core TV +-{MODE_MARGIN:g}; W2 +-{W2_MARGIN:g} x the exact floor",
            f"mode-weight error and core TV <= {MODE_BAR:g}; W2 <= {W2_BAR:g} x the exact floor")


def verdicts(runs: pd.DataFrame, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """One row per target, budget, metric and pair present in ``runs`` (the evaluation runs, with the "exact"
    rows of the W2 floor): each family of :data:`FAMILIES` one Holm family, the cycles' first."""
    found = [_family(runs, pairs, alpha, power) for pairs in FAMILIES.values()]
    found = [f for f in found if not f.empty]
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame()


def _family(runs: pd.DataFrame, pairs, alpha: float, power: float) -> pd.DataFrame:
    methods = set(runs.method)
    floor = runs[runs.method == "exact"].groupby(["target", "budget"]).w2.mean()
    rows, comparisons = [], []
    for metric in (m for m in METRICS if m in runs.columns):
        for (target, budget), block in runs[runs.method != "exact"].groupby(["target", "budget"], sort=False):
            for method, baseline in pairs:
                if method not in methods or baseline not in methods:
                    continue
                mine = block[block.method == method].set_index("seed")[metric]
                theirs = block[block.method == baseline].set_index("seed")[metric]
                mine, theirs = mine.align(theirs, join="inner")
                if not (mine.notna() & theirs.notna()).any():
                    continue
                exact = float(floor.get((target, budget), math.nan)) if metric == "w2" else math.nan
                baseline_mean = float(theirs.mean())
                comparisons.append(Paired(mine.to_numpy(float), theirs.to_numpy(float), _margin(metric, exact),
                                          bar=_bar(metric, exact)))
                rows.append({"target": target, "budget": budget, "metric": metric, "method": method,
                             "baseline": baseline, "method_mean": float(mine.mean()), "baseline_mean": baseline_mean,
                             "floor": exact})
    if not rows:
        return pd.DataFrame()
    found = verdict_frame(compare_paired(comparisons, alpha, power)).rename(columns={"n": "seeds"})
    return pd.concat([pd.DataFrame(rows), found], axis=1)


def arrived(runs: pd.DataFrame, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """The network's mode-weight error on the seeds where both methods arrived (``finite``), per budget and pair: a
    Holm family of its own per family of :data:`FAMILIES`, with each method's arrival rate over all its seeds."""
    found = [_arrived(runs, pairs, alpha, power) for pairs in FAMILIES.values()]
    found = [f for f in found if not f.empty]
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame()


def _arrived(runs: pd.DataFrame, pairs, alpha: float, power: float) -> pd.DataFrame:
    network = runs[(runs.target == "network") & (runs.method != "exact")]
    rows, comparisons = [], []
    for budget, block in network.groupby("budget", sort=True):
        for method, baseline in pairs:
            mine = block[block.method == method].set_index("seed")
            theirs = block[block.method == baseline].set_index("seed")
            if mine.empty or theirs.empty:
                continue
            both = mine.index.intersection(theirs.index)
            kept = [s for s in both if bool(mine.finite[s]) and bool(theirs.finite[s])]
            comparisons.append(Paired(mine.mode_error[kept].to_numpy(float), theirs.mode_error[kept].to_numpy(float),
                                      MODE_MARGIN, bar=MODE_BAR))
            rows.append({"budget": budget, "method": method, "baseline": baseline,
                         "method_arrived": float(mine.finite.astype(bool).mean()),
                         "baseline_arrived": float(theirs.finite.astype(bool).mean()),
                         "method_mean": float(mine.mode_error[kept].mean()) if kept else math.nan,
                         "baseline_mean": float(theirs.mode_error[kept].mean()) if kept else math.nan})
    if not rows:
        return pd.DataFrame()
    found = verdict_frame(compare_paired(comparisons, alpha, power)).rename(columns={"n": "seeds"})
    return pd.concat([pd.DataFrame(rows), found], axis=1)


def at_rank(runs: pd.DataFrame, rank: int) -> pd.DataFrame:
    """The evaluation runs of every method at its ``rank``-th setting (:func:`.tuning.ranked`; 1: the choice), with
    the exact rows of the W2 floor. Runs without ranks (an older study) are all rank 1."""
    if "rank" not in runs.columns:
        return runs if rank == 1 else runs.iloc[:0]
    return runs[(runs["rank"] == rank) | (runs.method == "exact")]


def sensitivity(runs: pd.DataFrame, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """How each verdict moves across the best settings: :func:`verdicts` with both methods of every pair at their
    rank-r settings, each rank its own family of the same comparisons; one row per comparison with ``verdict_r``
    and ``difference_r`` for each rank r present."""
    ranks = sorted(int(r) for r in set(runs["rank"].dropna())) if "rank" in runs.columns else [1]
    keys = ["target", "budget", "metric", "method", "baseline"]
    merged = None
    for rank in ranks:
        found = verdicts(at_rank(runs, rank), alpha, power)
        if found.empty:
            continue
        found = found[keys + ["difference", "verdict"]].rename(columns={"difference": f"difference_{rank}",
                                                                         "verdict": f"verdict_{rank}"})
        merged = found if merged is None else merged.merge(found, on=keys, how="outer")
    if merged is None:
        return pd.DataFrame(columns=keys)
    columns = [c for c in merged.columns if c.startswith("verdict_")]
    merged["stable"] = merged[columns].nunique(axis=1, dropna=False) == 1
    return merged
