"""The study: every method, step size and seed on each target, scored at checkpoints of the budget.

Per target, :func:`prepare` fixes what the scores compare against (the mixtures' exact draws and weights, the
network's reference), the step grid and the starts; :func:`score` turns a unit's kept draws into one row per
seed and checkpoint; :func:`run_study` runs and scores everything. Besides the methods, an "exact" row scores
independent exact draws (the reference's held-out draws for the network) as many as one chain keeps: the
floor of each metric at that sample size.

**Verdicts** (:func:`verdicts`, through :func:`csg.evaluation.comparison.compare_paired`): for each cyclical
method and its constant-step counterpart (cSGLD against SGLD, cSGHMC against SGHMC, and their 4-chain versions),
each at its best step size (the grid's step with the smallest mean of the metric at the full budget), the paired
differences metric(cyclical) - metric(baseline) over the seeds (both start from the same points), a t-interval
Holm-corrected across every target, metric and pair of the report (one family): the cycles help or hurt where
that interval excludes 0, are equivalent where it lies inside +-:data:`MARGIN` of the baseline's excess over the
"exact" row (same target and metric, full budget), and are otherwise inconclusive. :func:`leaders` asks, in a
second family, whether the method with the lowest mean of each target and metric is separated from every other.
The best steps are chosen on the same seeds the comparisons are judged on: a selection effect.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from csg.studies.accuracy.multimodal import chains, metrics
from csg.studies.accuracy.multimodal.chains import Draws, Protocol
from csg.studies.accuracy.multimodal.targets import TARGETS, StepNetwork, create
from csg.evaluation.comparison import Paired, compare_paired, verdict_frame
from csg.studies.targets import GaussianMixture

REFERENCE = "network_multimodal"   # results/csgmcmc/reference/network_multimodal.{json,npz}
SMOKE = Protocol(budget=1600, factors=(1 / 9, 1 / 3), checkpoints=(0.5, 1.0))
PROTOCOLS = {"full": Protocol(), "smoke": SMOKE}
METRICS = ("mode_error", "mmd", "w2", "predictive_tv")
W2_DRAWS = 300         # draws on each side of the exact W2
REFERENCE_DRAWS = 1000  # reference draws of the MMD and the predictive TV
MARGIN = 0.25          # equivalence margin: this share of the baseline's excess over the exact row


@dataclass
class Prepared:
    name: str
    target: object
    reference: np.ndarray        # reference draws (in the metric's units)
    held_out: np.ndarray         # more exact draws, for the "exact" row
    weights: np.ndarray          # exact (mixtures) or reference (network) mode weights
    scale: np.ndarray            # the metric's units: draws / scale
    bandwidth: float
    steps: list[float]
    starts: torch.Tensor
    energy_low: float
    modes: object = None         # the network's mode regions


def prepare(name: str, references: Path, protocol: Protocol, seeds: Sequence[int]) -> Prepared:
    """What ``name``'s chains start from and are scored against; its starts are those of ``seeds`` (values)."""
    target = create(name)
    generator = torch.Generator().manual_seed(20_000)
    if isinstance(target, GaussianMixture):
        exact = target.sample(2 * REFERENCE_DRAWS, generator).numpy()
        scale = np.ones(target.dim)
        centres = target.means
        with torch.no_grad():
            energy_low = float(target.energy(target.means).min())
        weights, modes = target.weights.numpy(), None
        start_scale = 3.0
    else:
        from csg.studies.accuracy.multimodal.reference import NetworkReference

        loaded = NetworkReference.load(references / REFERENCE)
        exact, modes, weights = loaded.draws, loaded.modes, loaded.weights
        scale = exact.std(0)
        centres = torch.from_numpy(modes.means)
        energy_low = float(loaded.summary["energy_min"])
        start_scale = target.tau
    rng = np.random.default_rng(0)
    order = rng.permutation(len(exact))
    reference, held_out = exact[order[:REFERENCE_DRAWS]], exact[order[REFERENCE_DRAWS:]]
    return Prepared(name, target, reference / scale, held_out / scale, np.asarray(weights), scale,
                    metrics.median_bandwidth(reference / scale), chains.step_grid(target, centres, protocol),
                    chains.start_points(seeds, target.dim, start_scale, 0), energy_low, modes)


