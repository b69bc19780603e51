r"""An exact reference for a sampled last layer: NUTS on the frozen trunk's features.

With the trunk frozen at :math:`\theta_r`, a last layer :math:`h = (W, b)` (``nn.Linear``: ``W`` is (classes,
features)) sampled by csg targets the conditional posterior (docs/part.md)

.. math::
    p(h \mid \mathcal D, \theta_r) \propto \exp\big(-U(h)/T\big), \qquad
    U(h) = \sum_{i=1}^N -\log \mathrm{softmax}(W \phi_i + b)_{y_i} + \tfrac{N\,\mathrm{wd}}{2}\lVert h\rVert^2 ,

a softmax regression on the trunk's features :math:`\phi_i`: :math:`U` is convex, so the posterior is
log-concave, with one mode. :func:`reference_draws` finds that mode (L-BFGS), takes the Hessian there, and runs
NumPyro's NUTS with that Hessian's inverse as its (fixed, dense) inverse mass matrix: the chains see a nearly
standard-normal target and need short trajectories. The draws are accepted as :mod:`studies.accuracy.reference`
accepts its references (R-hat < 1.01 and bulk and tail ESS >= 400 on every coordinate).

:func:`compare` sets csg's members against the draws, on what a user sees (the predictive distribution on the test
points, its mutual information) and on the weights' marginal moments, each beside the same statistic of
:data:`MEMBERS`-draw ensembles of the exact posterior: what a perfect sampler with as many members gives.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studies.accuracy.reference import ESS_MIN, RHAT_MAX, ReferenceRejected, diagnostics
from studies.nuts import NutsSettings, require_numpyro, run_nuts

__all__ = ["HeadProblem", "PART_NUTS", "compare", "head_problem", "hessian", "predictive", "reference_draws"]


@dataclass(frozen=True)
class HeadProblem:
    """A last layer's conditional posterior given a frozen trunk, and csg's draws of it.

    ``train_x`` / ``test_x``: the trunk's features (N, d); ``start``: the head the part run started from (the SGD
    model's); ``members``: csg's samples of the head, each flattened as :func:`flatten` does (W row-major, then b)."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_data: int
    weight_decay: float
    temperature: float
    classes: int
    start: np.ndarray
    members: np.ndarray

    @property
    def dimension(self) -> int:
        return self.classes * (self.train_x.shape[1] + 1)


# the head's NUTS: the chains start at Laplace draws, so the warm-up adapts the step size only (200); 4 x 400 draws
# gave R-hat 1.018 on seed 0 of the study (ESS >= 654): not accepted, hence 1000
PART_NUTS = NutsSettings(chains=4, warmup=200, samples=1000, seed=0, target_accept=0.8)


def flatten(weight, bias) -> np.ndarray:
    return np.concatenate([np.asarray(weight, dtype=np.float64).ravel(), np.asarray(bias, dtype=np.float64).ravel()])


def logits(theta: np.ndarray, x: np.ndarray, classes: int) -> np.ndarray:
    """``x @ W.T + b`` for every head in ``theta`` (heads, D): (heads, rows, classes)."""
    theta = np.atleast_2d(theta)
    d = x.shape[1]
    w = theta[:, : classes * d].reshape(-1, classes, d)
    return np.einsum("nd,hcd->hnc", x, w) + theta[:, None, classes * d:]


def predictive(theta: np.ndarray, x: np.ndarray, classes: int) -> np.ndarray:
    """Each head's class probabilities on ``x``: (heads, rows, classes)."""
    z = logits(theta, x, classes)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=-1, keepdims=True)


def head_problem(run: Path, sgd_run: Path | None = None) -> HeadProblem:
    """The conditional posterior of a last-layer run (``sampler.params`` one module, the rest frozen) and its
    members: the features of the run's trunk on its training and test sets, its prior, temperature and start."""
    import torch

    from csg.posterior import Posterior

    posterior = Posterior.load(run, device="cpu")
    cfg = posterior.cfg
    params = list(cfg.sampler.params or [])
    if len(params) != 1 or str(cfg.sampler.get("rest", "frozen")) != "frozen":
        raise ValueError(f"{run}: a reference needs one sampled module with the rest frozen, got "
                         f"sampler.params={params}, sampler.rest={cfg.sampler.get('rest')}")
    name = str(params[0])
    model = posterior.model
    head = model.get_submodule(name)
    caught: list = []
    hook = head.register_forward_pre_hook(lambda module, inputs: caught.append(inputs[0].detach().double()))

    def features(loader):
        caught.clear()
        labels = []
        with torch.no_grad():
            model.eval()
            for x, y in loader:
                model(x)
                labels.append(y)
        return torch.cat(caught).numpy(), torch.cat(labels).numpy()

    members = []
    try:
        for index, (member, _) in enumerate(posterior):
            if index == 0:
                train = features(posterior.data.train_eval)
                test = features(posterior.data.test)
            members.append(flatten(member.get_submodule(name).weight.detach(), member.get_submodule(name).bias.detach()))
    finally:
        hook.remove()
    start_state = torch.load(Path(sgd_run or Path(str(cfg.model.weights)).parent) / "checkpoint.pt",
                             map_location="cpu", weights_only=True)
    start_state = start_state.get("model", start_state) if isinstance(start_state, dict) else start_state
    start = flatten(start_state[f"{name}.weight"], start_state[f"{name}.bias"])
    return HeadProblem(train_x=train[0], train_y=train[1].astype(np.int64), test_x=test[0],
                       test_y=test[1].astype(np.int64), num_data=int(posterior.data.num_train),
                       weight_decay=float(cfg.sampler.weight_decay), temperature=float(cfg.sampler.temperature),
                       classes=int(posterior.num_classes), start=start, members=np.stack(members))


