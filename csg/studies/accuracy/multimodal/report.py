"""``results/csgmcmc/accuracy_multimodal.{md,csv,png}`` (and ``accuracy_multimodal_runs.csv``, per chain)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from csg.studies.accuracy.multimodal import chains, study
from csg.io.atomic import atomic_open, atomic_write_text
from csg.evaluation.comparison import detectable_difference, method_statement, tally

LABELS = {"mode_error": "mode-weight error", "mmd": "MMD", "w2": "W2", "predictive_tv": "predictive TV"}
ORDER = [m.name for m in chains.METHODS] + ["exact"]
WHAT = {"mixture2d": "2-D mixture, 5 modes (weights 0.35-0.08, variances 0.15-0.5)",
        "mixture10d": "10-D mixture, 5 modes (weights 0.3-0.1, variances 0.3-1)",
        "network": "1-2-1 tanh network, 45 points, 7 parameters (ordered, sign-fixed units)"}


def _cell(mean: float, se: float, digits: int = 3) -> str:
    if not math.isfinite(mean):
        return "-"
    return f"{mean:.{digits}f} +- {se:.{digits}f}" if math.isfinite(se) else f"{mean:.{digits}f}"


def final_table(runs: pd.DataFrame, target: str) -> list[str]:
    """Per metric, each method at its best step (full budget): mean +- s.e. over seeds."""
    block = runs[(runs.target == target) & (runs.budget_share == runs.budget_share.max())]
    present = [m for m in ORDER if m in set(block.method)]
    lines = ["| metric | " + " | ".join(present) + " |", "|---|" + "---:|" * len(present)]
    for metric in study.METRICS:
        if block[metric].isna().all():
            continue
        best = study.best_steps(runs, metric)
        cells = []
        for method in present:
            rows = block[block.method == method] if method == "exact" else \
                block[(block.method == method) & (block.step == best.get((target, method), math.nan))]
            cells.append(_cell(rows[metric].mean(), rows[metric].sem()))
        lines.append(f"| {LABELS[metric]} | " + " | ".join(cells) + " |")
    return lines


def _reference_lines(references: Path) -> list[str]:
    path = references / f"{study.REFERENCE}.json"
    if not path.exists():
        return []
    s = json.loads(path.read_text())
    nuts, pt = s["nuts"], s["tempering"]
    return [
        "## The network's reference",
        "",
        f"NumPyro NUTS, {nuts['chains']} chains from prior draws x ({nuts['warmup']} warm-up + {nuts['samples']} draws), "
        f"{nuts['gradient_evaluations']:,} gradients, {nuts['seconds']:.0f} s, {nuts['divergences']} divergences; the chains "
        f"cross between the modes and are pooled. Checked (`make reference-multimodal` refuses a reference that fails any):",
        "",
        "| check | NUTS | parallel tempering | allowed |",
        "|---|---:|---:|---|",
        f"| R-hat across independent chains / runs (parameters and mode indicators), max | {nuts['rhat_max']:.4f} | "
        f"{pt['rhat_max']:.4f} | NUTS < 1.01; tempering < 1.1 |",
        f"| ESS bulk / tail, min | {nuts['ess_bulk_min']:.0f} / {nuts['ess_tail_min']:.0f} | {pt['ess_bulk_min']:.0f} / "
        f"{pt['ess_tail_min']:.0f} | NUTS >= 400; tempering >= 100 |",
        f"| mode weights | {', '.join(_cell(w, e) for w, e in zip(s['weights'], s['weights_se']))} | "
        f"{', '.join(_cell(w, e) for w, e in zip(pt['weights'], pt['weights_se']))} | within 3 s.e. + 0.01 |",
        f"| predictive TV between the two | | {pt['predictive_tv']:.4f} | < 0.02 |",
        "",
        f"Parallel tempering: {pt['runs']} independent runs of {pt['temperatures']} MALA chains, T from 1 to "
        f"{pt['max_temperature']:g}, {pt['warmup']} + {pt['samples']} iterations, {pt['seconds']:.0f} s: the check, whose "
        "cold chain switches modes more slowly than NUTS, so its weights carry larger standard errors (from the spread "
        "over its runs). Modes: 4 k-means regions of the NUTS draws (csg/studies/accuracy/multimodal/reference.py).",
        "",
    ]


def markdown(result: study.Study, verdicts: pd.DataFrame, references: Path,
             leaders: pd.DataFrame | None = None) -> str:
    runs, protocol = result.runs, result.protocol
    leaders = study.leaders(runs) if leaders is None else leaders
    seeds = sorted(runs.seed.unique())
    timing = f"; {result.seconds / 60:.1f} min on CPU (2 cores)" if math.isfinite(result.seconds) else ""
    budget = int(runs[runs.method != "exact"].gradient_evaluations.max())
    lines = [
        "# Do cycles pay on multimodal posteriors? Sampling accuracy against exact and tempered references",
        "",
        f"Budget: {budget:,} gradient evaluations per method, seed and step size (one chain of {budget:,} iterations, "
        f"or 4 of {budget // 4:,}); seeds {', '.join(map(str, seeds))}; step sizes h = {', '.join(f'{f:.3g}' for f in protocol.factors)} "
        f"/ L (L: the largest Hessian eigenvalue at the modes){timing}. Command: `make accuracy-multimodal` "
        "(`make reference-multimodal` rebuilds the network's reference; `make accuracy-multimodal-report` rewrites "
        "this file from accuracy_multimodal_runs.csv). Every number: mean +- standard error over the seeds.",
        "",
        "Methods: SGLD and SGHMC at a constant step h (10% burn-in); cSGLD and cSGHMC with the cosine schedule from "
        f"2 h (the same mean step), {protocol.cycles_per_budget} cycles per budget (8 per chain of the 4-chain "
        f"versions), exploration {protocol.explore:g} of each cycle without noise, draws from the sampling stages; "
        "x4: 4 parallel chains sharing the budget; reSGLD x4: replicas at T = 1, 2, 4, 8 swapping after every step, "
        "draws of T = 1; CSGLD and ICSGLD x4 (4 chains, one shared theta): 50 energy partitions, zeta 0.75, draws "
        f"weighted by theta(J)^zeta. SGHMC: momentum {protocol.momentum}, lr = h (1 - momentum). Full-batch gradients; "
        f"one draw every {protocol.thin} iterations of a chain; every chain of a seed starts at the same points, "
        "N(0, 9 I) for the mixtures, the prior for the network.",
        "",
        "Metrics: **mode-weight error**, (1/2) sum |estimated - true mode weight| (mixtures: the mean responsibility "
        "of each component, exact in expectation; network: the share of draws in each mode's region); **MMD** "
        "(Gaussian kernel, median-distance bandwidth, to 1000 reference draws; the network's parameters in units of "
        "their reference sd); **W2**, exact between 300 draws and 300 reference draws; **predictive TV** (network), "
        "the mean over 29 inputs of the total variation between the predictive densities of y. The row **exact**: "
        "independent exact draws, as many as a constant-step chain keeps: the floor at this sample size.",
        "",
        *_reference_lines(references),
        "## Verdicts: do the cycles help?",
        "",
        "Each cyclical method against its constant-step counterpart, each at its best step of the grid (smallest "
        "mean of that metric at the full budget), paired by seed: difference = metric(cyclical) - metric(baseline), "
        "mean +- s.e. over the seeds. " + method_statement(margin=f"+-{100 * study.MARGIN:g} % of the baseline's "
                                                          "excess over the exact row, same target and metric") +
        f" One family: the {len(verdicts)} comparisons of this table (the best-method comparisons below are a "
        "second). Each method's best step is chosen on the "
        "same seeds its comparison is judged on, a selection effect that the intervals do not account for.",
        "",
        "| target | metric | cyclical | baseline | steps (cyclical / baseline) | difference | corrected interval "
        "| margin | detectable (x excess over exact) | verdict |",
        "|---|---|---|---|---|---:|---:|---:|---:|---|",
    ]
    for _, row in verdicts.iterrows():
        lines.append(f"| {row.target} | {LABELS[row.metric]} | {row.method} | {row.baseline} | {row.method_step:.3g} / "
                     f"{row.baseline_step:.3g} | {_cell(row.difference, row.se)} | {_interval(row)} | "
                     f"{_number(row.margin)} | {_detectable(row)} | {row.verdict} |")
    lines += ["", *_summary_lines(verdicts), *_edge_lines(runs), "", *_leader_lines(leaders), ""]
    for target in dict.fromkeys(runs.target):
        grid = ", ".join(f"{h:.3g}" for h in sorted(runs[(runs.target == target) & (runs.method != "exact")].step.unique()))
        lines += [f"## {target}: {WHAT.get(target, target)}", "", f"Step grid h: {grid}. Each method at its best step "
                  "for that metric, at the full budget:", "", *final_table(runs, target), ""]
    lines += ["![metrics against gradient evaluations](accuracy_multimodal.png)", ""]
    return "\n".join(lines)


def _number(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if math.isfinite(value) else "-"


def _interval(row: pd.Series, digits: int = 3) -> str:
    if not (math.isfinite(row.low) and math.isfinite(row.high)):
        return "-"
    return f"[{row.low:+.{digits}f}, {row.high:+.{digits}f}]"


def _detectable(row: pd.Series) -> str:
    if not math.isfinite(row.detectable):
        return "-"
    share = f" ({row.detectable_share:.2f} x)" if math.isfinite(row.detectable_share) else ""
    return f"{row.detectable:.3g}{share}"


def _summary_lines(verdicts: pd.DataFrame) -> list[str]:
    """The counts of the verdicts per target and in all, and the smallest difference the comparisons could find."""
    if verdicts.empty:
        return []
    lines = []
    for target, block in verdicts.groupby("target", sort=False):
        lines.append(f"- **{target}**: {len(block)} comparisons ({block.method.nunique()} pairs x "
                     f"{block.metric.nunique()} metrics): {tally(block.itertuples())}.")
    shares = verdicts.detectable_share.dropna()
    lines.append(f"- **all {len(verdicts)}**, one Holm family: {tally(verdicts.itertuples())}.")
    if len(shares):
        lines.append(f"- The smallest difference these comparisons could detect (80 % power at their corrected "
                     f"level) is, in median, {shares.median():.2f} x the baseline's excess over the exact row "
                     f"({shares.min():.2f} to {shares.max():.2f} x; {_uncorrected(verdicts):.2f} x at an "
                     f"uncorrected 5 % level; the margin is {study.MARGIN:g} x)" +
                     (": in the median comparison, only a difference larger than the whole room the baseline leaves "
                      "above exact sampling would register" if shares.median() > 1 else "") +
                     ". 'Inconclusive' is not 'no difference'.")
    return lines


def _uncorrected(verdicts: pd.DataFrame) -> float:
    """The median detectable difference of the comparisons, had each been tested alone at 5 %, x the excess."""
    shares = [detectable_difference(row.se * math.sqrt(row.seeds), int(row.seeds), 0.05) / row.baseline_excess
              for row in verdicts.itertuples() if row.baseline_excess > 0 and row.seeds > 1]
    return float(pd.Series(shares, dtype=float).median())


def _leader_lines(leaders: pd.DataFrame) -> list[str]:
    """Which method is best per target and metric: the lowest mean against every other (:func:`study.leaders`)."""
    if leaders.empty:
        return []
    lines = ["## Which method is best?", "",
             "Per target and metric, the method with the lowest mean (each at its best step, full budget) against "
             "each other method, paired by seed, difference = leader - other: a second Holm family, of all "
             f"{len(leaders)} such comparisons of this report ({tally(leaders.itertuples())}). A method is called best "
             "only where it helps against every other; otherwise the list names the methods it is not separated "
             "from, and the closest of them (difference and corrected interval).", ""]
    for (target, metric), block in leaders.groupby(["target", "metric"], sort=False):
        leader = block.method.iloc[0]
        head = f"- {target}, {LABELS[metric]}: lowest mean {leader} ({block.method_mean.iloc[0]:.3f})"
        apart = block[block.verdict != "helps"]
        if apart.empty:
            lines.append(f"{head}: **best**, it helps against all {len(block)} others.")
            continue
        closest = apart.loc[apart.difference.abs().idxmin()]
        beaten = block[block.verdict == "helps"].baseline
        lines.append(f"{head}: not separated from {len(apart)} of the {len(block)} others ({', '.join(apart.baseline)}); "
                     f"closest {closest.baseline} ({closest.baseline_mean:.3f}), difference {closest.difference:+.3f} "
                     f"{_interval(closest)}" + (f"; lower than {', '.join(beaten)}" if len(beaten) else "") + ".")
    return lines


def _edge_lines(runs: pd.DataFrame) -> list[str]:
    """Where the best step of the mode-weight error is the grid's largest: a larger one might do better."""
    lines = []
    best = study.best_steps(runs, "mode_error")
    for target in dict.fromkeys(runs.target):
        largest = runs[(runs.target == target) & (runs.method != "exact")].step.max()
        edge = [m for (t, m), h in best.items() if t == target and math.isclose(h, largest)]
        if edge:
            lines.append(f"- {target}: the best step (mode-weight error) of {', '.join(edge)} is the grid's largest "
                         f"({largest:.3g}); a larger one might do better.")
    return lines