def mode_weights(prepared: Prepared, draws: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The draws' estimate of the mode weights (module :mod:`.metrics`); ``draws`` in the target's units."""
    w = weights / weights.sum()
    if prepared.modes is None:
        with torch.no_grad():
            responsibilities = torch.softmax(prepared.target._log_components(torch.from_numpy(draws)), -1).numpy()
        return w @ responsibilities
    return np.bincount(prepared.modes.assign(draws), weights=w, minlength=len(prepared.modes))


def scores(prepared: Prepared, draws: np.ndarray, weights: np.ndarray, rng: np.random.Generator) -> dict[str, float]:
    """Every metric of one sample (``draws`` in the target's units, importance ``weights``)."""
    nan = float("nan")
    if len(draws) < 2 or not np.isfinite(draws).all() or weights.sum() <= 0:
        return {key: nan for key in METRICS}
    scaled = draws / prepared.scale
    out = {"mode_error": metrics.mode_weight_error(mode_weights(prepared, draws, weights), prepared.weights),
           "mmd": metrics.mmd(scaled, prepared.reference, prepared.bandwidth, weights),
           "w2": metrics.w2(scaled, prepared.reference, W2_DRAWS, rng, weights), "predictive_tv": nan}
    if isinstance(prepared.target, StepNetwork):
        from csg.studies.accuracy.multimodal.reference import predictive_fits

        chosen = metrics.systematic_resample(weights, min(len(draws), 500), rng)
        out["predictive_tv"] = metrics.predictive_tv(predictive_fits(prepared.target, draws[chosen]),
                                                     predictive_fits(prepared.target, prepared.reference * prepared.scale),
                                                     prepared.target.noise)
    return out


def score(prepared: Prepared, unit: Draws, protocol: Protocol, seeds: Sequence[int]) -> list[dict]:
    """One row per seed and checkpoint: the metrics of the draws kept up to that share of the budget (``seeds``:
    the seed of each of the unit's per-seed draws, in order)."""
    method = chains.BY_NAME[unit.method]
    rows = []
    for seed, draws, weights, finite in zip(seeds, unit.draws, unit.weights, unit.finite, strict=True):
        rng = np.random.default_rng(1000 * seed + 7)
        for share in protocol.checkpoints:
            upto = unit.iterations < share * unit.steps
            rows.append({"target": prepared.name, "method": unit.method, "step": unit.step, "seed": seed,
                         "budget_share": share,
                         "gradient_evaluations": int(share * chains.gradient_evaluations(method, protocol.budget)),
                         "draws": int(upto.sum()), "finite": finite,
                         **scores(prepared, draws[upto], weights[upto], rng)})
    return rows


def exact_rows(prepared: Prepared, seeds: Sequence[int], protocol: Protocol) -> list[dict]:
    """The "exact" row: per seed, independent exact draws, as many as one constant-step chain keeps."""
    rows = []
    for seed in seeds:
        rng = np.random.default_rng(1000 * seed + 11)
        for share in protocol.checkpoints:
            count = int(share * protocol.budget * (1 - protocol.burnin) / protocol.thin)
            if isinstance(prepared.target, GaussianMixture):
                generator = torch.Generator().manual_seed(30_000 + seed)
                draws = prepared.target.sample(count, generator).numpy()
            else:
                draws = prepared.held_out[rng.choice(len(prepared.held_out), count, replace=False)] * prepared.scale
            rows.append({"target": prepared.name, "method": "exact", "step": float("nan"), "seed": seed,
                         "budget_share": share, "gradient_evaluations": int(share * protocol.budget), "draws": count,
                         "finite": True, **scores(prepared, draws, np.ones(count), rng)})
    return rows


@dataclass
class Study:
    runs: pd.DataFrame       # one row per target, method, step, seed and checkpoint
    seconds: float
    protocol: Protocol
    steps: dict              # target -> its step grid


def run_study(references: Path, targets: tuple[str, ...] = TARGETS, seeds: Sequence[int] = (0, 1, 2, 3, 4),
              protocol: Protocol = Protocol(), methods=chains.METHODS, log=print) -> Study:
    """Every method at every step of each target's grid, for each seed of ``seeds`` (the values, each once, from 0
    to :data:`~csg.studies.accuracy.multimodal.chains.MAX_SEED`; recorded as the rows' ``seed``).

    All seeds' chains run as one tensor per target: seed s starts at row s of the target's start draw
    (:func:`~csg.studies.accuracy.multimodal.chains.start_points`), is scored and gets its exact draws from generators of s,
    and the batch's noise is one stream per target seeded by the target's index and the lowest seed (1000 x the
    lowest seed + index). Seeds 0..n-1 give the study as it has always run; the same seeds give the same numbers."""
    seeds = tuple(sorted(int(seed) for seed in seeds))
    if not seeds or len(set(seeds)) < len(seeds) or seeds[0] < 0 or seeds[-1] > chains.MAX_SEED:
        raise ValueError(f"seeds: distinct values from 0 to {chains.MAX_SEED}, at least one: {list(seeds)}")
    started = time.perf_counter()
    rows, grids = [], {}
    for index, name in enumerate(targets):
        prepared = prepare(name, references, protocol, seeds)
        grids[name] = prepared.steps
        units, seconds = chains.run(prepared.target, prepared.starts, prepared.steps, protocol,
                                    energy_low=prepared.energy_low, methods=methods, seed=1000 * seeds[0] + index)
        log(f"{name}: {len(units)} (method, step) pairs x {len(seeds)} seeds, {protocol.budget} gradients each: "
            f"{seconds:.0f} s")
        for unit in units:
            rows += score(prepared, unit, protocol, seeds)
        rows += exact_rows(prepared, seeds, protocol)
        log(f"{name}: scored ({time.perf_counter() - started:.0f} s)")
    return Study(pd.DataFrame(rows), time.perf_counter() - started, protocol, grids)


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard error over seeds per target, method, step and checkpoint."""
    keys = ["target", "method", "step", "budget_share"]
    grouped = runs.groupby(keys, sort=False, dropna=False)
    means = grouped[[*METRICS, "gradient_evaluations", "draws"]].mean()
    errors = grouped[list(METRICS)].sem().add_suffix("_se")
    return pd.concat([means, errors, grouped["seed"].count().rename("seeds")], axis=1).reset_index()


def best_steps(runs: pd.DataFrame, metric: str) -> dict[tuple[str, str], float]:
    """(target, method) -> the step with the smallest mean ``metric`` at the full budget."""
    final = runs[(runs.budget_share == runs.budget_share.max()) & (runs.method != "exact")]
    means = final.groupby(["target", "method", "step"])[metric].mean().dropna()
    best = {}
    for (target, method), block in means.groupby(level=[0, 1]):
        best[(target, method)] = float(block.idxmin()[2])
    return best


def final_values(runs: pd.DataFrame, target: str, metric: str, method: str, step: float = math.nan) -> pd.Series:
    """``metric`` of ``method`` at the full budget, by seed: at ``step`` (the exact row has none)."""
    final = runs[(runs.target == target) & (runs.budget_share == runs.budget_share.max()) & (runs.method == method)]
    if method != "exact":
        final = final[np.isclose(final.step, step)]
    return final.set_index("seed")[metric]


def paired(runs: pd.DataFrame, target: str, metric: str, method: str, baseline: str,
           best: dict) -> tuple[pd.Series, pd.Series]:
    """metric(method) and metric(baseline) at the full budget, each at its best step, on the seeds both have."""
    mine = final_values(runs, target, metric, method, best[(target, method)])
    theirs = final_values(runs, target, metric, baseline, best[(target, baseline)])
    return mine.align(theirs, join="inner")


def exact_mean(runs: pd.DataFrame, target: str, metric: str) -> float:
    """The mean over seeds of the exact row at the full budget (``nan`` where the study has none)."""
    values = final_values(runs, target, metric, "exact").dropna()
    return float(values.mean()) if len(values) else math.nan


def margin(baseline_mean: float, exact: float) -> float:
    """The equivalence margin: :data:`MARGIN` x the baseline's excess over exact (``nan``: none, or no room)."""
    excess = baseline_mean - exact
    return MARGIN * excess if math.isfinite(excess) and excess > 0 else math.nan


def _family(runs: pd.DataFrame, rows: Sequence[dict], alpha: float, power: float) -> pd.DataFrame:
    """Per row (target, metric, method, baseline, best), the verdict of one Holm family of all the rows."""
    comparisons, columns = [], []
    for row in rows:
        target, metric, method, baseline, best = (row[k] for k in ("target", "metric", "method", "baseline", "best"))
        mine, theirs = paired(runs, target, metric, method, baseline, best)
        exact = exact_mean(runs, target, metric)
        baseline_mean = float(final_values(runs, target, metric, baseline, best[(target, baseline)]).mean())
        comparisons.append(Paired(mine.to_numpy(float), theirs.to_numpy(float), margin(baseline_mean, exact)))
        columns.append({"target": target, "metric": metric, "method": method, "baseline": baseline,
                        "method_step": best[(target, method)], "baseline_step": best[(target, baseline)],
                        "method_mean": float(mine.mean()), "baseline_mean": baseline_mean, "exact": exact,
                        "baseline_excess": baseline_mean - exact})
    if not rows:
        return pd.DataFrame()
    found = verdict_frame(compare_paired(comparisons, alpha, power)).rename(columns={"n": "seeds"})
    frame = pd.concat([pd.DataFrame(columns), found], axis=1)
    room = frame.baseline_excess.where(frame.baseline_excess > 0)
    frame.insert(frame.columns.get_loc("verdict"), "detectable_share", frame.detectable / room)
    return frame


def _measured(runs: pd.DataFrame):
    """(metric, target, best steps) for every metric and target the runs measure."""
    for metric in METRICS:
        if runs[metric].notna().sum() == 0:
            continue
        best = best_steps(runs, metric)
        for target in dict.fromkeys(runs.target):
            if not runs[runs.target == target][metric].isna().all():
                yield metric, target, best


def verdicts(runs: pd.DataFrame, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """Each cyclical method against its constant-step counterpart (:data:`chains.PAIRS`), per target and metric,
    each at its best step: one Holm family of every comparison (module docstring). Columns: the comparison, its
    steps and means, the exact row's mean, the baseline's excess over it, the statistics of
    :class:`~csg.evaluation.comparison.Verdict` (``seeds``: its n), ``detectable_share`` (detectable / excess)
    and ``verdict``."""
    rows = [{"target": target, "metric": metric, "method": method, "baseline": baseline, "best": best}
            for metric, target, best in _measured(runs) for method, baseline in chains.PAIRS
            if (target, method) in best and (target, baseline) in best]
    return _family(runs, rows, alpha, power)


def leaders(runs: pd.DataFrame, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """Per target and metric, the method with the lowest mean (each at its best step, full budget) against every
    other method, paired by seed: one Holm family of all these comparisons, separate from :func:`verdicts`'.
    ``method`` is the leader; it is best only where it helps against every other. Columns as :func:`verdicts`'."""
    rows = []
    for metric, target, best in _measured(runs):
        means = {name: final_values(runs, target, metric, name, best[(target, name)]).mean()
                 for name in (m.name for m in chains.METHODS) if (target, name) in best}
        means = {name: mean for name, mean in means.items() if math.isfinite(mean)}
        if len(means) < 2:
            continue
        leader = min(means, key=means.get)
        rows += [{"target": target, "metric": metric, "method": leader, "baseline": other, "best": best}
                 for other in means if other != leader]
    return _family(runs, rows, alpha, power)
