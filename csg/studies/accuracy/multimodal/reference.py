r"""The network's reference posterior: many NUTS chains from dispersed starts, checked by parallel tempering.

The network's posterior (:class:`csg.studies.accuracy.multimodal.targets.StepNetwork`) has several modes (local maxima
that explain the data differently: which step a sharp unit fits, which ones a wide unit smooths over). We run
32 NUTS chains (NumPyro, :func:`csg.studies.accuracy.reference.run_nuts`) from prior draws. At this data set's noise the
chains cross between the modes, so they are exchangeable: the reference is their pooled draws, and R-hat across
the 32 independent chains (rank-normalised, < 1.01; bulk and tail ESS >= 400) is the check that they agree.
Stacking (Yao et al. 2022) weighs chains that do not mix to predict held-out data best, which is not the
posterior's mass on each mode, the quantity whose error this study measures; here it is not needed.

The modes' regions (:class:`Modes`): k-means (scikit-learn, 4 clusters, on the draws in units of the prior sd)
fitted by one Gaussian each; a point belongs to the mode whose Gaussian gives it the highest density. A mode's
weight is the posterior mass of its region: its share of the reference draws.

A second method, parallel tempering (:func:`parallel_tempering`: 16 independent runs of a ladder of MALA chains,
exact Metropolis-adjusted moves and the swaps of :func:`csg.samplers.replica.replica_exchange` on exact
energies), must agree (:func:`check`): each mode's weight within 3 standard errors (from the spread over its
independent runs, NUTS's likewise over its chains) + 0.01 of NUTS's, and predictive TV to NUTS below 0.02. Its cold
chain switches modes more slowly than NUTS's chains do (R-hat about 1.05 over 84,000 iterations): it must mix
across its runs at all (R-hat < 1.1, ESS >= 100), which makes its standard errors trustworthy, but is not held to
the reference's R-hat < 1.01. Otherwise :class:`ReferenceRejected` is raised and nothing is written.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from csg.studies.accuracy.multimodal.targets import StepNetwork
from csg.studies.accuracy.reference import ESS_MIN, RHAT_MAX, NutsSettings, ReferenceRejected, diagnostics, run_nuts

WEIGHT_TOLERANCE = 0.01   # besides 3 standard errors: mode weights of the two methods
PT_RHAT_MAX, PT_ESS_MIN = 1.1, 100  # tempering, the check: mixing across its runs, looser than the reference's
TV_TOLERANCE = 0.02       # predictive TV between the two methods' posteriors
X_TEST = np.linspace(-3.5, 3.5, 29)  # the inputs of the predictive TV (the data's range and a little beyond)


@dataclass(frozen=True)
class Settings:
    nuts_chains: int = 32
    nuts_warmup: int = 1000
    nuts_samples: int = 4000
    modes: int = 4
    pt_runs: int = 16
    pt_temperatures: int = 10
    pt_max_temperature: float = 30.0
    pt_warmup: int = 4000
    pt_samples: int = 80_000
    pt_thin: int = 20
    draws: int = 4000    # kept reference draws (thinned from the pooled NUTS draws)
    seed: int = 0


class Modes:
    """The modes as Gaussian fits (mean, covariance) in parameter space; a point belongs to the mode whose fit
    gives it the highest density."""

    def __init__(self, means: np.ndarray, covariances: np.ndarray):
        self.means, self.covariances = np.asarray(means, dtype=np.float64), np.asarray(covariances, dtype=np.float64)
        self._chol = np.linalg.cholesky(self.covariances)
        self._logdet = 2 * np.log(np.diagonal(self._chol, axis1=1, axis2=2)).sum(1)

    def __len__(self) -> int:
        return len(self.means)

    def log_densities(self, theta: np.ndarray) -> np.ndarray:
        """log N(theta | m_k, S_k) for every mode: (points, modes)."""
        theta = np.asarray(theta, dtype=np.float64).reshape(-1, self.means.shape[1])
        out = np.empty((len(theta), len(self)))
        for k, (mean, chol) in enumerate(zip(self.means, self._chol)):
            z = np.linalg.solve(chol, (theta - mean).T)
            out[:, k] = -0.5 * (z**2).sum(0) - 0.5 * self._logdet[k] - 0.5 * theta.shape[1] * math.log(2 * math.pi)
        return out

    def assign(self, theta: np.ndarray) -> np.ndarray:
        return self.log_densities(theta).argmax(1)


def find_modes(draws: np.ndarray, scale: np.ndarray, count: int, seed: int) -> Modes:
    """k-means clusters of ``draws`` (points, dim) in units of ``scale``, each fitted by a Gaussian, ordered by size."""
    from sklearn.cluster import KMeans

    labels = KMeans(count, n_init=10, random_state=seed).fit_predict(draws / scale)
    order = np.argsort(-np.bincount(labels, minlength=count), kind="stable")
    pooled = [draws[labels == k] for k in order]
    return Modes(np.stack([p.mean(0) for p in pooled]), np.stack([np.cov(p, rowvar=False) for p in pooled]))


def parallel_tempering(target: StepNetwork, settings: Settings, generator: torch.Generator) -> np.ndarray:
    r"""Cold-chain draws of ``pt_runs`` independent parallel-tempering runs: (runs, kept, dim).

    Each run is a ladder of ``pt_temperatures`` MALA chains on :math:`e^{-U/T}`, T geometric from 1 to
    ``pt_max_temperature``, started from prior draws; after every move neighbouring temperatures propose a
    swap (even pairs, then odd, alternately). MALA's step of each temperature adapts in the warm-up towards an
    acceptance of 0.57 and then stays fixed, so the chains are exact Metropolis-Hastings chains."""
    from csg.samplers.replica import replica_exchange

    runs, count, dim = settings.pt_runs, settings.pt_temperatures, target.dim
    temperatures = [settings.pt_max_temperature ** (i / (count - 1)) for i in range(count)]
    t = torch.tensor(temperatures, dtype=torch.float64)[None, :, None]
    theta = torch.randn(runs, count, dim, generator=generator, dtype=torch.float64) * target.tau
    log_step = torch.full((count,), math.log(1e-3), dtype=torch.float64)
    energy, grad = target.energy(theta), target.grad(theta)
    kept = []
    for k in range(settings.pt_warmup + settings.pt_samples):
        step = log_step.exp()[None, :, None]
        proposal = theta - step * grad / t + (2 * step).sqrt() * torch.randn(theta.shape, generator=generator, dtype=torch.float64)
        energy_p, grad_p = target.energy(proposal), target.grad(proposal)
        forward = (proposal - theta + step * grad / t).pow(2).sum(-1) / (4 * step[..., 0])
        backward = (theta - proposal + step * grad_p / t).pow(2).sum(-1) / (4 * step[..., 0])
        log_alpha = (energy - energy_p) / t[..., 0] - backward + forward
        accept = torch.rand(log_alpha.shape, generator=generator, dtype=torch.float64).log() < torch.nan_to_num(log_alpha, nan=-math.inf)
        theta = torch.where(accept[..., None], proposal, theta)
        energy, grad = torch.where(accept, energy_p, energy), torch.where(accept[..., None], grad_p, grad)
        if k < settings.pt_warmup:
            rate = log_alpha.clamp(max=0).exp().nan_to_num(0.0).mean(0)
            log_step += 0.05 * (rate - 0.57)
        positions = torch.cat([theta, grad], -1)  # the gradients travel with their positions
        replica_exchange(positions, energy, temperatures, offset=k % 2, generator=generator)
        theta, grad = positions[..., :dim].contiguous(), positions[..., dim:].contiguous()
        if k >= settings.pt_warmup and (k - settings.pt_warmup) % settings.pt_thin == 0:
            kept.append(theta[:, 0].clone())
    return torch.stack(kept, 1).numpy()


def predictive_fits(target: StepNetwork, theta: np.ndarray) -> np.ndarray:
    """f_theta at :data:`X_TEST` for every draw: (draws, inputs)."""
    with torch.no_grad():
        return target.predict(torch.from_numpy(np.asarray(theta)), torch.from_numpy(X_TEST)).numpy()


@dataclass
class NetworkReference:
    """The accepted reference: draws, modes, and how it was checked."""

    draws: np.ndarray            # (draws, 7): NUTS draws mixed by the mode weights
    modes: Modes
    weights: np.ndarray          # the modes' weights (importance sampling)
    summary: dict                # settings, checks, both methods' weights, timings

    def save(self, stem: str | Path) -> None:
        from csg.io.atomic import atomic_open, atomic_write_text

        stem = Path(stem)
        with atomic_open(stem.with_suffix(".npz")) as handle:
            np.savez_compressed(handle, draws=self.draws, means=self.modes.means, covariances=self.modes.covariances,
                                weights=self.weights)
        atomic_write_text(stem.with_suffix(".json"), json.dumps(self.summary, indent=1) + "\n")

    @classmethod
    def load(cls, stem: str | Path) -> NetworkReference:
        stem = Path(stem)
        arrays = np.load(stem.with_suffix(".npz"))
        return cls(arrays["draws"], Modes(arrays["means"], arrays["covariances"]), arrays["weights"],
                   json.loads(stem.with_suffix(".json").read_text()))


def check(summary: dict) -> None:
    """A one-line :class:`ReferenceRejected` naming every failed check (module docstring)."""
    failures = []
    for name, facts, rhat, ess in (("NUTS chains", summary["nuts"], RHAT_MAX, ESS_MIN),
                                   ("parallel tempering runs", summary["tempering"], PT_RHAT_MAX, PT_ESS_MIN)):
        if facts["rhat_max"] >= rhat or min(facts["ess_bulk_min"], facts["ess_tail_min"]) < ess:
            failures.append(f"the {name} disagree (R-hat {facts['rhat_max']:.3f}, allowed < {rhat}; ESS bulk "
                            f"{facts['ess_bulk_min']:.0f} / tail {facts['ess_tail_min']:.0f}, allowed >= {ess})")
    pt = summary["tempering"]
    w, se = np.array(summary["weights"]), np.array(summary["weights_se"])
    w_pt, se_pt = np.array(pt["weights"]), np.array(pt["weights_se"])
    gap, allowed = np.abs(w - w_pt), 3 * np.sqrt(se**2 + se_pt**2) + WEIGHT_TOLERANCE
    if (gap > allowed).any():
        k = int(np.argmax(gap - allowed))
        failures.append(f"mode {k}'s weight {w[k]:.3f} (NUTS) against {w_pt[k]:.3f} (tempering), allowed "
                        f"+- {allowed[k]:.3f}")
    if pt["predictive_tv"] >= TV_TOLERANCE:
        failures.append(f"predictive TV between NUTS and tempering {pt['predictive_tv']:.3f}, allowed < {TV_TOLERANCE}")
    if failures:
        raise ReferenceRejected(f"network reference not accepted: {'; '.join(failures)}; nothing was written")


def _shares(assigned: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per chain (rows of ``assigned``), the share of its draws in each mode; their mean and standard error."""
    indicators = (assigned[..., None] == np.arange(count)).astype(np.float64)
    per_chain = indicators.mean(1)
    return indicators, per_chain.mean(0), per_chain.std(0, ddof=1) / math.sqrt(len(per_chain))


