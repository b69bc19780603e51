"""``results/csgmcmc/accuracy.{csv,md,png}``: the samplers' distance to the reference posteriors."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from csg.accuracy import chains
from csg.accuracy.reference import Reference
from csg.accuracy.study import Study, paired_difference, primary_metric
from csg.atomic import atomic_write_text

CYCLICAL_PAIRS = (("cSGLD", "SGLD"), ("cSGHMC", "SGHMC"))
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
    lines = ["| target | data | N | parameters | prior | NUTS draws | checked on | R-hat, max | ESS bulk / tail, min "
             "| divergences | gradients | seconds |", "|---|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|"]
    for name in targets:
        ref = Reference.load(references / f"{name}.json")
        t, s = ref.target, ref.settings
        parameters = len(ref.mean) if ref.mean else "-"
        lines.append(f"| {name} | {t['data']} ({ref.data_source}) | {ref.num_data} | {parameters} | "
                     f"N(0, {t['prior_variance']:g} I) | {s['chains']} x {s['samples']} after {s['warmup']} | "
                     f"{ref.checked_on} | {ref.rhat_max:.4f} | {ref.ess_bulk_min:.0f} / {ref.ess_tail_min:.0f} | "
                     f"{ref.divergences} | {ref.gradient_evaluations:,} | {ref.seconds:.0f} |")
    return lines


def _findings(result: Study) -> list[str]:
    """The most accurate method per target and protocol, and whether the cycles help (paired by seed)."""
    summary, lines = result.summary, []
    for target in summary.target.unique():
        metric = primary_metric(target)
        for protocol in ("Table 5", "tuned"):
            block = summary[(summary.target == target) & (summary.protocol == protocol)].dropna(subset=[metric])
            if len(block):
                best = block.loc[block[metric].idxmin()]
                ess_best = block.loc[block.ess_per_1000.idxmax()]
                lines.append(f"- {target}, {protocol}: most accurate per gradient evaluation (every method takes "
                             f"{int(result.runs.steps.max())} full-batch gradients): "
                             f"**{best.method}** ({metric} {best[metric]:.3g}); highest ESS per gradient: "
                             f"{ess_best.method} ({ess_best.ess_per_1000:.1f} per 1000).")
        tuned = summary[(summary.target == target) & (summary.protocol == "tuned")].set_index("method").factor.to_dict()
        largest = result.runs.factor.max()
        at_edge = sorted(method for method, factor in tuned.items() if factor == largest)
        if at_edge:
            lines.append(f"- {target}: the tuned step of {', '.join(at_edge)} is the largest of the grid ({largest:g} x); "
                         "a larger one might be more accurate still (at 2 x, cyclical and decreasing schedules start at "
                         "the full-batch stability limit 2 / L).")
        for protocol, factor_of in (("Table 5", {m: 1.0 for m in chains.METHODS}), ("tuned", tuned)):
            for cyclical, plain in CYCLICAL_PAIRS:
                if cyclical not in factor_of or plain not in factor_of:
                    continue
                mean, error = paired_difference(result.runs, target, cyclical, plain, factor_of)
                if not math.isfinite(mean):
                    continue
                verdict = ("no difference within two standard errors" if not math.isfinite(error) or
                           abs(mean) <= 2 * error else ("the cycles help" if mean < 0 else "the cycles hurt"))
                lines.append(f"- {target}, {protocol}: {metric}({cyclical}) - {metric}({plain}) = {mean:+.3g} "
                             f"+- {error:.2g} (paired by seed): {verdict}.")
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
        lines += ["", f"## {target}", "", "| method | protocol | " + " | ".join(h for _, h, _ in shown) + " |",
                  "|---|---|" + "---:|" * len(shown)]
        for _, row in block.sort_values(["protocol", "method"], key=_order).iterrows():
            flag = f" ({int(row.diverged)} diverged)" if row.diverged else ""
            lines.append(f"| {row.method}{flag} | {row.protocol} | " +
                         " | ".join(_cell(row, c, d) for c, _, d in shown) + " |")
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
    from csg.atomic import atomic_open

    with atomic_open(path) as handle:
        fig.savefig(handle, format=path.suffix.lstrip("."), dpi=110)
    plt.close(fig)


def write(result: Study, out: Path, references: Path, scale: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "accuracy_runs.csv", result.runs.to_csv(index=False))
    atomic_write_text(out / "accuracy.csv", result.summary.to_csv(index=False))
    atomic_write_text(out / "accuracy.md", markdown(result, references, scale))
    figure(result.runs, out / "accuracy.png")
