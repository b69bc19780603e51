"""The accuracy study: every method, step factor and seed on every reference; the two protocols.

- Table 5 protocol: the Table 5 schedule as configured (step factor 1).
- Tuned: per method and target, the step factor of :data:`studies.accuracy.chains.STEP_FACTORS` with the
  smallest mean distance to the reference over the seeds (W2 for logistic regression, predictive total
  variation for the network): the best each method can do on this budget, an oracle choice that a user
  without a reference cannot make, reported as such. It is chosen on the same seeds its comparisons are judged
  on: a selection effect.

Verdicts (:func:`verdicts`, :func:`leaders`), through :func:`csg.evaluation.comparison.compare_paired`: the cycles
against their decreasing-step counterparts, Table 5's SGLD and SGHMC (:data:`CYCLICAL_PAIRS`), on each target's
distance, per protocol, one Holm family; and, a second family, the method with the lowest distance (and the highest ESS per gradient) of each target
and protocol against every other. A comparison that both protocols share (the tuned steps equal Table 5's) is
counted once. The study has an exact sampler's value only for the median mean error (``mean_error_floor``), not for
the distances compared (W2, the predictive TV) or the ESS, so no equivalence margin is stated: nothing is called
equivalent.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from studies.accuracy import chains
from studies.accuracy.reference import TARGETS, Reference, load_data
from csg.evaluation.comparison import Paired, compare_paired, verdict_frame

SMOKE = ("trainer.epochs=600", "trace.burnin=100", "trace.samples=500")
CYCLICAL_PAIRS = (("cSGLD", "SGLD"), ("cSGHMC", "SGHMC"))
PROTOCOLS = ("Table 5", "tuned")
METRICS = ("w2", "mean_error_max", "mean_error_median", "mean_error_floor", "sd_ratio_median", "agreement", "tv",
           "ess", "ess_per_1000")


def primary_metric(target: str) -> str:
    return "w2" if TARGETS[target].model == "logreg" else "tv"


@dataclass
class Study:
    runs: pd.DataFrame       # one row per chain
    summary: pd.DataFrame    # one row per target, method and protocol: mean and s.e. over seeds
    seconds: float


def run_study(references: Path, targets: tuple[str, ...], seeds: tuple[int, ...], factors=chains.STEP_FACTORS,
              methods: tuple[str, ...] = tuple(chains.METHODS), overrides: tuple[str, ...] = (),
              log=print) -> Study:
    """Every chain, scored against the saved reference of each target."""
    started = time.perf_counter()
    rows = []
    for name in targets:
        target, reference = TARGETS[name], Reference.load(references / f"{name}.json")
        x, y, _ = load_data(target)
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        steps = int(chains.compose(methods[0], target, overrides).config.trainer.epochs)
        recipe = chains.recipe_overrides(target, x, y, steps)
        for method in methods:
            built = chains.compose(method, target, (*overrides, *recipe))
            chains.check_prior(built.config, target, len(y))
            for factor in factors:
                for seed in seeds:
                    scores = chains.score(chains.run_chain(built, factor, seed, x, y), reference)
                    rows.append({"target": name, "method": method, "factor": factor, "seed": seed,
                                 "lr0": factor * float(built.config.sampler.lr0), **scores})
            log(f"{name} {method}: {len(factors)} step factors x {len(seeds)} seeds done "
                f"({time.perf_counter() - started:.0f} s)")
    runs = pd.DataFrame(rows)
    return Study(runs, summarise(runs), time.perf_counter() - started)


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard error over seeds, for the Table 5 protocol (factor 1) and the tuned factor."""
    grouped = runs.groupby(["target", "method", "factor"], sort=False)
    means = grouped[[*METRICS, "lr0", "steps"]].mean()
    errors = grouped[list(METRICS)].sem().add_suffix("_se")
    diverged = grouped["finite"].apply(lambda finite: int((~finite.astype(bool)).sum())).rename("diverged")
    table = pd.concat([means, errors, diverged, grouped["seed"].count().rename("seeds")], axis=1).reset_index()
    rows = []
    for (target, method), block in table.groupby(["target", "method"], sort=False):
        metric = primary_metric(target)
        usable = block[(block.diverged == 0) & np.isfinite(block[metric])]
        protocols = [("Table 5", block[block.factor == 1.0])]
        if len(usable):
            protocols.append(("tuned", usable.loc[[usable[metric].idxmin()]]))
        for protocol, chosen in protocols:
            if len(chosen):
                rows.append({"protocol": protocol, **chosen.iloc[0].to_dict()})
    return pd.DataFrame(rows)