def _diagnostics(theta: np.ndarray, indicators: np.ndarray) -> dict[str, float]:
    """R-hat and ESS over the parameters and the mode indicators (constant ones have none) of (chains, draws)."""
    varying = [k for k in range(indicators.shape[-1]) if 0 < indicators[..., k].mean() < 1]
    return diagnostics(np.concatenate([theta, indicators[..., varying]], -1))


def build(settings: Settings = Settings(), log=print) -> NetworkReference:
    """NUTS from dispersed starts, the modes, the tempering check; raises :class:`ReferenceRejected`."""
    from csg.studies.accuracy.multimodal.metrics import predictive_tv
    from csg.studies.accuracy.reference import require_numpyro

    require_numpyro()
    import jax.numpy as jnp

    target = StepNetwork()
    rng = np.random.default_rng(settings.seed)
    tau = target.tau.numpy()
    starts = rng.normal(size=(settings.nuts_chains, target.dim)) * tau
    nuts = NutsSettings(chains=settings.nuts_chains, warmup=settings.nuts_warmup, samples=settings.nuts_samples,
                        seed=settings.seed)
    draws, facts = run_nuts(target.numpyro_model(), nuts, init_params={"theta": jnp.asarray(starts)})
    theta = np.array(draws["theta"])
    pooled = theta.reshape(-1, target.dim)
    modes = find_modes(pooled[:: max(1, len(pooled) // 20_000)], tau, settings.modes, settings.seed)
    indicators, weights, weights_se = _shares(modes.assign(pooled).reshape(theta.shape[:2]), len(modes))
    nuts_facts = {"chains": settings.nuts_chains, "warmup": settings.nuts_warmup, "samples": settings.nuts_samples,
                  **_diagnostics(theta, indicators), "seconds": round(facts["seconds"], 1),
                  "divergences": facts["divergences"], "gradient_evaluations": facts["gradient_evaluations"]}
    log(f"network: NUTS {settings.nuts_chains} chains x ({settings.nuts_warmup} + {settings.nuts_samples}), "
        f"{facts['seconds']:.0f} s, R-hat {nuts_facts['rhat_max']:.4f}, {facts['divergences']} divergences; mode weights "
        f"{np.round(weights, 3).tolist()} +- {np.round(weights_se, 3).tolist()}")
    reference = pooled[rng.choice(len(pooled), settings.draws, replace=False)]
    started, threads = time.perf_counter(), torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: threads cost more than they give
    try:
        cold = parallel_tempering(target, settings, torch.Generator().manual_seed(settings.seed))
    finally:
        torch.set_num_threads(threads)
    seconds_pt = time.perf_counter() - started
    pt_indicators, pt_weights, pt_se = _shares(modes.assign(cold.reshape(-1, target.dim)).reshape(cold.shape[:2]),
                                               len(modes))
    fits_nuts, fits_pt = predictive_fits(target, reference), predictive_fits(target, cold.reshape(-1, target.dim))
    tempering = {"runs": settings.pt_runs, "temperatures": settings.pt_temperatures,
                 "max_temperature": settings.pt_max_temperature, "warmup": settings.pt_warmup,
                 "samples": settings.pt_samples, "thin": settings.pt_thin, **_diagnostics(cold, pt_indicators),
                 "weights": pt_weights.round(5).tolist(), "weights_se": pt_se.round(5).tolist(),
                 "predictive_tv": predictive_tv(fits_nuts[:2000], fits_pt[:: max(1, len(fits_pt) // 2000)], target.noise),
                 "seconds": round(seconds_pt, 1)}
    log(f"network: tempering {settings.pt_runs} runs, R-hat {tempering['rhat_max']:.4f}, mode weights "
        f"{np.round(pt_weights, 3).tolist()} +- {np.round(pt_se, 3).tolist()}, predictive TV to NUTS "
        f"{tempering['predictive_tv']:.4f}, {seconds_pt:.0f} s")
    with torch.no_grad():
        energy_min = float(target.energy(torch.from_numpy(pooled)).min())
    summary = {"target": "network", "settings": asdict(settings), "data_noise": target.noise, "num_data": len(target.y),
               "prior_sd": list(target.prior_sd), "nuts": nuts_facts, "weights": weights.round(5).tolist(),
               "weights_se": weights_se.round(5).tolist(), "tempering": tempering, "energy_min": energy_min}
    check(summary)
    return NetworkReference(reference, modes, weights, summary)
