"""The figures: the verdicts over barrier height x budget (the phase diagram), and the curves against budget."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from csg.reporting import atomic_open
from studies.accuracy.multimodal.chains import CONTOUR_PAIRS, PAIRS
from studies.accuracy.multimodal.verdicts import METRICS

COLOURS = {"helps": "#4daf4a", "hurts": "#e41a1c", "equivalent": "#a6cee3", "both fail": "#bdbdbd",
           "inconclusive": "#f0f0f0"}


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    with atomic_open(path) as handle:
        fig.savefig(handle, format="png", dpi=100)
    plt.close(fig)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def phase_diagram(verdicts: pd.DataFrame, labels: dict[str, str], path: Path) -> None:
    """Per pair (columns) and metric (rows): each target (by barrier) x budget cell coloured by the verdict on the
    method against its baseline (the cyclical against its constant-step counterpart, or a pair of the ICSGLD
    paper's samplers), with the difference written in it."""
    plt = _plt()
    from matplotlib.patches import Patch

    order = [t for t in labels if t in set(verdicts.target)]
    budgets = sorted(set(verdicts.budget))
    present = set(zip(verdicts.method, verdicts.baseline))
    pairs = [p for p in PAIRS + CONTOUR_PAIRS if p in present]
    metrics = [m for m in METRICS if m in set(verdicts.metric)]
    fig, axes = plt.subplots(len(metrics), len(pairs), figsize=(4.2 * len(pairs) + 1.5, 0.45 * len(order) * len(metrics) + 1.6),
                             squeeze=False)
    for row, metric in enumerate(metrics):
        for column, (method, baseline) in enumerate(pairs):
            axis = axes[row, column]
            block = verdicts[(verdicts.metric == metric) & (verdicts.method == method)
                             & (verdicts.baseline == baseline)].set_index(["target", "budget"])
            for i, target in enumerate(order):
                for j, budget in enumerate(budgets):
                    if (target, budget) not in block.index:
                        continue
                    cell = block.loc[(target, budget)]
                    axis.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, color=COLOURS[cell.verdict], ec="white"))
                    axis.text(j, i, _signed(cell.difference, 1 if metric == "w2" else 2), ha="center", va="center",
                              fontsize=7)
            axis.set(xlim=(-0.5, len(budgets) - 0.5), ylim=(len(order) - 0.5, -0.5),
                     xticks=range(len(budgets)), xticklabels=[f"{b // 1000}k" for b in budgets],
                     yticks=range(len(order)), title=f"{method} - {baseline}: {METRICS[metric]}",
                     xlabel="gradient evaluations")
            axis.set_yticklabels([labels[t] for t in order] if column == 0 else [], fontsize=8)
            axis.title.set_fontsize(9)
    handles = [Patch(color=colour, label=name) for name, colour in COLOURS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=len(COLOURS), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    _save(fig, path)


def _signed(value: float, digits: int) -> str:
    """A cell's difference: ``digits`` decimals, or one significant digit where those would round it to 0 (a helps
    or hurts inside the margin must not read +0.00)."""
    if value != 0 and abs(value) < 0.5 * 10.0**-digits:
        return f"{value:+.1g}"
    return f"{value:+.{digits}f}"


def curves(summary: pd.DataFrame, labels: dict[str, str], path: Path) -> None:
    """Per target: each method's mode-weight error (mean +- s.e. over the evaluation seeds) against the budget, and
    the ceiling of its M perfect picks (dotted)."""
    plt = _plt()
    order = [t for t in labels if t in set(summary.target)]
    columns = min(4, len(order))
    rows = math.ceil(len(order) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.0 * rows), squeeze=False)
    methods = [m for m in dict.fromkeys(summary.method) if m != "exact"]
    colours = {m: f"C{i}" for i, m in enumerate(methods)}
    for index, target in enumerate(order):
        axis = axes[index // columns, index % columns]
        block = summary[summary.target == target]
        for method in methods:
            mine = block[block.method == method].sort_values("budget")
            style = "-" if method.startswith("c") else "--"
            axis.errorbar(mine.budget, mine.mode_error, yerr=mine.mode_error_se, fmt=style, marker=".",
                          color=colours[method], label=method, capsize=2)
            axis.plot(mine.budget, mine.ceiling, ":", color=colours[method], alpha=0.8)
        axis.set(xscale="log", yscale="log", title=labels[target], xlabel="gradient evaluations")
        axis.title.set_fontsize(9)
        if index % columns == 0:
            axis.set_ylabel("mode-weight error")
    for index in range(len(order), rows * columns):
        axes[index // columns, index % columns].axis("off")
    handles, names = axes[0, 0].get_legend_handles_labels()
    spare = axes[-1, -1] if len(order) < rows * columns else axes[0, 0]
    spare.legend(handles, names, fontsize=8, loc="center", title="dotted: the ceiling of M picks", title_fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def barrier_label(barriers: pd.DataFrame, target: str) -> str:
    """``barrier16``: "two modes, 16.0 nats"; the grids: their range of escape barriers."""
    block = barriers[barriers.target == target].barrier
    if target.startswith("barrier"):
        return f"two modes, {block.min():.1f} nats"
    low, high = np.nanmin(block), np.nanmax(block)
    name = {"mog25": "paper's grid", "wang25": "Wang's grid"}.get(target, target)
    return f"{name}, {low:.0f}" + (f"-{high:.0f} nats" if not math.isclose(low, high, abs_tol=0.5) else " nats")
