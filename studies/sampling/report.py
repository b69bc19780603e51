"""The report of the sampling study (studies.sampling.study): results/sampling/sampling_study.{md,png} from its
CSVs, with the shared statistics' verdicts (csg.evaluation.comparison) of each arm against its noise-off control."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from csg.evaluation.comparison import Paired, compare_paired, method_statement, tally
from csg.reporting import markdown_table
from studies.sampling.cells import cell, expected_tv

__all__ = ["write_report"]

TV_MARGIN = 0.005  # total variation to NUTS: a difference below it is of no practical weight (about 0.05 x one draw's)
MI_MARGIN = 0.05   # the members' mutual information as a share of the reference's


def _frame(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs = pd.read_csv(out / "sampling_study_runs.csv")
    reference = pd.read_csv(out / "sampling_study_reference.csv").set_index("temperature")
    def at_members(key: str) -> pd.Series:  # the reference's value at the run's member count, where computed
        def one(row):
            column = f"{key}_S{int(row['members'])}" if pd.notna(row.get("members")) else key
            return reference.loc[row["temperature"], column if column in reference.columns else key]
        return runs.apply(one, axis=1)

    runs["mi_ratio"] = runs["mutual_information"] / at_members("mutual_information")
    runs["member_tv_ratio"] = runs["tv_to_average"] / at_members("tv_to_average")
    for key in ("configurational", "kinetic"):
        runs[f"{key}_ratio"] = runs[key] / runs["temperature"]
    return runs, reference


def _verdicts(runs: pd.DataFrame) -> list[tuple[str, str, str, object]]:
    """One family: every arm's TV to NUTS (lower better) and MI ratio (higher better) against its noise-off arm."""
    rows, comparisons = [], []
    for (temperature, arm), group in runs.groupby(["temperature", "arm"], sort=False):
        on = group[group["noise"]].set_index("seed")
        off = group[~group["noise"]].set_index("seed")
        seeds = sorted(set(on.index) & set(off.index))
        for metric, lower, margin in (("tv", True, TV_MARGIN), ("mi_ratio", False, MI_MARGIN)):
            comparisons.append(Paired(on.loc[seeds, metric].tolist(), off.loc[seeds, metric].tolist(), margin=margin,
                                      lower_is_better=lower))
            rows.append((f"T = {temperature:g}", arm, metric))
    verdicts = compare_paired(comparisons)
    return [(*row, verdict) for row, verdict in zip(rows, verdicts)]


def write_report(out: Path) -> Path:
    """results/sampling/sampling_study.md (and its figure) from the study's CSVs in ``out``."""
    from csg.reporting import write_text

    runs, reference = _frame(out)
    seeds = sorted(runs["seed"].unique())
    lines = ["# Does the chain sample? The sampling study", "",
             f"`make sampling-study` (studies/sampling/run.py), full scale as designed: the "
             f"posterior benchmark's task (`experiment=posterior_benchmark`: an MLP 49-32-10 on 1000 shipped digits, "
             f"N = 1000, 200 epochs of 10 batches), seeds {', '.join(map(str, seeds))}, each arm beside its control "
             f"with the noise off (T = 0), every run through `csg.train` and scored by what it writes (TV: the "
             f"ensemble's total variation to the NUTS predictive on the 1000 test digits, `evaluation.reference`; the "
             f"members' mutual information and TV to their average, `spread`; the sampler's temperatures and its "
             f"stages' relaxation, `sampling`). CPU, one thread a run, 2 runs at a time.",
             "",
             "The reference (NUTS, `make reference-network`: 4 chains x 1000 draws; its spread from 400 of its draws, "
             "100 evenly spaced a chain):", "",
             *markdown_table(["T", "mutual information (nats)", "an exact draw's TV to the predictive",
                              "effective members of 400"],
                             [[f"{temperature:g}", f"{row['mutual_information']:.4f}", f"{row['tv_to_average']:.4f}",
                               f"{row['effective_members']:.1f}"] for temperature, row in reference.iterrows()],
                             align="rrrr")]
    lines += ["", "Expected TV of as many exact draws: the mean TV to the reference of the average of S independent "
              "NUTS draws, S the arm's members (reference_network.json; correlated draws of one chain score worse "
              "than independent ones, so it is what a perfect sampler of S independent members would score). "
              "MI ratio: the members' mutual information over that of as many random NUTS draws (1: as spread as "
              "exact draws); the MI comparisons are a manipulation check (the noise-off members are near copies by "
              "construction); "
              "member TV ratio: a member's mean TV to the ensemble over that of as many random NUTS draws; T_C / T, "
              "T_K / T: the configurational and kinetic temperatures over the target (1 at stationarity; averaged over "
              "steps that are not stationary they are not temperatures, and the noise-off arms' are not measured, "
              "their steps being at T = 0); relaxation: "
              "a sampling stage's steps over those its noise needs to cross the prior's scale (csg/evaluation/"
              "monitor.py). Mean +- standard error over the seeds.", ""]
    for temperature, by_t in runs.groupby("temperature", sort=False):
        rows = []
        for (part, arm, noise), group in by_t.groupby(["part", "arm", "noise"], sort=False):
            temps = ("-", "-") if not noise else (cell(group["configurational_ratio"], 3),
                                                 cell(group["kinetic_ratio"], 3))
            members = group["members"].dropna()
            stopped = int(group["tv"].isna().sum())
            shown = f"{int(members.iloc[0])}" if len(members) else "-"
            shown += f" ({stopped} of {len(group)} runs stopped)" if stopped else ""
            rows.append([part, arm, "T" if noise else "off", shown, cell(group["tv"], 4),
                         expected_tv(temperature, members.iloc[0] if len(members) else None),
                         cell(group["mi_ratio"], 3), cell(group["member_tv_ratio"], 3),
                         cell(group["effective_members"], 2), temps[0], temps[1],
                         cell(group["relaxation"], 3) if noise else "-"])
        lines += [f"## T = {temperature:g}", "", *markdown_table(
            ["part", "arm", "noise", "members", "TV to NUTS", "expected TV of as many exact draws", "MI ratio",
             "member TV ratio", "effective members", "T_C / T", "T_K / T", "relaxation"], rows,
            align="lllrrrrrrrrr"), ""]
    verdicts = _verdicts(runs)
    lines += ["## The noise against its control", "",
              method_statement(margin=f"TV {TV_MARGIN}, MI ratio {MI_MARGIN}"), "",
              f"One family of {len(verdicts)} comparisons: {tally([v for *_, v in verdicts])}.", "",
              *markdown_table(["T", "arm", "metric", "difference (noise - off)", "detectable"],
                              [[where, arm, "TV to NUTS (lower is better)" if metric == "tv"
                                else "MI ratio (higher: more spread)", verdict.describe(3), f"{verdict.detectable:.3g}"]
                               for where, arm, metric, verdict in verdicts], align="llllr"), ""]
    from studies.sampling.cost_report import cost_lines

    lines += cost_lines(out)
    path = out / "sampling_study.md"
    write_text(path, "\n".join(lines))
    return path
