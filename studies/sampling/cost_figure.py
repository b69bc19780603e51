"""Fidelity against cost in the sampling study: its figure, and the sentence of which budget meets the bar first."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

__all__ = ["figure", "nuts_cost", "reached"]

CURVE = ("cSGHMC", "csg-tune's pick", "SGHMC", "cSGHMC x4", "deep ensemble x5")
METRICS = (("tv", "TV to NUTS's predictive"), ("mi_ratio", "MI / as many exact draws'"),
           ("member_tv_ratio", "member TV / an exact draw's"))


def nuts_cost(temperature: float) -> int:
    """NUTS's own full-batch gradient count for the reference at ``temperature``, warm-up included."""
    from csg.paths import ROOT

    facts = json.loads((ROOT / "results" / "benchmark" / "reference" / "reference_network.json").read_text())
    entry = facts[f"{temperature:g}"]
    return int(entry["gradient_evaluations_warmup"] + entry["gradient_evaluations_sampling"])


def _means(runs: pd.DataFrame) -> pd.DataFrame:
    return runs.groupby(["temperature", "method", "budget_epochs"], sort=False)[
        ["members", "tv", "mi_ratio", "member_tv_ratio"]].mean().reset_index()


def reached(runs: pd.DataFrame, nuts: pd.DataFrame, meets, expected) -> list[str]:
    """Per temperature: every budget at which a csg method meets the bar (``meets``) at every seed, with its TV
    beside the expected TV of as many exact draws (``expected(T, members)``), or that none does within the largest
    budget run; beside NUTS's count (its points: means over its four chains)."""
    lines = []
    runs = runs[runs.method.isin(CURVE)].assign(ok=lambda f: f.apply(meets, axis=1))
    for temperature, block in runs.groupby("temperature", sort=False):
        cells = block.groupby(["method", "budget_epochs"], sort=True).agg(
            ok=("ok", "all"), some=("ok", "sum"), n=("ok", "size"), tv=("tv", "mean"), members=("members", "mean"),
            tc=("configurational", "mean"))
        met = cells[cells.ok]
        partly = cells[~cells.ok & (cells.some > 0)]
        exact = nuts[(nuts.temperature == temperature) & nuts.apply(meets, axis=1)]
        said = ("at every seed the spread bar is met by " + ", ".join(
            f"{method} at {int(budget):,} epochs (TV {r.tv:.4f}; {int(r.members)} exact draws: "
            f"{expected(temperature, r.members)}; configurational temperature {r.tc / temperature:.2f} T)"
            for (method, budget), r in met.iterrows())
            if len(met) else f"no csg method meets the spread bar at every seed within "
                             f"{int(block.budget_epochs.max()):,} epochs")
        said += ("; at some seeds only: " + ", ".join(f"{method} at {int(budget):,} ({int(r.some)} of {int(r.n)})"
                                                      for (method, budget), r in partly.iterrows())) if len(partly) else ""
        nuts_said = (f"NUTS meets it from {int(exact.members.min())} draws of one chain ({exact.epochs.min():,.0f} "
                     "full-batch gradients, its warm-up included)" if len(exact) else "NUTS's draws do not meet it")
        lines.append(f"- **T = {temperature:g}**: {said}; {nuts_said}; the whole reference took "
                     f"{nuts_cost(temperature):,}.")
    return lines


def figure(runs: pd.DataFrame, nuts: pd.DataFrame, path: Path, mi_target: float, grid_cost: float = 0) -> None:
    """TV, MI ratio and member TV ratio against cost, one row per temperature, NUTS's points beside csg's curves;
    ``grid_cost``: the epochs csg-tune's grid spent, drawn as the pick's curve moved right by them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from csg.reporting import atomic_open

    means = _means(runs[runs.method.isin(CURVE)])
    temperatures = list(dict.fromkeys(means.temperature))
    fig, axes = plt.subplots(len(temperatures), 3, figsize=(13, 3.6 * len(temperatures)), squeeze=False)
    for row, temperature in enumerate(temperatures):
        here, exact = means[means.temperature == temperature], nuts[nuts.temperature == temperature]
        for column, (metric, label) in enumerate(METRICS):
            axis = axes[row][column]
            for method, block in here.groupby("method", sort=False):
                axis.plot(block.budget_epochs, block[metric], marker="o", label=method)
                if method == "csg-tune's pick" and grid_cost:
                    axis.plot(block.budget_epochs + grid_cost, block[metric], marker="o", linestyle="--",
                              color=axis.lines[-1].get_color(), alpha=0.5, label="csg-tune's pick, its grid counted")
            axis.plot(exact.epochs, exact[metric], marker="s", color="black", label="NUTS, k draws of one chain")
            axis.axvline(nuts_cost(temperature), color="grey", linestyle=":", label="NUTS's whole reference")
            if metric == "mi_ratio":
                axis.axhline(mi_target, color="grey", linestyle="--")
            if metric == "member_tv_ratio":
                axis.axhspan(0.75, 1.25, color="grey", alpha=0.15)
            axis.set_xscale("log")
            axis.set_xlabel("full-data gradient evaluations (epochs over all chains)")
            axis.set_ylabel(label)
            axis.set_title(f"T = {temperature:g}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_open(path) as handle:
        fig.savefig(handle, format="png", dpi=100)
    plt.close(fig)
