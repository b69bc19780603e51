"""``results/csgmcmc/accuracy.{csv,md,png}``: the samplers' distance to the reference posteriors."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from studies.accuracy import chains
from studies.accuracy.reference import Reference
from studies.accuracy.study import Study, leaders, primary_metric, verdicts
from csg.reporting import markdown_table, write_text
from csg.evaluation.comparison import interval_text, method_statement, tally

COLUMNS = [  # (summary column, header, digits)
    ("factor", "step x Table 5", 3), ("lr0", "first step", 3), ("w2", "W2", 3), ("mean_error_max", "mean error, max", 2),
    ("mean_error_median", "mean error, median", 3), ("mean_error_floor", "exact sampler's median error", 3),
    ("sd_ratio_median", "sd ratio, median", 3), ("agreement", "agreement", 3), ("tv", "TV", 4), ("ess", "ESS", 0),
    ("ess_per_1000", "ESS / 1000 gradients", 1),
]


def _cell(row: pd.Series, column: str, digits: int) -> str:
    value = row[column]
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    error = row.get(f"{column}_se")
    text = f"{value:.{digits}f}"
    if error is not None and isinstance(error, float) and math.isfinite(error) and column not in ("factor", "lr0"):
        text += f" +- {error:.{digits}f}"
    return text


def _reference_table(references: Path, targets: list[str]) -> list[str]:
    rows = []
    for name in targets:
        ref = Reference.load(references / f"{name}.json")
        t, s = ref.target, ref.settings
        parameters = len(ref.mean) if ref.mean else "-"
        rows.append([name, f"{t['data']} ({ref.data_source})", ref.num_data, parameters,
                     f"N(0, {t['prior_variance']:g} I)", f"{s['chains']} x {s['samples']} after {s['warmup']}",
                     ref.checked_on, f"{ref.rhat_max:.4f}", f"{ref.ess_bulk_min:.0f} / {ref.ess_tail_min:.0f}",
                     ref.divergences, f"{ref.gradient_evaluations:,}", f"{ref.seconds:.0f}"])
    return markdown_table(["target", "data", "N", "parameters", "prior", "NUTS draws", "checked on", "R-hat, max",
                           "ESS bulk / tail, min", "divergences", "gradients", "seconds"], rows,
                          align="llrrlrlrrrrr")


def _interval(row: pd.Series) -> str:
    if not (math.isfinite(row.low) and math.isfinite(row.high)):
        return "no interval"
    return interval_text(row.low, row.high)


def _leader_line(block: pd.DataFrame, steps: int) -> str:
    """One target, protocol and metric of :func:`~studies.accuracy.study.leaders`: best, or whom it is not separated from."""
    first = block.iloc[0]
    what = (f"lowest mean {first.metric} (every method takes {steps} full-batch gradients)" if first.lower_is_better
            else "highest ESS per 1000 gradients")
    value = f"{first.method_mean:.3g}" if first.lower_is_better else f"{first.method_mean:.1f}"
    head = f"- {first.target}, {first.protocol}: {what}: {first.method} ({value})"
    apart = block[block.verdict != "helps"]
    if apart.empty:
        return f"{head}: **best**, it helps against all {len(block)} others."
    closest = apart.loc[apart.difference.abs().idxmin()]
    beaten = block[block.verdict == "helps"].baseline
    return (f"{head}: not separated from {len(apart)} of the {len(block)} others ({', '.join(apart.baseline)}); "
            f"closest {closest.baseline}, difference {closest.difference:+.3g} {_interval(closest)}"
            + (f"; ahead of {', '.join(beaten)}" if len(beaten) else "") + ".")


def _cycles_line(row: pd.Series) -> str:
    relative = f", {row.detectable_relative:.2f} x {row.baseline}'s" if math.isfinite(row.detectable_relative) else ""
    same = f" (the same comparison as {row.same_as}'s, counted once)" if row.same_as else ""
    statistics = (f" +- {row.se:.2g}, simultaneous interval {_interval(row)}, detectable {row.detectable:.2g}{relative}"
                  if math.isfinite(row.se) else f" ({row.seeds} seed, no interval)")
    return (f"- {row.target}, {row.protocol}: {row.metric}({row.method}) - {row.metric}({row.baseline}) = "
            f"{row.difference:+.3g}{statistics} (paired by seed){same}: {row.verdict}.")


def _distinct(frame: pd.DataFrame) -> pd.DataFrame:
    """The comparisons of a family counted once (a repeat under the other protocol left out)."""
    return frame[frame.same_as == ""] if len(frame) else frame


def _verdict_lines(cycles: pd.DataFrame, best: pd.DataFrame) -> list[str]:
    """How the verdicts below were reached, the two families, their counts and what they could detect."""
    distinct, best = _distinct(cycles), _distinct(best)
    lines = [method_statement() + " The study has an exact sampler's value only for the median mean error "
             "(0.674 / sqrt(ESS), the column above), not for W2 or the predictive TV, the distances compared, nor for "
             "the ESS: hence no margin. Two families: the cycles against their decreasing-step counterparts "
             f"({len(distinct)} distinct comparisons: {tally(distinct.itertuples())}), and the most accurate method and "
             "the highest ESS per gradient of each target and protocol against every other "
             f"({len(best)} distinct comparisons: {tally(best.itertuples())}); a "
             "comparison both protocols share (where the tuned steps are Table 5's) is counted once. The tuned "
             "steps are chosen on the same seeds they are judged on: a selection effect the intervals do not "
             "account for."]
    parts = []
    for target, block in distinct.groupby("target", sort=False):
        detectable, relative = block.detectable.median(), block.detectable_relative.median()
        if math.isfinite(detectable):
            parts.append(f"{target} {detectable:.2g} in {block.metric.iloc[0]}"
                         + (f" ({relative:.2f} x the baseline's own)" if math.isfinite(relative) else ""))
    if parts:
        lines.append("The smallest difference the cycles' comparisons could detect (80 % power at the family's "
                     "level), in median: " + "; ".join(parts) + ".")
    return [" ".join(lines)]


def _findings(result: Study) -> list[str]:
    """The most accurate method per target and protocol, and whether the cycles help (paired by seed): the verdicts
    of :func:`~studies.accuracy.study.verdicts` and :func:`~studies.accuracy.study.leaders`."""
    summary, lines = result.summary, []
    cycles, best = verdicts(result.runs, summary), leaders(result.runs, summary)
    steps = int(result.runs.steps.max())
    if len(cycles) or len(best):
        lines += [*_verdict_lines(cycles, best), ""]
    for target in summary.target.unique():
        for protocol in ("Table 5", "tuned"):
            if len(best):
                for _, block in best[(best.target == target) & (best.protocol == protocol)].groupby("metric", sort=False):
                    lines.append(_leader_line(block, steps))
        tuned = summary[(summary.target == target) & (summary.protocol == "tuned")].set_index("method").factor.to_dict()
        largest = result.runs.factor.max()
        at_edge = sorted(method for method, factor in tuned.items() if factor == largest)
        if at_edge:
            lines.append(f"- {target}: the tuned step of {', '.join(at_edge)} is the largest of the grid ({largest:g} x); "
                         "a larger one might be more accurate still (at 2 x, cyclical and decreasing schedules start at "
                         "the full-batch stability limit 2 / L).")
        if len(cycles):
            for _, row in cycles[cycles.target == target].iterrows():
                if math.isfinite(row.difference):
                    lines.append(_cycles_line(row))
    return lines


def markdown(result: Study, references: Path, scale: str) -> str:
    runs, summary = result.runs, result.summary
    targets = list(dict.fromkeys(runs.target))
    seeds = sorted(runs.seed.unique())
    steps = "6000 iterations (1000 burn-in, 5000 draws)" if scale == "full" else "600 iterations (100 burn-in, 500 draws)"
    factors = ", ".join(f"{f:g}" for f in sorted(runs.factor.unique()))
    timing = f"; {result.seconds / 60:.1f} min on CPU" if math.isfinite(result.seconds) else ""
    lines = [
        "# Sampling accuracy against reference posteriors",
        "",
        f"Scale: {scale} ({steps}, full-batch, the Table 5 presets); seeds {', '.join(map(str, seeds))}; step factors "
        f"{factors} x the Table 5 schedule{timing}. Commands: `make reference` (NUTS), `make accuracy`. "
        f"Every number: mean +- standard error over the seeds. Per-chain values: accuracy_runs.csv.",
        "",
        "Protocols: **Table 5**, the schedules of [table5.md](table5.md) as they are (step factor 1); **tuned**, per "
        "method the step factor with the smallest mean distance to the reference (W2 for logistic regression, TV "
        "for the network): an oracle choice, the best each method can do at this budget.",
        "",
        "## The references (NumPyro NUTS)",
        "",
        *_reference_table(references, targets),
        "",
        "Metrics (Izmailov et al. 2021): **W2**, the 2-Wasserstein distance between Gaussian fits of the draws and "
        "the reference; **mean error**, |mean - reference mean| / reference sd per coordinate, with the median an "
        "exact sampler with the same ESS would show (0.674 / sqrt(ESS)) beside it; **sd ratio**, sd / reference sd "
        "(1 is exact); **agreement** and **TV**, the share of rows whose predicted class agrees with the reference's "
        "and the mean total variation between the predictive distributions on the evaluation rows (Table 5's data, "
        "in-sample); **ESS** (ArviZ, method mean, as Table 5), the median over parameters (logistic regression) or "
        "over the rows' p(y = 1 | x) (the network, whose parameters are not identified: its hidden units can be "
        "permuted, so its parameter-space metrics are left out).",
    ]
    for target in targets:
        block = summary[summary.target == target]
        shown = [c for c in COLUMNS if block[c[0]].notna().any()]
        rows = []
        for _, row in block.sort_values(["protocol", "method"], key=_order).iterrows():
            flag = f" ({int(row.diverged)} diverged)" if row.diverged else ""
            rows.append([f"{row.method}{flag}", row.protocol, *(_cell(row, c, d) for c, _, d in shown)])
        lines += ["", f"## {target}", "", *markdown_table(["method", "protocol", *(h for _, h, _ in shown)], rows,
                                                          align="ll" + "r" * len(shown))]
    lines += ["", "## Findings", "", *_findings(result), "", "![distance and ESS against step size](accuracy.png)", ""]
    return "\n".join(lines)


def _order(values: pd.Series) -> pd.Series:
    ranks = {name: i for i, name in enumerate(["Table 5", "tuned", *chains.METHODS])}
    return values.map(lambda v: ranks.get(v, 99))


def figure(runs: pd.DataFrame, path: Path) -> None:
    """Per target: the distance to the reference (top) and ESS per 1000 gradients (bottom) against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    targets = list(dict.fromkeys(runs.target))
    fig, axes = plt.subplots(2, len(targets), figsize=(4.2 * len(targets), 6.4), squeeze=False)
    for column, target in enumerate(targets):
        metric = primary_metric(target)
        block = runs[runs.target == target].groupby(["method", "factor"])[[metric, "ess_per_1000"]].mean()
        for method in chains.METHODS:
            if method not in block.index.get_level_values(0):
                continue
            curve = block.loc[method]
            style = "-" if method.startswith("c") else ("--" if "constant" in method else ":")
            color = "C3" if "SGHMC" in method else "C0"  # colour: the update; line: the schedule
            for row, key in enumerate((metric, "ess_per_1000")):
                axes[row, column].plot(curve.index, curve[key], style, color=color, marker="o", label=method)
        axes[0, column].set(title=target, xscale="log", yscale="log", ylabel="W2" if metric == "w2" else "predictive TV")
        axes[1, column].set(xscale="log", xlabel="step size / Table 5's", ylabel="ESS per 1000 gradients")
        factors = sorted(runs.factor.unique())
        for axis in axes[:, column]:
            axis.set_xticks(factors, [f"{f:g}" for f in factors])
            axis.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    from csg.reporting import atomic_open

    with atomic_open(path) as handle:
        fig.savefig(handle, format=path.suffix.lstrip("."), dpi=110)
    plt.close(fig)


def write(result: Study, out: Path, references: Path, scale: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "accuracy_runs.csv", result.runs.to_csv(index=False))
    write_text(out / "accuracy.csv", result.summary.to_csv(index=False))
    both = pd.concat([verdicts(result.runs, result.summary).assign(family="cycles"),
                      leaders(result.runs, result.summary).assign(family="best")], ignore_index=True)
    write_text(out / "accuracy_verdicts.csv", both.to_csv(index=False))
    write_text(out / "accuracy.md", markdown(result, references, scale))
    figure(result.runs, out / "accuracy.png")
