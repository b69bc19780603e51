"""The accuracy study: every method, step factor and seed on every reference; the two protocols.

- Table 5 protocol: the Table 5 schedule as configured (step factor 1).
- Tuned: per method and target, the step factor of :data:`csg.accuracy.chains.STEP_FACTORS` with the
  smallest mean distance to the reference over the seeds (W2 for logistic regression, predictive total
  variation for the network): the best each method can do on this budget, an oracle choice that a user
  without a reference cannot make, reported as such.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from csg.accuracy import chains
from csg.accuracy.reference import TARGETS, Reference, load_data

SMOKE = ("trainer.epochs=600", "trace.burnin=100", "trace.samples=500")
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
        steps = int(chains.compose(methods[0], target, overrides).trainer.epochs)
        recipe = chains.recipe_overrides(target, x, y, steps)
        for method in methods:
            cfg = chains.compose(method, target, (*overrides, *recipe))
            chains.check_prior(cfg, target, len(y))
            for factor in factors:
                for seed in seeds:
                    scores = chains.score(chains.run_chain(cfg, factor, seed, x, y), reference)
                    rows.append({"target": name, "method": method, "factor": factor, "seed": seed,
                                 "lr0": factor * float(cfg.sampler.lr0), **scores})
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


def paired_difference(runs: pd.DataFrame, target: str, method: str, baseline: str, factor_of: dict) -> tuple[float, float]:
    """Mean and s.e. over seeds of metric(method) - metric(baseline), each at its factor in ``factor_of``."""
    metric = primary_metric(target)

    def values(name: str) -> pd.Series:
        block = runs[(runs.target == target) & (runs.method == name) & (runs.factor == factor_of[name])]
        return block.set_index("seed")[metric]

    difference = (values(method) - values(baseline)).dropna()
    return float(difference.mean()), float(difference.sem()) if len(difference) > 1 else float("nan")
