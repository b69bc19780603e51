"""Gold-standard posteriors from NumPyro's NUTS, against which the SG-MCMC samplers are scored.

The field's way to say whether a chain samples the right distribution (Izmailov et al., "What are
Bayesian neural network posteriors really like?", 2021): long runs of a trusted full-batch sampler
from several starts, accepted only when the chains agree (R-hat) and carry enough independent draws
(ESS). Each target here is the posterior our samplers target (:class:`csg.samplers.SGLD`),

    p(theta | D) ~ exp(-U(theta)),   U = sum_i -log p(y_i | x_i, theta) + |theta|^2 / (2 s^2),

with the prior standard deviation s set by the run's weight decay: prior precision N wd = 1 / s^2.

NumPyro (JAX) rather than Pyro (PyTorch): its NUTS is compiled end to end by XLA, two orders of
magnitude faster per gradient on a CPU than Pyro's, which is what makes 10^5-draw references of a
neural network fit in minutes. JAX and NumPyro are an optional extra (``pip install -e ".[reference]"``);
nothing here is imported by a run, and the summaries under ``results/csgmcmc/reference/`` need neither.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from csg.errors import CsgError
from studies.nuts import NutsSettings, require_numpyro, run_nuts

RHAT_MAX = 1.01      # Vehtari et al. (2021): accept chains whose rank-normalised R-hat is below 1.01 ...
ESS_MIN = 400        # ... and whose bulk and tail ESS are at least 100 per chain (400 for 4 chains)


@dataclass(frozen=True)
class Target:
    """A posterior to reference: a model on a data set of the project, with its prior."""

    name: str
    data: str                       # a registered UCI data set (csg.data.uci)
    model: str                      # "logreg" or "mlp"
    hidden: int = 0                 # the MLP's hidden units (one ReLU layer)
    prior_variance: float = 100.0   # s^2; weight decay 1 / (N s^2)

    def weight_decay(self, num_data: int) -> float:
        return 1.0 / (num_data * self.prior_variance)


TARGETS = {
    # Table 5's Bayesian logistic regression: prior N(0, 100 I) on weights and intercept (configs/data/*.yaml)
    "heart_logreg": Target("heart_logreg", "heart", "logreg"),
    "german_logreg": Target("german_logreg", "german", "logreg"),
    # a one-hidden-layer ReLU network, 13-16-2 (258 weights), prior N(0, I): a wide prior on a network makes
    # its posterior diffuse and its chains slow, and N(0, I) is the usual standard-normal BNN prior
    "heart_mlp": Target("heart_mlp", "heart", "mlp", hidden=16, prior_variance=1.0),
}


# the references' NUTS (make reference: warmup= and samples= replace these; the multimodal probe's chains use it too)
ACCURACY_NUTS = NutsSettings(chains=4, warmup=1000, samples=5000, seed=0, target_accept=0.9)
ACCURACY_RECORD = ("chains", "warmup", "samples", "seed", "target_accept")  # the settings a reference's JSON records


class ReferenceRejected(CsgError):
    """The NUTS chains failed a convergence check: no reference is written."""

    exit_code = 1


def numpyro_model(target: Target):
    """The NumPyro model of ``target``: the same likelihood and prior as the torch model and sampler.

    Parameters are named and shaped as the torch model's (``nn.Linear``'s weight is (out, in)), so that
    their concatenation in order is ``torch.cat([p.flatten() for p in model.parameters()])``."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    scale = float(np.sqrt(target.prior_variance))

    def weight(name: str, shape: tuple[int, ...]):
        return numpyro.sample(name, dist.Normal(0.0, scale).expand(list(shape)).to_event(len(shape)))

    def model(x, y=None):
        d = x.shape[1]
        if target.model == "logreg":
            w, b = weight("linear.weight", (1, d)), weight("linear.bias", (1,))
            z = (x @ w.T + b)[:, 0]
            logits = jnp.stack([jnp.zeros_like(z), z], axis=1)
        else:
            w1, b1 = weight("1.weight", (target.hidden, d)), weight("1.bias", (target.hidden,))
            w2, b2 = weight("3.weight", (2, target.hidden)), weight("3.bias", (2,))
            logits = jnp.maximum(x @ w1.T + b1, 0.0) @ w2.T + b2
        numpyro.deterministic("p1", jnp.exp(logits[:, 1] - jnp.logaddexp(logits[:, 0], logits[:, 1])))
        numpyro.sample("y", dist.Categorical(logits=logits), obs=y)

    return model


