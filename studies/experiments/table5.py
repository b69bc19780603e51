"""cSG-MCMC Table 5: median effective sample size of Bayesian logistic regression, ours beside the paper's.

``make table5`` runs every chain in-process (:func:`protocol_chains`: each Table 5 preset on each data set and
seed, built and stepped by the functions a ``train.py`` run uses, :func:`studies.accuracy.chains.run_chain`,
with the same seed streams as ``python train.py experiment=table5_sgld data=heart seed=0``),
and a sweep of the step size up to the stability limit (:func:`step_sweep`). Each writes one CSV
(``table5_runs.csv``: one row per data set, method and seed; ``table5_step.csv``: one row per data set, method,
step and seed); :func:`write_report` makes ``table5.csv``, ``table5.md`` and ``table5_step.png`` from those two
CSVs alone, so ``make table5-report`` regenerates them on a fresh clone. A folder of ``train.py`` runs
(``make table5-report RUNS=DIR``) replaces the per-seed CSV by those runs' (:func:`report`).

The stability limit (:func:`curvature`): the step multiplies the gradient of the mean loss, so the potential in
the step's units is U / N = mean loss + (wd / 2) |theta|^2; L is the largest eigenvalue of its Hessian at the
posterior mode (exact, by Newton's method and an eigendecomposition). On the Gaussian approximation at the mode a
full-batch chain is linear: SGLD is stable for steps below 2 / L, SGHMC with momentum m (v <- m v - h grad + noise,
theta <- theta + v) below 2 (1 + m) / L. The same approximation predicts each coordinate's ESS at a constant step
(:func:`predicted_ess`), the curve the measured sweep is read against.
"""

from __future__ import annotations

import math
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from csg.errors import ConfigError
from csg.reporting import write_text
from studies.experiments.aggregate import refuse_runs, runs_to_report
from studies.experiments.sweeps import SweepPlan
from studies.experiments.table5_report import (FIGURE, MARGIN, METHODS, PAIRS, RUN_COLUMNS, RUNS_CSV,  # noqa: F401
                                                   STEP_COLUMNS, STEP_CSV, accuracy_note, markdown, summarise,
                                                   verdicts, write_report)

DATASETS = ("australian", "german", "heart")
SEEDS = tuple(range(10))  # ten seeds: the verdicts are paired t-intervals, Holm-corrected over 12
# the train.py runs of the same chains, for a cluster (python train.py -m ..., then make table5-report RUNS=DIR)
SWEEPS = SweepPlan(
    presets={"full": None},
    seeds={"full": ",".join(map(str, SEEDS))},
    sweeps=(("experiment=table5_sgld,table5_sghmc,table5_csgld,table5_csghmc,table5_sgld_constant,"
             "table5_sghmc_constant", "data=heart,german,australian", "seed={seeds}"),),
)
# the step sweep: the largest step of each schedule (the constant step; the cyclical schedule's peak) as a
# fraction of its method's stability limit; two data sets (australian's copy is damaged), two seeds
SWEEP_DATASETS = ("heart", "german")
SWEEP_METHODS = ("sgld_constant", "sghmc_constant", "csgld")
SWEEP_FRACTIONS = (0.125, 0.25, 0.5, 0.75, 0.95)
SWEEP_SEEDS = (0, 1)


# --- the potential's curvature and the stability limit ------------------------------------------------------------