def _potential(problem: HeadProblem):
    """U(h) / T as a JAX function of the flattened head (scaled so that the training set counts N times)."""
    import jax.numpy as jnp
    from jax.nn import log_softmax

    x, y = jnp.asarray(problem.train_x, dtype=jnp.float32), jnp.asarray(problem.train_y)
    c, d = problem.classes, problem.train_x.shape[1]
    scale = problem.num_data / len(problem.train_y)
    precision = problem.num_data * problem.weight_decay

    def potential(theta):
        # the logits in float32 (the cost: N x d x classes), their log-likelihood summed in float64
        z = (x @ theta[: c * d].reshape(c, d).T.astype(jnp.float32)).astype(theta.dtype) + theta[c * d:]
        nll = -jnp.take_along_axis(log_softmax(z, axis=1), y[:, None], axis=1).sum()
        return (scale * nll + 0.5 * precision * jnp.sum(theta**2)) / problem.temperature

    return potential


def hessian(problem: HeadProblem, theta: np.ndarray) -> np.ndarray:
    """The Hessian of U / T at ``theta``, in closed form: sum_i (diag p_i - p_i p_i^T) (x) phi_i phi_i^T over the
    features with a 1 appended, plus the prior's precision, reordered to :func:`flatten`'s order."""
    c, d = problem.classes, problem.train_x.shape[1]
    p = predictive(theta, problem.train_x, c)[0]
    scale = problem.num_data / len(problem.train_y)
    x = np.hstack([problem.train_x, np.ones((len(problem.train_x), 1))])
    blocks = np.empty((c, d + 1, c, d + 1))
    for k in range(c):
        for m in range(k, c):
            weights = scale * ((p[:, k] if k == m else 0.0) - p[:, k] * p[:, m])
            blocks[k, :, m, :] = (x * weights[:, None]).T @ x
            blocks[m, :, k, :] = blocks[k, :, m, :].T
    order = np.concatenate([(np.arange(c)[:, None] * (d + 1) + np.arange(d)[None, :]).ravel(),
                            np.arange(c) * (d + 1) + d])
    h = blocks.reshape(c * (d + 1), c * (d + 1))[np.ix_(order, order)]
    h[np.diag_indices_from(h)] += problem.num_data * problem.weight_decay
    return 0.5 * (h + h.T) / problem.temperature


def reference_draws(problem: HeadProblem, budget: NutsSettings = PART_NUTS) -> tuple[np.ndarray, dict]:
    """NUTS draws of the head (chains, samples, D) and their facts; a :class:`ReferenceRejected` unless R-hat < 1.01
    and bulk and tail ESS >= 400 on every coordinate and on every test point's predictive probability of its label."""
    if not problem.temperature > 0:
        raise ValueError(f"the reference needs a temperature > 0, got {problem.temperature}")
    require_numpyro()
    import jax
    import jax.numpy as jnp
    from scipy.optimize import minimize

    started = time.perf_counter()
    potential = _potential(problem)
    value_and_grad = jax.jit(jax.value_and_grad(potential))

    def fun(theta):
        value, grad = value_and_grad(jnp.asarray(theta))
        return float(value), np.asarray(grad, dtype=np.float64)

    mode = minimize(fun, problem.start, jac=True, method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-8})
    covariance = np.linalg.inv(hessian(problem, mode.x))
    covariance = 0.5 * (covariance + covariance.T)
    rng = np.random.default_rng(budget.seed)
    factor = np.linalg.cholesky(covariance)
    starts = mode.x + rng.standard_normal((budget.chains, mode.x.size)) @ factor.T  # Laplace draws: overdispersed enough
    run = run_nuts(budget, potential_fn=potential, init_params=starts, chain_method="sequential",
                   inverse_mass_matrix=covariance)
    draws = run.draws
    seconds = time.perf_counter() - started
    on_weights = diagnostics(draws)
    flat = draws.reshape(-1, draws.shape[-1])
    label_probs = np.take_along_axis(predictive(flat, problem.test_x, problem.classes), problem.test_y[None, :, None],
                                     axis=2)[..., 0].reshape(*draws.shape[:2], -1)
    on_predictions = diagnostics(label_probs)
    checks = {key: (max if key == "rhat_max" else min)(on_weights[key], on_predictions[key]) for key in on_weights}
    facts = {"nuts_chains": budget.chains, "nuts_warmup": budget.warmup, "nuts_samples": budget.samples,
             "nuts_seconds": seconds, "divergences": run.divergences,
             "gradient_evaluations": run.gradient_evaluations, "map_converged": bool(mode.success),
             **checks}
    if not (checks["rhat_max"] < RHAT_MAX and min(checks["ess_bulk_min"], checks["ess_tail_min"]) >= ESS_MIN):
        raise ReferenceRejected(f"the last layer's NUTS reference not accepted (R-hat {checks['rhat_max']:.3f}, "
                                f"allowed < {RHAT_MAX}; ESS bulk {checks['ess_bulk_min']:.0f} / tail "
                                f"{checks['ess_tail_min']:.0f}, allowed >= {ESS_MIN}): raise the NUTS budget")
    return draws, facts


