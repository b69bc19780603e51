r"""A reference posterior predictive for a real network: full-batch NUTS on the posterior benchmark's MLP.

For each temperature (1, and the embedded default's 0.2), :func:`build` runs ``settings.chains`` NumPyro
NUTS chains on :math:`\exp(-U(\theta)/T)` of :mod:`studies.benchmark.task` (the posterior that
``python train.py experiment=posterior_benchmark sampler.temperature=T`` targets), each from its own random start
(independent small weights N(0, 0.1^2), near the origin: not overdispersed, so the chains' agreement is checked in
function space, below), one chain per worker process. Its output is what a method is scored against
(:mod:`csg.evaluation.reference_predictive`): the Monte Carlo estimate of the posterior predictive
:math:`p^*(c \mid x) \approx \frac1S \sum_s \mathrm{softmax}(f_{\theta_s}(x))_c` from all chains' S draws, on the test
digits and on the OOD set, with its ESS, the halves' and chains' distances (on test and OOD inputs: the estimate's
own Monte Carlo error is about half the halves' TV) and :func:`floors`: the expected TV of S exact draws.

A neural network's weights never mix between chains (hidden units permute, modes differ), so convergence is
judged where it matters, in function space (Izmailov et al. 2021, Section 4): the reference is accepted only if

- the rank-normalised split R-hat (ArviZ) of every test input's class probabilities, across the chains, is at
  most :data:`RHAT_MAX` for at least :data:`RHAT_SHARE` of them and at most :data:`RHAT_WORST` for all (the same on
  the first :data:`OOD_CHECKED` OOD inputs), and
- the predictive of the draws' first halves and that of their second halves differ by at most
  :data:`HALVES_TV_MAX` in mean total variation on the test inputs (a gate against chains still drifting; the
  estimate's Monte Carlo error is measured, not assumed to be the gate).

Otherwise a :class:`~studies.accuracy.reference.ReferenceRejected` names what failed and nothing is written.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from studies.accuracy.reference import ReferenceRejected
from studies.benchmark.task import Task, check_layout, load_task, logits
from studies.nuts import NutsSettings, require_numpyro, run_nuts

__all__ = ["HALVES_TV_MAX", "NETWORK_NUTS", "NETWORK_RECORD", "OOD_CHECKED", "RHAT_MAX", "RHAT_SHARE", "RHAT_WORST",
           "TEMPERATURES", "build", "convergence", "floors", "potential", "predictive"]

TEMPERATURES = (1.0, 0.2)
RHAT_MAX, RHAT_SHARE, RHAT_WORST = 1.01, 0.95, 1.1
HALVES_TV_MAX = 0.02
OOD_CHECKED = 1000


# the network's NUTS (make reference-network: chains=, warmup=, samples=, max_tree_depth=, workers= replace these)
NETWORK_NUTS = NutsSettings(chains=4, warmup=500, samples=1000, seed=0, target_accept=0.8, max_tree_depth=10,
                            init_scale=0.1, workers=2)
NETWORK_RECORD = ("chains", "warmup", "samples", "max_tree_depth", "target_accept", "init_scale", "seed", "workers")


def potential(task: Task):
    """U(theta) / T in JAX; the features and labels are closed over."""
    import jax
    import jax.numpy as jnp

    x, y = jnp.asarray(task.train_x, jnp.float32), jnp.asarray(task.train_y)
    precision, temperature, layers = task.prior_precision, task.temperature, task.layers

    def energy(theta):  # the chain in float64 (NumPyro's, with JAX's x64), the network's matrix products in float32
        z = logits(theta.astype(jnp.float32), x, layers, xp=jnp).astype(theta.dtype)
        nll = -jnp.take_along_axis(jax.nn.log_softmax(z, axis=1), y[:, None], axis=1).sum()
        return (nll + 0.5 * precision * jnp.sum(theta**2)) / temperature

    return energy


def _chain(task: Task, settings: NutsSettings, chain: int) -> dict:
    """Chain ``chain`` of ``settings.chains`` (in a worker process), from its own random start and PRNG key: its
    draws (samples, D) as float32 and its facts."""
    import os

    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    require_numpyro()  # JAX in double precision before the potential's arrays are made

    started = time.perf_counter()
    start = np.random.default_rng([settings.seed, chain]).standard_normal(task.dimension) * settings.init_scale
    run = run_nuts(replace(settings, chains=1), potential_fn=potential(task), init_params=start, count_warmup=True,
                   key=settings.seed * 1000 + chain, extra_fields=("accept_prob", "energy"))
    steps, energy = run.extra["num_steps"][0], np.asarray(run.extra["energy"][0], dtype=np.float64)
    return {"draws": run.draws[0].astype(np.float32), "seconds": time.perf_counter() - started,
            "gradient_evaluations_warmup": run.warmup_gradient_evaluations,
            "gradient_evaluations_sampling": run.gradient_evaluations, "mean_steps": float(steps.mean()),
            "max_depth_share": float(np.mean(steps >= 2**settings.max_tree_depth - 1)),
            "e_bfmi": float(np.sum(np.diff(energy) ** 2) / np.sum((energy - energy.mean()) ** 2)),
            "divergences": run.divergences, "accept_prob": float(run.extra["accept_prob"][0].mean()),
            "step_size": float(run.step_size)}


def predictive(draws: np.ndarray, x: np.ndarray, layers, chunk: int = 64) -> np.ndarray:
    """Each draw's class probabilities on ``x``: (draws, rows, classes), float32, ``chunk`` draws at a time."""
    import jax
    import jax.numpy as jnp

    features = jnp.asarray(x, jnp.float32)
    apply = jax.jit(jax.vmap(lambda theta: jax.nn.softmax(logits(theta, features, layers, xp=jnp), axis=-1)))
    return np.concatenate([np.asarray(apply(jnp.asarray(draws[i: i + chunk], jnp.float32)))
                           for i in range(0, len(draws), chunk)])