def diagnostics(draws: np.ndarray) -> dict[str, float]:
    """Worst rank-normalised R-hat and smallest bulk and tail ESS (ArviZ's, every column at once:
    :mod:`csg.evaluation.convergence`) over the columns of ``draws`` (chains, samples, columns)."""
    from csg.evaluation.convergence import ess, rank_rhat

    draws = np.asarray(draws, dtype=np.float64)
    rhat, bulk, tail = rank_rhat(draws), ess(draws, "bulk"), ess(draws, "tail")
    return {"rhat_max": float(rhat.max()), "ess_bulk_min": float(bulk.min()), "ess_tail_min": float(tail.min())}


def accept(name: str, checks: dict[str, float]) -> None:
    """A :class:`ReferenceRejected` naming what failed unless R-hat < 1.01 and both ESS >= 400."""
    if checks["rhat_max"] < RHAT_MAX and min(checks["ess_bulk_min"], checks["ess_tail_min"]) >= ESS_MIN:
        return
    raise ReferenceRejected(
        f"{name}: NUTS not accepted (R-hat {checks['rhat_max']:.3f}, allowed < {RHAT_MAX}; ESS bulk "
        f"{checks['ess_bulk_min']:.0f} / tail {checks['ess_tail_min']:.0f}, allowed >= {ESS_MIN}); "
        "raise --samples or --warmup; nothing was written")


def flat_parameters(draws: dict[str, np.ndarray], names: list[str]) -> np.ndarray:
    """The draws of the sites ``names`` concatenated in order: (chains, samples, parameters)."""
    return np.concatenate([draws[n].reshape(*draws[n].shape[:2], -1) for n in names], axis=-1)


@dataclass
class Reference:
    """What a comparison needs of a reference posterior, and how it was accepted."""

    target: dict[str, Any]
    data_source: str
    num_data: int
    settings: dict[str, Any]
    checked_on: str                     # "parameters" (logistic regression) or "predictions" (the network)
    rhat_max: float
    ess_bulk_min: float
    ess_tail_min: float
    divergences: int
    gradient_evaluations: int
    seconds: float
    predictive: list[float]             # p(y = 1 | x) on the evaluation rows, averaged over the draws
    mean: list[float] = field(default_factory=list)          # the parameters' moments (logistic regression)
    covariance: list[list[float]] = field(default_factory=list)

    def save(self, path: str | Path) -> None:
        from csg.reporting import write_text

        write_text(path, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Reference:
        return cls(**json.loads(Path(path).read_text()))


def load_data(target: Target, root: str = "data/uci", source: str = "auto") -> tuple[np.ndarray, np.ndarray, str]:
    """The standardised features and labels the training runs see (Table 5: every row, in-sample evaluation)."""
    from csg.data.bundle import load_splits

    splits = load_splits(target.data, root=root, download=False, source=source)
    x, y = splits.train.tensors
    return x.double().numpy(), y.numpy(), splits.source


def build_reference(target: Target, settings: NutsSettings, root: str = "data/uci") -> Reference:
    """NUTS on ``target``; a :class:`ReferenceRejected` unless R-hat < 1.01 and ESS >= 400 everywhere.

    Logistic regression is checked on every parameter. The network's parameters are not identified
    (its hidden units can be permuted), so it is checked, as Izmailov et al. do, on its predictions:
    p(y = 1 | x) at every evaluation row."""
    require_numpyro()
    import jax.numpy as jnp

    x, y, source = load_data(target, root)
    run = run_nuts(settings, model=numpyro_model(target), model_args=(jnp.asarray(x), jnp.asarray(y)),
                   chain_method="vectorized")
    draws = run.draws  # {site: (chains, samples, ...)}
    logreg = target.model == "logreg"
    checked = flat_parameters(draws, ["linear.weight", "linear.bias"]) if logreg else draws["p1"]
    checks = diagnostics(checked)
    accept(target.name, checks)
    reference = Reference(target=asdict(target), data_source=source, num_data=len(y),
                          settings=settings.record(ACCURACY_RECORD),
                          checked_on="parameters" if logreg else "predictions", divergences=run.divergences,
                          gradient_evaluations=run.gradient_evaluations, seconds=round(run.seconds, 1),
                          predictive=draws["p1"].reshape(-1, len(y)).mean(0).tolist(), **checks)
    if logreg:
        flat = checked.reshape(-1, checked.shape[-1])
        reference.mean, reference.covariance = flat.mean(0).tolist(), np.cov(flat, rowvar=False).tolist()
    return reference
