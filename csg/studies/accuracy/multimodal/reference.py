r"""The network with real barriers: its minima, its barriers, and whether a reference can be trusted in budget.

The 1-2-1 tanh network (:class:`csg.studies.accuracy.multimodal.targets.StepNetwork`) at the data noise of issue 36
(s = 0.3) has barriers of 3.4 to 4.7 nats between its minima: nothing traps a chain there. At s = 0.15 the
likelihood's energy is four times larger and so are the barriers. :func:`probe` measures, at both noises:

- **the minima**: gradient descent (Adam, vectorised) from prior draws, polished by L-BFGS (scipy), merged when
  they agree to 0.05 prior sd; the *main* minima are those within :data:`MAIN_NATS` of the lowest (the rest
  carry a Laplace mass below about e^-5 of the main ones);
- **the barriers**: minimum-energy paths between every pair of main minima (:mod:`.barriers`);

and at s = 0.15 what a reference would rest on:

- **NUTS from each main minimum** (NumPyro, 8 chains each): whether the chains stay in the minimum's basin
  (the share of draws nearest to it) and their R-hat;
- **parallel tempering** (:func:`parallel_tempering`: independent runs of a ladder of MALA chains with
  replica-exchange swaps, exact Metropolis-Hastings): the mode weights and their standard error over the runs.

A reference is accepted only if the NUTS chains stay in their basins with R-hat below 1.01 (so that each mode's
shape is trusted) and tempering's weights carry a standard error of at most :data:`WEIGHT_SE_MAX` (the
precision the study's verdicts need: its equivalence margin is 0.02). The facts and the verdict go to
``results/csgmcmc/reference/network_multimodal.json``, whose ``report`` lines the study's report quotes.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from csg.studies.accuracy.multimodal.barriers import minimum, minimum_energy_path
from csg.studies.accuracy.multimodal.targets import StepNetwork

MAIN_NATS = 5.0         # main minima: at most this far above the lowest
WEIGHT_SE_MAX = 0.02    # a reference's mode weights must be this precise


@dataclass(frozen=True)
class Settings:
    noises: tuple[float, ...] = (0.3, 0.15)
    starts: int = 1000
    descent: int = 3000
    nuts_chains: int = 8
    nuts_warmup: int = 1000
    nuts_samples: int = 2000
    pt_runs: int = 16
    pt_temperatures: int = 12
    pt_max_temperature: float = 30.0
    pt_warmup: int = 4000
    pt_samples: int = 80_000
    pt_thin: int = 20
    seed: int = 0


def find_minima(target: StepNetwork, starts: int, steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct local minima reached from ``starts`` prior draws, and their energies, lowest first."""
    generator = torch.Generator().manual_seed(seed)
    theta = (torch.randn(starts, target.dim, generator=generator, dtype=torch.float64) * target.tau).requires_grad_(True)
    optimiser = torch.optim.Adam([theta], lr=0.02)
    for _ in range(steps):
        optimiser.zero_grad()
        target.energy(theta).sum().backward()
        optimiser.step()
    theta = theta.detach().numpy()
    tau = target.tau.numpy()
    candidates = []
    for point in theta[np.unique(np.round(theta / tau, 1), axis=0, return_index=True)[1]]:
        candidates.append(minimum(target, point))
    found: list[np.ndarray] = []
    for point in candidates:
        if all(np.abs((point - other) / tau).max() > 0.05 for other in found):
            found.append(point)
    minima = np.stack(found)
    with torch.no_grad():
        energy = target.energy(torch.from_numpy(minima)).numpy()
    order = np.argsort(energy)
    return minima[order], energy[order]