def _rhat(probs: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat (ArviZ's, :mod:`csg.evaluation.convergence`) of each (input, class) probability:
    ``probs`` is (chains, draws, n, c)."""
    from csg.evaluation.convergence import rank_rhat

    values = rank_rhat(probs).ravel()
    return values[np.isfinite(values)]  # a probability that never moves (0 or 1 to float precision) has none


def _ess(probs: np.ndarray) -> dict:
    """Bulk and tail ESS (ArviZ's, :mod:`csg.evaluation.convergence`) of each (input, class) probability of (chains,
    draws, n, c): their quantiles."""
    from csg.evaluation.convergence import ess

    found = {}
    for method in ("bulk", "tail"):
        values = ess(probs, method).ravel()
        values = values[np.isfinite(values)]
        found[method] = {"min": float(values.min()), "q01": float(np.quantile(values, 0.01)),
                         "median": float(np.median(values))} if values.size else dict.fromkeys(
                             ("min", "q01", "median"), math.nan)
    return found


def _split_distances(probs: np.ndarray) -> dict:
    """The halves' TV and agreement, and each chain's TV to the pooled predictive, of (chains, draws, n, c)."""
    half = probs.shape[1] // 2
    first, second = probs[:, :half].mean((0, 1)), probs[:, half:].mean((0, 1))
    pooled = probs.mean((0, 1))
    return {"halves": {"total_variation": float(np.mean(0.5 * np.abs(first - second).sum(-1))),
                       "agreement": float(np.mean(first.argmax(-1) == second.argmax(-1)))},
            "chains_tv_to_pooled": [float(np.mean(0.5 * np.abs(c.mean(0) - pooled).sum(-1))) for c in probs]}


def floors(probs: np.ndarray, sizes=(1, 5, 12, 20, 40, 8, 10, 32, 48), repeats: int = 50, seed: int = 0) -> dict:
    """The expected TV of S exact draws: the mean TV and agreement, against the pooled predictive, of the average of
    S draws taken at random from all chains (``repeats`` times), at each S of ``sizes`` (in this order: a size added
    at the end leaves the others' numbers as they were). A method's distance is read beside that of its member
    count: what S independent posterior draws score, a yardstick, not a bound."""
    rng = np.random.default_rng(seed)
    flat = probs.reshape(-1, *probs.shape[2:])
    pooled = flat.mean(0)
    found = {}
    for size in (s for s in sizes if s <= len(flat)):  # a size beyond the draws: not estimated
        tv, agree = [], []
        for _ in range(repeats):
            mean = flat[rng.choice(len(flat), size, replace=False)].mean(0)
            tv.append(np.mean(0.5 * np.abs(mean - pooled).sum(-1)))
            agree.append(np.mean(mean.argmax(-1) == pooled.argmax(-1)))
        found[str(size)] = {"total_variation": float(np.mean(tv)), "agreement": float(np.mean(agree))}
    return found


def _quantiles(values: np.ndarray) -> dict:
    if not values.size:  # no probability moved across the draws: no R-hat at all (refused by convergence)
        return {"median": math.nan, "q90": math.nan, "q99": math.nan, "max": math.nan, "share_at_most_1.01": 0.0,
                "count": 0}
    return {"median": float(np.median(values)), "q90": float(np.quantile(values, 0.9)),
            "q99": float(np.quantile(values, 0.99)), "max": float(values.max()),
            "share_at_most_1.01": float(np.mean(values <= RHAT_MAX)), "count": int(values.size)}


def convergence(test_probs: np.ndarray, ood_probs: np.ndarray | None) -> dict:
    """The checks of the module's docstring on per-draw probabilities (chains, draws, n, c): R-hat distributions,
    the halves' and the chains' distances, and whether the reference is accepted (with the reasons if not)."""
    checks: dict = {"rhat_test": _quantiles(_rhat(test_probs)), "ess_test": _ess(test_probs),
                    **_split_distances(test_probs)}
    if ood_probs is not None and ood_probs.shape[2]:
        checks["rhat_ood"] = _quantiles(_rhat(ood_probs))
        checks["ess_ood"] = _ess(ood_probs)
        checks["ood_split"] = _split_distances(ood_probs)
    failed = []
    for name in ("rhat_test", "rhat_ood"):
        if name in checks:
            q = checks[name]
            if not q["count"]:
                failed.append(f"{name}: no probability moved across the draws (no R-hat to compute)")
            elif q["share_at_most_1.01"] < RHAT_SHARE or q["max"] > RHAT_WORST:
                failed.append(f"{name}: {q['share_at_most_1.01']:.3f} of the probabilities at R-hat <= {RHAT_MAX} "
                              f"(needs >= {RHAT_SHARE}), worst {q['max']:.3f} (needs <= {RHAT_WORST})")
    if checks["halves"]["total_variation"] > HALVES_TV_MAX:
        failed.append(f"halves: TV {checks['halves']['total_variation']:.4f} (needs <= {HALVES_TV_MAX})")
    checks["accepted"], checks["failed"] = not failed, failed
    return checks


def build(temperature: float, settings: NutsSettings = NETWORK_NUTS, overrides: tuple[str, ...] = (),
          log=print, draws_dir: str | Path | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """The reference at ``temperature``: the arrays of its ``.npz`` (``test_probs``, ``test_labels``, ``ood_probs``)
    and its facts (settings, cost, convergence checks, the predictive's own metrics); a ``ReferenceRejected``
    where a check fails."""
    require_numpyro()
    task, model = load_task(temperature, overrides)
    layout_error = check_layout(task, model, np.random.default_rng(0))
    if layout_error > 1e-3:
        raise RuntimeError(f"the JAX network differs from the torch model by {layout_error:.3g} (layout)")
    log(f"T = {temperature:g}: NUTS, {settings.chains} chains x ({settings.warmup} + {settings.samples}) on "
        f"{task.dimension} weights, N = {task.num_data}, prior precision {task.prior_precision:g} / T")
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, min(settings.workers, settings.chains)),
                             mp_context=get_context("spawn")) as pool:
        chains = list(pool.map(_chain, [task] * settings.chains, [settings] * settings.chains,
                               range(settings.chains)))
    seconds = time.perf_counter() - started
    draws = np.stack([c.pop("draws") for c in chains])  # chains, samples, D
    test = np.stack([predictive(d, task.test_x, task.layers) for d in draws])
    checked = task.ood_x[:OOD_CHECKED]
    ood_checked = np.stack([predictive(d, checked, task.layers) for d in draws]) if len(checked) else None
    checks = convergence(test, ood_checked)
    checks["floors_test"] = floors(test)
    if ood_checked is not None:
        checks["floors_ood"] = floors(ood_checked)
    flat = draws.reshape(-1, draws.shape[-1])
    ood_mean = (sum(predictive(flat[i: i + 128], task.ood_x, task.layers).astype(np.float64).sum(0)
                    for i in range(0, len(flat), 128)) / len(flat) if len(task.ood_x) else None)
    test_mean = test.mean((0, 1))
    labels = task.test_y
    facts = {"temperature": temperature, "settings": settings.record(NETWORK_RECORD), "dimension": task.dimension,
             "num_data": task.num_data, "weight_decay": task.weight_decay, "prior_precision": task.prior_precision,
             "ood": task.ood_name, "num_test": int(len(labels)), "num_ood": int(len(task.ood_x)),
             "layout_error": layout_error, "seconds": seconds, "chains": chains, "checks": checks,
             "gradient_evaluations_sampling": int(sum(c["gradient_evaluations_sampling"] for c in chains)),
             "gradient_evaluations_warmup": int(sum(c["gradient_evaluations_warmup"] for c in chains)),
             "test_error_pct": float(100 * np.mean(test_mean.argmax(1) != labels)),
             "test_nll": float(-np.mean(np.log(np.clip(test_mean[np.arange(len(labels)), labels], 1e-300, None))))}
    arrays = {"test_probs": test_mean.astype(np.float32), "test_labels": labels,  # and what it is a reference of:
              "temperature": np.float64(temperature), "num_data": np.int64(task.num_data),
              "weight_decay": np.float64(task.weight_decay), "dimension": np.int64(task.dimension)}
    if ood_mean is not None:
        arrays["ood_probs"] = ood_mean.astype(np.float32)
    if not checks["accepted"]:
        raise ReferenceRejected(f"reference at T = {temperature:g} not accepted: " + "; ".join(checks["failed"])
                                + "; raise samples= or warmup=; nothing was written")
    if draws_dir is not None:  # the draws themselves (31 MB a temperature): out of git, for later floors and checks
        from csg.reporting import atomic_open

        Path(draws_dir).mkdir(parents=True, exist_ok=True)
        with atomic_open(Path(draws_dir) / f"draws_T{temperature:g}.npy") as handle:
            np.save(handle, draws)
    return arrays, facts