def mode_and_hessian(x: np.ndarray, y: np.ndarray, weight_decay: float, iterations: int = 100
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The posterior mode of Bayesian logistic regression and the Hessian there, of the potential in the step's
    units, U / N = mean logistic loss + (wd / 2) |theta|^2; theta = (weights, intercept), the order of the
    framework's flattened draws (``linear.weight`` then ``linear.bias``). Newton's method (the loss is convex)."""
    features = np.hstack([np.asarray(x, dtype=np.float64), np.ones((len(x), 1))])
    labels = np.asarray(y, dtype=np.float64)
    theta = np.zeros(features.shape[1])
    hessian = np.eye(len(theta)) * weight_decay
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-features @ theta))
        gradient = features.T @ (p - labels) / len(labels) + weight_decay * theta
        hessian = (features * (p * (1 - p))[:, None]).T @ features / len(labels) + weight_decay * np.eye(len(theta))
        step = np.linalg.solve(hessian, gradient)
        theta = theta - step
        if np.abs(step).max() < 1e-12:
            break
    p = 1.0 / (1.0 + np.exp(-features @ theta))
    hessian = (features * (p * (1 - p))[:, None]).T @ features / len(labels) + weight_decay * np.eye(len(theta))
    return theta, hessian


def stability_limit(curvature: float, momentum: float = 0.0) -> float:
    """The largest stable full-batch step on a quadratic of largest curvature ``curvature``: 2 (1 + m) / L
    (SGLD: m = 0; SGHMC: its momentum m = 1 - friction), where |1 - h L| < 1 (SGLD) or the heavy-ball recursion
    theta' = (1 + m - h L) theta - m theta_prev stops being a contraction (SGHMC)."""
    if not curvature > 0 or not 0 <= momentum < 1:
        raise ValueError(f"a positive curvature and a momentum in [0, 1), got {curvature} and {momentum}")
    return 2.0 * (1.0 + momentum) / curvature


def predicted_ess(hessian: np.ndarray, step: float, momentum: float, draws: int) -> np.ndarray:
    """Each coordinate's ESS of ``draws`` draws of a constant-step chain on the Gaussian approximation.

    Along an eigenvector of the Hessian (eigenvalue lam) the chain is the AR(2) recursion
    theta' = a1 theta + a2 theta_prev + s xi, a1 = 1 + m - h lam, a2 = -m (SGLD: m = 0, an AR(1)); its stationary
    variance is s^2 (1 - a2) / ((1 + a2) ((1 - a2)^2 - a1^2)) and the sum of its autocovariances over all lags is
    s^2 / (1 - a1 - a2)^2 = s^2 / (h lam)^2. A coordinate mixes the eigenvectors with weights V_ji^2, so its
    integrated autocorrelation time is sum_i V_ji^2 / (h lam_i)^2 over sum_i V_ji^2 var_i, and its ESS draws over
    that. NaN beyond the stability limit."""
    lam, vectors = np.linalg.eigh(hessian)
    a1, a2 = 1.0 + momentum - step * lam, -momentum
    if step <= 0 or step * lam.max() >= 2 * (1 + momentum):
        return np.full(len(lam), np.nan)
    variance = (1 - a2) / ((1 + a2) * ((1 - a2) ** 2 - a1**2))
    weights = vectors**2
    tau = (weights @ (1.0 / (step * lam) ** 2)) / (weights @ variance)
    return draws / tau


@lru_cache(maxsize=None)
def _data(dataset: str):
    """Standardised features, labels and the data source of ``dataset`` (as train.py sees them)."""
    from studies.accuracy.reference import Target, load_data

    return load_data(Target(f"{dataset}_logreg", dataset, "logreg"))


@lru_cache(maxsize=None)
def curvature(dataset: str, weight_decay: float) -> float:
    """L of ``dataset``'s potential (:func:`mode_and_hessian`) with the prior of weight decay ``weight_decay``."""
    x, y, _ = _data(dataset)
    _, hessian = mode_and_hessian(x, y, weight_decay)
    return float(np.linalg.eigvalsh(hessian).max())


# --- the chains ---------------------------------------------------------------------------------------------------

def _compose(method: str, dataset: str, overrides: tuple[str, ...] = ()):
    """The Table 5 command of ``method`` on ``dataset``, checked and composed (a :class:`csg.Built` of its config)."""
    import csg

    return csg.build([f"experiment=table5_{method}", f"data={dataset}", "data.download=false", *overrides],
                     data=False)


def _mean_step(cfg, factor: float = 1.0) -> float:
    """The mean over the run of the step of ``cfg``'s schedule (:func:`csg.schedules.schedule_for`), scaled by
    ``factor``."""
    from csg.schedules import schedule_for

    total = int(cfg.trainer.epochs)
    schedule = schedule_for(cfg.sampler, total)
    return factor * float(np.mean([schedule.lr(k) for k in range(total)]))


def _chain_row(built, method: str, dataset: str, seed: int, factor: float, overrides: tuple[str, ...]) -> dict:
    import torch

    from csg.evaluation.ess import effective_sample_size
    from studies.accuracy.chains import run_chain

    x, y, source = _data(dataset)
    cfg = built.config
    chain = run_chain(built, factor, seed, torch.from_numpy(x), torch.from_numpy(y))
    ess = effective_sample_size(chain.draws) if chain.finite else np.array([np.nan])
    momentum = float(cfg.sampler.momentum) if cfg.sampler.update_rule == "sghmc" else 0.0
    L = curvature(dataset, float(cfg.sampler.weight_decay))
    median = float(np.median(ess))
    label, schedule = METHODS[method]
    return {"dataset": dataset, "sampler": method, "method": label, "schedule": schedule, "seed": seed,
            "median_ess": median, "min_ess": float(np.min(ess)), "draws": len(chain.draws), "steps": chain.steps,
            "seconds": chain.seconds, "ess_per_second": median / chain.seconds,
            "ess_per_gradient": median / chain.steps, "lr0": factor * float(cfg.sampler.lr0),
            "mean_step": _mean_step(cfg, factor),
            "lr_final": factor * float(cfg.sampler.lr_final) if cfg.sampler.schedule == "decreasing" else math.nan,
            "momentum": momentum, "temperature": float(cfg.sampler.temperature), "curvature": L,
            "stability_limit": stability_limit(L, momentum), "data_source": source, "finite": chain.finite,
            "source": "in-process chain " + " ".join((f"experiment=table5_{method}", f"data={dataset}",
                                                     f"seed={seed}", *overrides))}


def protocol_chains(datasets=DATASETS, methods=tuple(METHODS), seeds=SEEDS, overrides: tuple[str, ...] = (),
                    log=print) -> pd.DataFrame:
    """Table 5's chains, one row per data set, method and seed (:data:`RUN_COLUMNS`)."""
    started, rows = time.perf_counter(), []
    for dataset in datasets:
        for method in methods:
            built = _compose(method, dataset, overrides)
            rows += [_chain_row(built, method, dataset, seed, 1.0, overrides) for seed in seeds]
            log(f"table5: {dataset} {method}: {len(seeds)} seeds ({time.perf_counter() - started:.0f} s)")
    return pd.DataFrame(rows)[list(RUN_COLUMNS)]


def step_sweep(datasets=SWEEP_DATASETS, methods=SWEEP_METHODS, fractions=SWEEP_FRACTIONS, seeds=SWEEP_SEEDS,
               overrides: tuple[str, ...] = (), log=print) -> pd.DataFrame:
    """Median ESS against the step: each schedule scaled so that its largest step (the constant step, the cycle's
    peak) is ``fraction`` x its method's stability limit; one row per data set, method, fraction and seed
    (:data:`STEP_COLUMNS`), with the Gaussian approximation's prediction for the constant steps."""
    started, rows = time.perf_counter(), []
    for dataset in datasets:
        x, y, _ = _data(dataset)
        for method in methods:
            built = _compose(method, dataset, overrides)
            cfg = built.config
            momentum = float(cfg.sampler.momentum) if cfg.sampler.update_rule == "sghmc" else 0.0
            _, hessian = mode_and_hessian(x, y, float(cfg.sampler.weight_decay))
            limit = stability_limit(float(np.linalg.eigvalsh(hessian).max()), momentum)
            for fraction in fractions:
                factor = fraction * limit / float(cfg.sampler.lr0)
                for seed in seeds:
                    row = _chain_row(built, method, dataset, seed, factor, overrides)
                    predicted = math.nan
                    if cfg.sampler.schedule == "constant":
                        predicted = float(np.median(predicted_ess(hessian, row["lr0"], momentum, row["draws"])))
                    rows.append({**row, "fraction": fraction, "predicted_median_ess": predicted})
            log(f"table5 step sweep: {dataset} {method}: {len(fractions)} steps x {len(seeds)} seeds "
                f"({time.perf_counter() - started:.0f} s)")
    return pd.DataFrame(rows)[list(STEP_COLUMNS)]


# --- train.py runs ------------------------------------------------------------------------------------------------

def _run_steps(run_dir: str) -> dict[str, float]:
    """lr0, lr_final, mean step, momentum of one train.py run, from its resolved config (NaN where unreadable)."""
    from omegaconf import OmegaConf

    nan = {"lr0": math.nan, "lr_final": math.nan, "mean_step": math.nan, "momentum": math.nan,
           "weight_decay": math.nan}
    try:
        cfg = OmegaConf.load(Path(run_dir) / ".hydra" / "config.yaml")
        OmegaConf.resolve(cfg)
        sampler = cfg.sampler
        return {"lr0": float(sampler.lr0), "mean_step": _mean_step(cfg),
                "lr_final": float(sampler.lr_final) if sampler.schedule == "decreasing" else math.nan,
                "momentum": float(sampler.momentum) if sampler.update_rule == "sghmc" else 0.0,
                "weight_decay": float(sampler.weight_decay)}
    except Exception:  # a config without the keys of a Table 5 preset (a hand-made folder): its steps unknown
        return nan


def runs_frame(runs_dir: str | Path) -> tuple[pd.DataFrame, list[tuple[str, str]], pd.DataFrame]:
    """The finished train.py runs of Table 5 under ``runs_dir``, one row per run (:data:`RUN_COLUMNS`), the
    (data set, sampler) cells without a finished run, and the unfinished runs. A folder without a finished run of
    Table 5's data sets and samplers is a :class:`~csg.errors.ConfigError` (``--runs``)."""
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
    for run in done.to_dict("records"):
        get = run.get
        method, dataset = get("sampler.name"), get("data.name")
        steps = _run_steps(get("run_dir"))
        L = math.nan
        if math.isfinite(steps["weight_decay"]):
            L = curvature(dataset, steps["weight_decay"])
        label, schedule = METHODS[method]
        draws = get("metrics.ess.draws")
        median = float(get("metrics.ess.median"))
        per_gradient = get("metrics.ess.median_per_gradient_evaluation")
        temperature = get("sampler.temperature")
        rows.append({
            "dataset": dataset, "sampler": method, "method": label, "schedule": schedule, "seed": int(get("seed")),
            "median_ess": median, "min_ess": float(get("metrics.ess.min")), "draws": int(draws),
            "steps": round(median / per_gradient) if per_gradient else math.nan,
            "seconds": median / float(get("metrics.ess.median_per_second")),
            "ess_per_second": float(get("metrics.ess.median_per_second")), "ess_per_gradient": float(per_gradient),
            "lr0": steps["lr0"], "mean_step": steps["mean_step"], "lr_final": steps["lr_final"],
            "momentum": steps["momentum"],
            "temperature": float(temperature) if isinstance(temperature, (int, float)) else math.nan,
            "curvature": L,
            "stability_limit": stability_limit(L, steps["momentum"]) if math.isfinite(L) else math.nan,
            "data_source": get("metrics.data_source"), "source": f"train.py run {get('run_dir')}"})
    frame = pd.DataFrame(rows)[list(RUN_COLUMNS)]
    expected = {(d, m) for d in DATASETS for m in METHODS}
    missing = sorted(expected - set(zip(done["data.name"], done["sampler.name"])))
    return frame, missing, runs[runs.status != "done"]


def report(runs_dir: str | Path, out_dir: str | Path) -> pd.DataFrame:
    """The train.py runs under ``runs_dir`` as ``out_dir``/table5_runs.csv, then :func:`write_report`; returns
    the table. A folder that does not exist, or holds no finished run of Table 5's data sets and samplers, is a
    :class:`~csg.errors.ConfigError` (``--runs``) and nothing is written."""
    frame, missing, incomplete = runs_frame(runs_dir)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / RUNS_CSV, frame.to_csv(index=False))
    return write_report(out_dir, missing=missing, incomplete=list(incomplete.run_dir), runs_dir=runs_dir)