def parallel_tempering(target: StepNetwork, settings: Settings, generator: torch.Generator) -> np.ndarray:
    r"""Cold-chain draws of ``pt_runs`` independent parallel-tempering runs: (runs, kept, dim).

    Each run is a ladder of ``pt_temperatures`` MALA chains on :math:`e^{-U/T}`, T geometric from 1 to
    ``pt_max_temperature``, started from prior draws; after every move neighbouring temperatures propose a swap
    (even pairs, then odd). MALA's step of each temperature adapts in the warm-up towards an acceptance of 0.57,
    then stays fixed, so the chains are exact Metropolis-Hastings chains."""
    from csg.samplers.replica import replica_exchange

    runs, count, dim = settings.pt_runs, settings.pt_temperatures, target.dim
    temperatures = [settings.pt_max_temperature ** (i / (count - 1)) for i in range(count)]
    t = torch.tensor(temperatures, dtype=torch.float64)[None, :, None]
    theta = torch.randn(runs, count, dim, generator=generator, dtype=torch.float64) * target.tau
    log_step = torch.full((count,), math.log(1e-3), dtype=torch.float64)
    energy, grad = target.energy_and_grad(theta)
    kept = []
    for k in range(settings.pt_warmup + settings.pt_samples):
        step = log_step.exp()[None, :, None]
        proposal = theta - step * grad / t + (2 * step).sqrt() * torch.randn(theta.shape, generator=generator, dtype=torch.float64)
        energy_p, grad_p = target.energy_and_grad(proposal)
        forward = (proposal - theta + step * grad / t).pow(2).sum(-1) / (4 * step[..., 0])
        backward = (theta - proposal + step * grad_p / t).pow(2).sum(-1) / (4 * step[..., 0])
        log_alpha = (energy - energy_p) / t[..., 0] - backward + forward
        accept = torch.rand(log_alpha.shape, generator=generator, dtype=torch.float64).log() < torch.nan_to_num(log_alpha, nan=-math.inf)
        theta = torch.where(accept[..., None], proposal, theta)
        energy, grad = torch.where(accept, energy_p, energy), torch.where(accept[..., None], grad_p, grad)
        if k < settings.pt_warmup:
            log_step += 0.05 * (log_alpha.clamp(max=0).exp().nan_to_num(0.0).mean(0) - 0.57)
        positions = torch.cat([theta, grad], -1)  # the gradients travel with their positions
        replica_exchange(positions, energy, temperatures, offset=k % 2, generator=generator)
        theta, grad = positions[..., :dim].contiguous(), positions[..., dim:].contiguous()
        if k >= settings.pt_warmup and (k - settings.pt_warmup) % settings.pt_thin == 0:
            kept.append(theta[:, 0].clone())
    return torch.stack(kept, 1).numpy()


def _nearest(theta: np.ndarray, minima: np.ndarray, tau: np.ndarray) -> np.ndarray:
    return (((theta[..., None, :] - minima) / tau) ** 2).sum(-1).argmin(-1)


def _landscape(noise: float, settings: Settings, log) -> dict:
    target = StepNetwork(noise=noise)
    minima, energy = find_minima(target, settings.starts, settings.descent, settings.seed)
    main = energy <= energy[0] + MAIN_NATS
    minima, depth = minima[main], energy[main]
    hessians = [torch.autograd.functional.hessian(lambda z: target.energy(z[None])[0], torch.from_numpy(m)) for m in minima]
    eigen = [torch.linalg.eigvalsh(h).numpy() for h in hessians]
    pairs = list(itertools.combinations(range(len(minima)), 2))
    scale = max(float(e.max()) for e in eigen)
    _, path_energy = minimum_energy_path(target, minima[[i for i, _ in pairs]], minima[[j for _, j in pairs]],
                                         step=0.25 / scale, iterations=60_000)
    barriers = [{"pair": [i, j], "path_max": float(e.max()), "from_first": float(e.max() - depth[i]),
                 "from_second": float(e.max() - depth[j])} for (i, j), e in zip(pairs, path_energy)]
    log(f"network s = {noise}: {int(main.sum())} main minima of {len(energy)} found, barriers "
        f"{min(min(b['from_first'], b['from_second']) for b in barriers):.2f} to "
        f"{max(max(b['from_first'], b['from_second']) for b in barriers):.2f} nats")
    return {"noise": noise, "minima_found": int(len(energy)), "minima": minima.tolist(), "energies": depth.tolist(),
            "curvature_max": scale, "curvature_min": min(float(e.min()) for e in eigen), "barriers": barriers,
            "laplace_log_mass": [float(-d - 0.5 * np.log(e).sum()) for d, e in zip(depth, eigen)]}