def figure(runs: pd.DataFrame, path: Path) -> None:
    """Per target (columns) and metric (rows): each method at its best step against gradient evaluations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    targets = list(dict.fromkeys(runs.target))
    shown = [m for m in ("mode_error", "mmd", "predictive_tv") if runs[m].notna().any()]
    fig, axes = plt.subplots(len(shown), len(targets), figsize=(4.6 * len(targets), 3.2 * len(shown)), squeeze=False)
    colours = {m.name: f"C{i}" for i, m in enumerate(chains.METHODS)}
    for column, target in enumerate(targets):
        block = runs[runs.target == target]
        for row, metric in enumerate(shown):
            axis = axes[row, column]
            if block[metric].isna().all():
                axis.axis("off")
                continue
            best = study.best_steps(runs, metric)
            for method in ORDER:
                if method == "exact":
                    curve = block[block.method == "exact"].groupby("gradient_evaluations")[metric].mean()
                    axis.plot(curve.index, curve.values, "k:", label="exact")
                    continue
                if (target, method) not in best:
                    continue
                mine = block[(block.method == method) & (block.step == best[(target, method)])]
                curve = mine.groupby("gradient_evaluations")[metric].mean()
                style = "-" if method.startswith("c") else ("--" if method.endswith("x4") else "-.")
                axis.plot(curve.index, curve.values, style, color=colours[method], marker=".", label=method)
            axis.set(xscale="log", yscale="log", title=f"{target}: {LABELS[metric]}", xlabel="gradient evaluations")
            axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0, 0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    with atomic_open(path) as handle:
        fig.savefig(handle, format="png", dpi=100)
    plt.close(fig)


def write(result: study.Study, out: Path, references: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    verdicts, leaders = study.verdicts(result.runs), study.leaders(result.runs)
    runs = result.runs.assign(study_seconds=result.seconds) if math.isfinite(result.seconds) else result.runs
    atomic_write_text(out / "accuracy_multimodal_runs.csv", runs.to_csv(index=False))  # --report-only reads it back
    summary = study.summarise(result.runs)
    atomic_write_text(out / "accuracy_multimodal.csv", summary.to_csv(index=False))
    both = pd.concat([verdicts.assign(family="cycles"), leaders.assign(family="best")], ignore_index=True)
    atomic_write_text(out / "accuracy_multimodal_verdicts.csv", both.to_csv(index=False))
    atomic_write_text(out / "accuracy_multimodal.md", markdown(result, verdicts, references, leaders))
    figure(result.runs, out / "accuracy_multimodal.png")
    return out / "accuracy_multimodal.md"