def factors(summary: pd.DataFrame, target: str, protocol: str) -> dict[str, float]:
    """method -> its step factor under ``protocol`` on ``target`` (Table 5: 1; tuned: the summary's choice)."""
    block = summary[(summary.target == target) & (summary.protocol == protocol)]
    return block.set_index("method").factor.to_dict()


def paired_values(runs: pd.DataFrame, target: str, metric: str, method: str, baseline: str,
                  factor_of: dict) -> tuple[pd.Series, pd.Series]:
    """metric(method) and metric(baseline), each at its factor in ``factor_of``, on the seeds both have."""

    def values(name: str) -> pd.Series:
        block = runs[(runs.target == target) & (runs.method == name) & (runs.factor == factor_of[name])]
        return block.set_index("seed")[metric]

    return values(method).align(values(baseline), join="inner")


def _family(runs: pd.DataFrame, rows: list[dict], alpha: float, power: float) -> pd.DataFrame:
    """Per row (target, protocol, metric, method, baseline, their factors, lower_is_better), the verdict of one Holm
    family of the distinct comparisons among the rows; ``same_as``: the protocol of an earlier, identical one."""
    if not rows:
        return pd.DataFrame()
    keys, first, comparisons, columns = {}, [], [], []
    for row in rows:
        factor_of = {row["method"]: row["method_factor"], row["baseline"]: row["baseline_factor"]}
        mine, theirs = paired_values(runs, row["target"], row["metric"], row["method"], row["baseline"], factor_of)
        key = (row["target"], row["metric"], row["method"], row["baseline"], row["method_factor"], row["baseline_factor"])
        if key not in keys:
            keys[key] = (len(comparisons), row["protocol"])
            comparisons.append(Paired(mine.to_numpy(float), theirs.to_numpy(float), math.nan, row["lower_is_better"]))
        index, protocol = keys[key]
        first.append(index)
        columns.append({**row, "method_mean": float(mine.mean()), "baseline_mean": float(theirs.mean()),
                        "same_as": protocol if protocol != row["protocol"] else ""})
    found = verdict_frame(compare_paired(comparisons, alpha, power)).rename(columns={"n": "seeds"})
    frame = pd.concat([pd.DataFrame(columns), found.iloc[first].reset_index(drop=True)], axis=1)
    frame.insert(frame.columns.get_loc("verdict"), "detectable_relative", frame.detectable / frame.baseline_mean.abs())
    return frame


def verdicts(runs: pd.DataFrame, summary: pd.DataFrame, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """Each cyclical method against its decreasing-step counterpart (Table 5's SGLD, SGHMC) on each target's distance
    (:func:`primary_metric`), under both protocols: one Holm family (the module's docstring). Columns: the
    comparison, its factors and means, ``same_as``, the statistics of :class:`~csg.evaluation.comparison.Verdict`
    (``seeds``: its n), ``detectable_relative`` (detectable / the baseline's mean) and ``verdict``."""
    rows = []
    for target in dict.fromkeys(runs.target):
        for protocol in PROTOCOLS:
            factor_of = factors(summary, target, protocol)
            rows += [{"target": target, "protocol": protocol, "metric": primary_metric(target), "method": cyclical,
                      "baseline": plain, "method_factor": factor_of[cyclical], "baseline_factor": factor_of[plain],
                      "lower_is_better": True}
                     for cyclical, plain in CYCLICAL_PAIRS if cyclical in factor_of and plain in factor_of]
    return _family(runs, rows, alpha, power)


def leaders(runs: pd.DataFrame, summary: pd.DataFrame, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """Per target and protocol, the method with the lowest mean distance and the one with the highest ESS per
    1000 gradients, each against every other method at its factor, paired by seed: one Holm family, separate from
    :func:`verdicts`'. ``method`` is the leader; it is best only where it helps against every other."""
    rows = []
    for target in dict.fromkeys(runs.target):
        for protocol in PROTOCOLS:
            factor_of = factors(summary, target, protocol)
            block = summary[(summary.target == target) & (summary.protocol == protocol)].set_index("method")
            for metric, lower in ((primary_metric(target), True), ("ess_per_1000", False)):
                means = block[metric].dropna()
                if len(means) < 2:
                    continue
                leader = means.idxmin() if lower else means.idxmax()
                rows += [{"target": target, "protocol": protocol, "metric": metric, "method": leader, "baseline": other,
                          "method_factor": factor_of[leader], "baseline_factor": factor_of[other],
                          "lower_is_better": lower} for other in means.index if other != leader]
    return _family(runs, rows, alpha, power)
