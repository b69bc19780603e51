r"""Do the cycles help? Each cyclical method against its constant-step counterpart, one Holm family per report.

For every target, budget and metric, and each pair (cSGLD against SGLD, cSGLD x4 against SGLD x4), both at their
tuned settings of that budget, the evaluation seeds give paired differences metric(cyclical) - metric(constant)
(a seed's runs share their start points and their noise): :func:`csg.evaluation.comparison.compare_paired`,
Holm-corrected across every comparison of the report. Verdicts: helps / hurts where the corrected interval
excludes 0, equivalent where it lies inside the margin, else inconclusive; each with the smallest difference it
had 80 % power to detect.

Margins, absolute and fixed before any method ran: the mode-weight error, :data:`MODE_MARGIN` (two points of
probability mass); W2, :data:`W2_MARGIN` times the target's exact floor (W2 between two exact samples of the same
size: a property of the target and budget, the same for every method). Competence bars, the same for both methods
of a comparison: mode-weight error at most :data:`MODE_BAR` (a tenth of the mass on the wrong modes), W2 at most
:data:`W2_BAR` times the exact floor. Where neither method meets its bar and no difference is found, the verdict is
"both fail", never "equivalent".
"""

from __future__ import annotations

import math

import pandas as pd

from csg.evaluation.comparison import Paired, compare_paired, verdict_frame
from csg.studies.accuracy.multimodal.chains import PAIRS

MODE_MARGIN = 0.02
W2_MARGIN = 0.25
MODE_BAR = 0.1
W2_BAR = 2.0
METRICS = {"mode_error": "mode-weight error", "w2": "W2"}


def _margin(metric: str, floor: float) -> float:
    if metric == "mode_error":
        return MODE_MARGIN
    return W2_MARGIN * floor if math.isfinite(floor) and floor > 0 else math.nan


def _bar(metric: str, floor: float) -> float:
    if metric == "mode_error":
        return MODE_BAR
    return W2_BAR * floor if math.isfinite(floor) and floor > 0 else math.nan


def statement() -> tuple[str, str]:
    """The margins and bars as the report states them (for :func:`csg.evaluation.comparison.method_statement`)."""
    return (f"mode-weight error +-{MODE_MARGIN:g}; W2 +-{W2_MARGIN:g} x the exact floor",
            f"mode-weight error <= {MODE_BAR:g}; W2 <= {W2_BAR:g} x the exact floor")


def verdicts(runs: pd.DataFrame, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """One row per target, budget, metric and pair present in ``runs`` (the evaluation runs, with the "exact"
    rows of the W2 floor), in one Holm family."""
    methods = set(runs.method)
    floor = runs[runs.method == "exact"].groupby(["target", "budget"]).w2.mean()
    rows, comparisons = [], []
    for metric in METRICS:
        for (target, budget), block in runs[runs.method != "exact"].groupby(["target", "budget"], sort=False):
            for method, baseline in PAIRS:
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