# --- the report ---------------------------------------------------------------------------------------------------

def run(job) -> list[str]:
    """``make table5`` (the chains and the step sweep, then the report) and ``make table5-report`` (the report from
    the CSVs in ``--out``, or from the train.py runs of ``--runs``)."""
    from studies.experiments.in_process import checked_options

    checked_options(job, {})
    out = Path(job.out)
    committed = out.resolve() == (Path("results") / "csgmcmc").resolve()
    if committed and job.runs is not None:
        raise ConfigError("--runs", str(job.runs), "a folder of train.py runs reported with --out DIR: the committed "
                          "table5 is written by make table5's in-process chains (or make table5-report from its CSVs)")
    if committed and job.seeds is not None and tuple(int(s) for s in job.seeds.split(",")) != SEEDS:
        raise ConfigError("--seeds", job.seeds, f"the protocol's seeds {','.join(map(str, SEEDS))} to write the "
                          "committed table5; pass --out DIR to write this table elsewhere")
    if job.report_only:
        if job.runs is not None:
            report(job.runs, out)
            return [f"table5: wrote {out / 'table5.md'} from {job.runs}"]
        write_report(out)
        return [f"table5: wrote {out / 'table5.md'} from {out / RUNS_CSV} and {out / STEP_CSV}"]
    if job.runs is not None:
        raise ConfigError("--runs", str(job.runs), "only with --report-only (make table5-report RUNS=DIR reports "
                          "train.py runs); make table5 runs its chains in-process")
    seeds = tuple(int(s) for s in job.seeds.split(",")) if job.seeds else SEEDS
    started = time.perf_counter()
    runs = protocol_chains(seeds=seeds, log=lambda line: print(line, flush=True))
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / RUNS_CSV, runs.to_csv(index=False))
    chains = time.perf_counter() - started
    step = step_sweep(log=lambda line: print(line, flush=True))
    write_text(out / STEP_CSV, step.to_csv(index=False))
    write_report(out)
    return [f"table5: wrote {out / 'table5.md'} ({chains:.0f} s of chains, "
            f"{time.perf_counter() - started - chains:.0f} s of step sweep)"]
