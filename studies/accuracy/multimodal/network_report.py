"""The network's part of the multimodal report (:mod:`studies.accuracy.multimodal.report`): its burn-in, its
reference, its arrival table; and the marks every verdict table uses for a mean that fails the bar.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from csg.evaluation.comparison import interval_text, tally
from csg.reporting import markdown_table
from studies.accuracy.multimodal import study, tuning, verdicts

NETWORK = Path("reference") / "network_multimodal.json"


def miss_mark(meets) -> str:
    return " (miss)" if meets is False or meets == "False" else ""


def compared_cells(row) -> list[str]:
    """``[mean (miss), mean, difference, interval]``: the cells every verdict table of the report shares."""
    return [f"{row.method_mean:.3f}{miss_mark(row.method_meets)}",
            f"{row.baseline_mean:.3f}{miss_mark(row.baseline_meets)}", f"{row.difference:+.3f}",
            interval_text(row.low, row.high, '+.3f')]


def within_margin(row) -> bool:
    """A helps or hurts whose difference is smaller than its margin: found, and negligible by the margin's own
    standard."""
    return row.verdict in ("helps", "hurts") and math.isfinite(row.margin) and abs(row.difference) < row.margin


def verdict_mark(row) -> str:
    both_miss = miss_mark(row.method_meets) and miss_mark(row.baseline_meets)
    mark = f"{row.verdict}*" if both_miss and row.verdict in ("helps", "hurts") else row.verdict
    return mark + (", within the margin" if within_margin(row) else "")


def burnin_lines(burnin: pd.DataFrame | None) -> list[str]:
    if burnin is None or burnin.empty:
        return []
    row = burnin.iloc[0]
    modes = burnin["mode"].value_counts().sort_index()
    return ["### The network's shared burn-in", "",
            f"Every run of a seed starts where that seed's burn-in ended: its 4 box starts (+-2 prior sd) run "
            f"{int(row.iterations):,} iterations of SGLD at h = {tuning.power(float(row.step))} / L (studies/"
            "accuracy/multimodal/study.py, burn_in), and every method of the seed starts from these end points (a "
            "single chain from the first), so the cell asks about hopping between modes, not descent to them; the "
            "burn-in's gradients are no method's. Its length suffices where every end point has arrived (within "
            f"100 nats of the lowest minimum): {int(burnin.arrived.sum())} of {len(burnin)} did (energy above the "
            f"lowest minimum: median {burnin.above.median():.1f} nats, max "
            f"{burnin.above.max():.1f}); their modes: "
            + ", ".join(f"mode {int(m)} {int(c)}" for m, c in modes.items()) + ".", ""]


def network_lines(references: Path, protocol: study.Protocol) -> list[str]:
    path = references / NETWORK.name
    if not path.exists():
        return []
    facts = json.loads(path.read_text())
    if not (facts.get("accepted") and "network" in protocol.targets):
        return ["## The network: not in this study", "", *facts.get("report", []), ""]
    budgets = ", ".join(f"{b:,}" for b in protocol.network_budgets)
    return ["## The network: its reference, and why NUTS and parallel tempering could not give one", "", *facts["report"], "",
            f"The network's runs: budgets {budgets} only (the study's time: a gradient of the network costs about "
            "12 x a 2-D mixture's), started "
            + ("from a shared burn-in (below). " if protocol.network_burnin > 0 else "uniformly on +-2 prior sd. ")
            + "No exact "
            "sampler, so no W2 and no W2 verdicts; its mode-weight errors and ceilings are against the reference's "
            "weights, its core TV against the reference's core shares. A run whose kept iterations reach an energy "
            "100 nats above the lowest minimum (density e^-100 of the mode's, 2 (U - U_min) > 200) counts as a chain "
            "that left the target (error 1), as on the mixtures"
            + (": after the burn-in, one that left its mode's neighbourhood." if protocol.network_burnin > 0 else
               "; here it is mostly one that has not yet arrived: from the box (energies of thousands of nats) some "
               "chains descend slowly, along plateaus where a unit saturates."), ""]


def arrival_lines(runs: pd.DataFrame) -> list[str]:
    """The network's arrival rates, and its mode-weight error on the seeds where both methods arrived."""
    found = verdicts.arrived(runs)
    if found.empty:
        return []
    lines = ["### The network: arrival, and hopping once arrived", "",
             "Where a method's chains have not all arrived (kept iterations within 100 nats of the lowest minimum), "
             "its mode-weight error mixes descent with hopping between modes. Below, each pair's arrival rates over "
             "all evaluation seeds, and the mode-weight error on the seeds where both arrived: families of their own "
             "(the same statistics, bar and margin as above). It conditions on an outcome of the runs, so it describes; "
             "the study's verdicts are those above.", ""]
    lines += markdown_table(["budget", "pair", "arrived (cyclical / constant)", "seeds, both arrived", "cyclical",
                             "constant", "difference", "simultaneous interval", "verdict"],
                            [[f"{row.budget:,}", f"{row.method} - {row.baseline}",
                              f"{row.method_arrived:.2f} / {row.baseline_arrived:.2f}", row.seeds,
                              *compared_cells(row), verdict_mark(row)] for row in found.itertuples()],
                            align="rlrrrrrrl")
    families = found.apply(lambda r: verdicts.family_of(r.method, r.baseline), axis=1)
    counts = "; ".join(f"the {name} pairs' family of {int((families == name).sum())}: "
                       f"{tally(found[families == name].itertuples())}" for name in verdicts.FAMILIES
                       if (families == name).any())
    return lines + ["", f"Holm families of their own, one per family of pairs: {counts}.", ""]