def mutual_information(probs: np.ndarray) -> float:
    """Mean over the rows of H(mean of the members) - mean of H(member): probs (members, rows, classes)."""
    def entropy(p):
        return -(p * np.log(np.clip(p, 1e-300, None))).sum(axis=-1)

    return float((entropy(probs.mean(axis=0)) - entropy(probs).mean(axis=0)).mean())


def _tv(p: np.ndarray, q: np.ndarray) -> float:
    return float(0.5 * np.abs(p - q).sum(axis=-1).mean())


def _moments(heads: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> tuple[float, float]:
    """Mean over the coordinates of |mean - reference mean| / reference sd, and of |log(sd / reference sd)|."""
    return (float(np.mean(np.abs(heads.mean(axis=0) - mean) / sd)),
            float(np.mean(np.abs(np.log(heads.std(axis=0, ddof=1) / sd)))))


def compare(problem: HeadProblem, draws: np.ndarray, seed: int = 0) -> dict[str, float]:
    """csg's members against the reference draws, each statistic beside the mean of the same statistic over
    disjoint ensembles of as many exact draws (``*_exact``), and the start (the SGD head) where it has one:

    - ``tv_*``: mean over the test points of the total variation between the ensemble's predictive distribution
      and the reference's (for an exact ensemble: the reference without its draws);
    - ``mi_*``: the ensemble's mutual information on the test points (nats); ``mi_reference``: the reference's;
      ``mi_logerr_*``: |log(the ensemble's MI / the reference's)|;
    - ``zmean_*``: mean over the weights of |ensemble mean - reference mean| / reference sd;
    - ``logsd_*``: mean over the weights of |log(ensemble sd / reference sd)|; ``sd_ratio_csg``: the median of
      csg's sd / the reference's (below 1: csg's members spread less than the posterior).
    """
    flat = draws.reshape(-1, draws.shape[-1])
    k = len(problem.members)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(flat))
    probs = predictive(flat, problem.test_x, problem.classes)
    reference = probs.mean(axis=0)
    mean, sd = flat.mean(axis=0), flat.std(axis=0, ddof=1)
    members = predictive(problem.members, problem.test_x, problem.classes)
    start = predictive(problem.start, problem.test_x, problem.classes)
    mi_reference = mutual_information(probs)
    exact = {"tv": [], "mi": [], "mi_logerr": [], "zmean": [], "logsd": []}
    for group in order[: (len(flat) // k) * k].reshape(-1, k):
        rest = np.setdiff1d(np.arange(len(flat)), group)
        p = probs[group]
        exact["tv"].append(_tv(p.mean(axis=0), probs[rest].mean(axis=0)))
        exact["mi"].append(mutual_information(p))
        exact["mi_logerr"].append(abs(math.log(exact["mi"][-1] / mutual_information(probs[rest]))))
        z, s = _moments(flat[group], flat[rest].mean(axis=0), flat[rest].std(axis=0, ddof=1))
        exact["zmean"].append(z)
        exact["logsd"].append(s)
    zmean, logsd = _moments(problem.members, mean, sd)
    return {"members": k, "reference_draws": len(flat), "tv_csg": _tv(members.mean(axis=0), reference),
            "tv_exact": float(np.mean(exact["tv"])), "tv_start": _tv(start[0], reference),
            "mi_csg": mutual_information(members), "mi_exact": float(np.mean(exact["mi"])),
            "mi_reference": mi_reference, "mi_logerr_csg": abs(math.log(mutual_information(members) / mi_reference)),
            "mi_logerr_exact": float(np.mean(exact["mi_logerr"])), "zmean_csg": zmean, "zmean_exact": float(np.mean(exact["zmean"])),
            "logsd_csg": logsd, "logsd_exact": float(np.mean(exact["logsd"])),
            "sd_ratio_csg": float(np.median(problem.members.std(axis=0, ddof=1) / sd)),
            "error_reference_pct": float(100 * (reference.argmax(axis=1) != problem.test_y).mean()),
            "nll_reference": float(-np.log(reference[np.arange(len(problem.test_y)), problem.test_y]).mean())}
