"""The Table 5 samplers on the reference posteriors, and their distance to them.

Each chain is built from the Table 5 preset's command (``experiment=table5_<method>``) by :func:`csg.build`: the
model, schedule, sampler and parameter trace a ``train.py`` run builds, with the same seed streams
(:func:`csg.seed_streams`), and stepped as csg's loop steps it: full-batch mean loss, ``lr = factor * schedule.lr(k)``, temperature on in sampling stages.
``factor = 1`` is the Table 5 protocol; the other factors scale the whole schedule, for the step size
tuned per method.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig

from studies.accuracy.reference import Reference, Target
from csg.errors import ConfigError
from csg.evaluation import posterior_distance as distance
from csg.evaluation.ess import effective_sample_size


METHODS = {  # the table's name -> the Table 5 preset
    "SGLD": "table5_sgld",
    "cSGLD": "table5_csgld",
    "SGHMC": "table5_sghmc",
    "cSGHMC": "table5_csghmc",
    "SGLD constant": "table5_sgld_constant",
    "SGHMC constant": "table5_sghmc_constant",
}
STEP_FACTORS = (0.125, 0.25, 0.5, 1.0, 1.5)  # x the Table 5 schedule; 1 is the Table 5 protocol


def compose(method: str, target: Target, overrides: tuple[str, ...] = ()):
    """The Table 5 command of ``method`` on ``target``'s data and model, checked and composed (a :class:`csg.Built`
    of its config alone: ``.config``, and its schedule, sampler and trace)."""
    import csg

    model = ["model=mlp", f"model.hidden=[{target.hidden}]"] if target.model == "mlp" else []
    return csg.build([f"experiment={METHODS[method]}", f"data={target.data}", "data.download=false", *model,
                      *overrides], data=False)


def _mean_step_ratio(total_steps: int, gamma: float = 0.55) -> float:
    """lr_final / lr0 of the decreasing schedule whose mean step over the run is lr0 / 2 (bisection)."""
    from csg.schedules import Decreasing

    low, high = 1e-6, 1 - 1e-9
    for _ in range(60):
        ratio = (low + high) / 2
        schedule = Decreasing.from_endpoints(1.0, ratio, total_steps, gamma)
        mean = np.mean([schedule.lr(k) for k in range(0, total_steps, max(1, total_steps // 2000))])
        low, high = (ratio, high) if mean < 0.5 else (low, ratio)
    return (low + high) / 2


def table5_recipe(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, weight_decay: float,
                  total_steps: int, iterations: int = 200) -> dict[str, float]:
    """Table 5's step-size rule (configs/data/heart.yaml): L, the largest eigenvalue of the Hessian of the
    mean loss + (wd / 2) |theta|^2 at the posterior mode (L-BFGS, then power iteration on Hessian-vector
    products); lr0 = 1 / L, lr_constant = 1 / (2 L), and lr_final such that the decreasing schedule's
    mean step is 1 / (2 L) too. Changes ``model``'s parameters (to the mode)."""
    params = [p for p in model.parameters() if p.requires_grad]

    def objective() -> torch.Tensor:
        return F.cross_entropy(model(x), y) + weight_decay / 2 * sum((p**2).sum() for p in params)

    optimizer = torch.optim.LBFGS(params, max_iter=500, tolerance_grad=1e-9, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = objective()
        loss.backward()
        return loss

    optimizer.step(closure)
    vector = [torch.randn_like(p, generator=None) for p in params]
    curvature = 0.0
    for _ in range(iterations):
        norm = math.sqrt(sum(float((v**2).sum()) for v in vector))
        vector = [v / norm for v in vector]
        grads = torch.autograd.grad(objective(), params, create_graph=True)
        product = torch.autograd.grad(grads, params, grad_outputs=vector)
        curvature = sum(float((h * v).sum()) for h, v in zip(product, vector))
        vector = [h.detach() for h in product]
    lr0 = 1.0 / curvature
    return {"curvature": curvature, "lr0": lr0, "lr_final": lr0 * _mean_step_ratio(total_steps),
            "lr_constant": lr0 / 2}


def recipe_overrides(target: Target, x: torch.Tensor, y: torch.Tensor, total_steps: int) -> tuple[str, ...]:
    """The network's ``data.recipe`` (its prior and the Table 5 step rule); none for logistic regression,
    whose recipe is the data config's, checked to be the reference's prior."""
    if target.model == "logreg":
        return ()
    from csg.models import create_model

    torch.manual_seed(0)
    model = create_model("mlp", num_classes=2, input_shape=(x.shape[1],), hidden=(target.hidden,)).double()
    recipe = table5_recipe(model, x, y, target.weight_decay(len(y)), total_steps)
    return tuple(f"data.recipe.{key}={recipe[key]:.6g}" for key in ("lr0", "lr_final", "lr_constant")) + (
        f"data.recipe.weight_decay={target.weight_decay(len(y)):.6g}",)


@dataclass
class Chain:
    """One chain's draws (after the burn-in, sampling stages only) and what it cost."""

    draws: np.ndarray        # (draws, parameters)
    predictive: np.ndarray   # (draws, evaluation rows): p(y = 1 | x) under each draw
    steps: int
    seconds: float
    finite: bool


def run_chain(built, factor: float, seed: int, x: torch.Tensor, y: torch.Tensor) -> Chain:
    """One full-batch chain of the command ``built`` (:func:`compose`) with its schedule scaled by ``factor``
    (float64, CPU)."""
    import csg

    cfg = built.config
    streams = csg.seed_streams(seed)
    torch.manual_seed(streams["init"])
    model = built.new_model(2, (x.shape[1],)).double()
    total = int(cfg.trainer.epochs)
    schedule = built.schedule(total)
    trace = built.trace(schedule, total, model)
    sampler = built.sampler(model, len(y), torch.Generator().manual_seed(streams["noise"]))
    temperature = float(cfg.sampler.temperature)
    started = time.perf_counter()
    for k in range(total):
        for group in sampler.param_groups:
            group["lr"] = factor * schedule.lr(k)
            group["temperature"] = temperature if schedule.sampling(k) else 0.0
        sampler.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        if not torch.isfinite(loss):
            break
        loss.backward()
        sampler.step()
        trace(k)
    seconds = time.perf_counter() - started
    draws = trace.draws.numpy()
    finite = bool(np.isfinite(draws).all()) and trace.count == trace.buffer.shape[0]
    return Chain(draws, _predictive(model, draws, x) if finite else np.empty((0, len(y))), total, seconds, finite)


def _predictive(model: torch.nn.Module, draws: np.ndarray, x: torch.Tensor) -> np.ndarray:
    """p(y = 1 | x) at every row of ``x`` under every draw (the draws loaded into ``model`` in turn)."""
    from torch.func import functional_call

    names = [name for name, p in model.named_parameters() if p.requires_grad]
    shapes = [p.shape for _, p in model.named_parameters() if p.requires_grad]
    splits = torch.from_numpy(draws).split([math.prod(s) for s in shapes], dim=1)
    stacked = {n: part.reshape(len(draws), *s) for n, part, s in zip(names, splits, shapes)}

    def probability(params):
        return functional_call(model, params, (x,)).softmax(-1)[:, 1]

    with torch.no_grad():
        return torch.func.vmap(probability)(stacked).numpy()


def score(chain: Chain, reference: Reference) -> dict[str, float]:
    """Distances to ``reference`` and ESS of one chain (NaN for a chain that diverged).

    ESS (ArviZ ``ess``, method "mean", as Table 5) is the median over the parameters for logistic regression
    and over the evaluation rows' p(y = 1 | x) for the network (its parameters are not identified)."""
    nan = float("nan")
    scores = {"finite": chain.finite, "seconds": chain.seconds, "steps": chain.steps}
    if not chain.finite:
        return scores | {key: nan for key in ("ess", "ess_per_1000", "agreement", "tv", "mean_error_max",
                                               "mean_error_median", "sd_ratio_median", "w2", "mean_error_floor")}
    reference_p = distance.two_class(reference.predictive)
    chain_p = distance.two_class(chain.predictive.mean(0))
    parameters = reference.target["model"] == "logreg"
    ess = float(np.median(effective_sample_size(chain.draws if parameters else chain.predictive)))
    scores |= {"ess": ess, "ess_per_1000": 1000 * ess / chain.steps,
               "agreement": distance.predictive_agreement(chain_p, reference_p),
               "tv": distance.predictive_total_variation(chain_p, reference_p)}
    if parameters:
        mean, covariance = np.asarray(reference.mean), np.asarray(reference.covariance)
        sd = np.sqrt(np.diag(covariance))
        error = distance.standardised_mean_error(chain.draws, mean, sd)
        scores |= {"mean_error_max": float(error.max()), "mean_error_median": float(np.median(error)),
                   "sd_ratio_median": float(np.median(distance.sd_ratio(chain.draws, sd))),
                   "w2": distance.gaussian_w2(chain.draws.mean(0), np.cov(chain.draws, rowvar=False), mean, covariance),
                   # the median |error| an exact sampler with this ESS would show: 0.674 / sqrt(ESS)
                   "mean_error_floor": 0.6745 / math.sqrt(ess)}
    else:
        scores |= {key: nan for key in ("mean_error_max", "mean_error_median", "sd_ratio_median", "w2",
                                        "mean_error_floor")}
    return scores


def check_prior(cfg: DictConfig, target: Target, num_data: int) -> None:
    """The run's weight decay must be the reference's prior: wd = 1 / (N s^2)."""
    expected = target.weight_decay(num_data)
    if not math.isclose(float(cfg.sampler.weight_decay), expected, rel_tol=1e-3):
        raise ConfigError("data.recipe.weight_decay", float(cfg.sampler.weight_decay),
                          f"{expected:.6g} = 1 / (N s^2), the prior of the reference posterior {target.name}")