def probe(settings: Settings = Settings(), log=print) -> dict:
    """The facts of the module docstring, with ``accepted`` and the report's lines."""
    from csg.studies.accuracy.reference import NutsSettings, diagnostics, require_numpyro, run_nuts

    require_numpyro()
    import jax.numpy as jnp

    started = time.perf_counter()
    facts = {"settings": asdict(settings), "landscapes": [_landscape(noise, settings, log) for noise in settings.noises]}
    real = facts["landscapes"][-1]
    target, minima = StepNetwork(noise=real["noise"]), np.array(real["minima"])
    tau = target.tau.numpy()
    nuts = []
    for k, point in enumerate(minima):
        starts = point + 0.01 * np.random.default_rng(k).normal(size=(settings.nuts_chains, target.dim))
        draws, run = run_nuts(target.numpyro_model(), NutsSettings(chains=settings.nuts_chains, warmup=settings.nuts_warmup,
                                                                 samples=settings.nuts_samples, seed=settings.seed + k),
                              init_params={"theta": jnp.asarray(starts)})
        stay = float((_nearest(draws["theta"], minima, tau) == k).mean())
        nuts.append({"minimum": k, "stay_share": stay, "divergences": run["divergences"], **diagnostics(draws["theta"])})
    threads, pt_started = torch.get_num_threads(), time.perf_counter()
    torch.set_num_threads(1)
    try:
        cold = parallel_tempering(target, settings, torch.Generator().manual_seed(settings.seed))
    finally:
        torch.set_num_threads(threads)
    pt_seconds = time.perf_counter() - pt_started
    shares = np.stack([(_nearest(cold, minima, tau) == k).mean(1) for k in range(len(minima))], 1)
    weights, weights_se = shares.mean(0), shares.std(0, ddof=1) / math.sqrt(len(shares))
    accepted = all(n["stay_share"] > 0.99 and n["rhat_max"] < 1.01 for n in nuts) and float(weights_se.max()) <= WEIGHT_SE_MAX
    facts.update(nuts=nuts, tempering={"weights": weights.tolist(), "weights_se": weights_se.tolist(),
                                       "runs": settings.pt_runs, "iterations": settings.pt_warmup + settings.pt_samples,
                                       "seconds": pt_seconds},
                 accepted=accepted, seconds=time.perf_counter() - started)
    facts["report"] = report_lines(facts)
    log(f"network: reference {'accepted' if accepted else 'not accepted'} ({facts['seconds']:.0f} s)")
    return facts


def report_lines(facts: dict) -> list[str]:
    """What the study's report says about the network (module docstring), from the probe's facts."""
    low, high = facts["landscapes"][0], facts["landscapes"][-1]

    def span(landscape):
        values = [v for b in landscape["barriers"] for v in (b["from_first"], b["from_second"])]
        return f"{min(values):.2f} to {max(values):.2f}"

    nuts, pt = facts["nuts"], facts["tempering"]
    stays = ", ".join(f"{n['stay_share']:.2f}" for n in nuts)
    rhats = ", ".join(f"{n['rhat_max']:.2f}" for n in nuts)
    weights = ", ".join(f"{w:.2f} +- {s:.2f}" for w, s in zip(pt["weights"], pt["weights_se"]))
    verdict = ("so the network joins no verdict of this report: its minimum-energy paths show real barriers, but no "
               "reference of its mode weights that this project would trust was reached."
               if not facts["accepted"] else "a reference was accepted.")
    runs_needed = (max(pt["weights_se"]) / WEIGHT_SE_MAX) ** 2
    return [f"The 1-2-1 tanh network (`make reference-multimodal`, {facts['seconds']:.0f} s): at the data noise "
            f"s = {low['noise']} the minimum-energy paths between its {len(low['energies'])} main minima climb "
            f"{span(low)} nats, too little to trap a chain; at s = {high['noise']} those between its "
            f"{len(high['energies'])} main minima ({high['minima_found']} minima found in all) climb {span(high)} "
            f"nats, real barriers. There, NUTS "
            f"started at each main minimum ({facts['settings']['nuts_chains']} chains each) does not stay: "
            f"{stays} of its draws lie nearest the minimum it started at, R-hat {rhats}; parallel tempering "
            f"({pt['runs']} runs of {pt['iterations']:,} iterations) gives the weights {weights} (standard errors "
            f"over the runs), {max(pt['weights_se']) / WEIGHT_SE_MAX:.1f} x the {WEIGHT_SE_MAX} a reference needs, "
            f"which would take about {runs_needed:.0f} x as many runs ({runs_needed * pt['seconds'] / 60:.0f} min of "
            "tempering), and the project accepts a reference only where a second method agrees, which NUTS, whose chains "
            "here neither stay in one mode nor mix between them, cannot do; " + verdict]
