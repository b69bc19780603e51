r"""The network with real barriers: its minima, its barriers, and whether a reference can be trusted in budget.

The 1-2-1 tanh network (:class:`studies.accuracy.multimodal.targets.StepNetwork`) at the data noise of issue 36
(s = 0.3) has barriers of 3.4 to 4.7 nats between its minima: nothing traps a chain there. At s = 0.15 the
likelihood's energy is four times larger and so are the barriers. :func:`probe` measures, at both noises:

- **the minima**: gradient descent (Adam, vectorised) from prior draws, polished by L-BFGS (scipy), merged when
  they agree to 0.05 prior sd; the *main* minima are those within :data:`MAIN_NATS` of the lowest (the rest
  carry a Laplace mass below about e^-5 of the main ones);
- **the barriers**: minimum-energy paths between every pair of main minima (:mod:`.barriers`);

and at s = 0.15 the reference of the study's shares, by the study's own region rule
(:class:`.landscapes.NetworkRows`: a point's mode is the main minimum whose Laplace fit :func:`mode_fits` gives
it the highest density, its core the fit's 99 % ellipsoid):

- **NUTS from each main minimum** (NumPyro, 8 chains each) and **parallel tempering** (:func:`parallel_tempering`:
  independent runs of a ladder of MALA chains with replica-exchange swaps), the MCMC a reference would rest on:
  reported, not trusted, because NUTS neither stays in a mode nor mixes between them (R-hat 1.5-1.8) and
  tempering's cold chains are still drifting after 84,000 iterations (:func:`tempering_shares` compares the
  halves of their draws);
- **importance sampling** (:mod:`.importance`, :func:`importance_shares`) from two proposals of one family
  (mixtures of Student-t densities fitted by EM, with a defensive component as wide as the prior), adapted from
  different information: one from the minima (Student-t at each, adapted through tempered posteriors), one fitted
  to tempering's cold draws with nothing of the minima. Their agreement checks the adaptation (tempering's draws
  reach regions, both units near-linear, that the first proposal reaches rarely), not the family: a region that
  both miss would be missed alike. Their s.e. come from independent batches of the draws
  (:func:`.importance.batch_errors`), since with a Pareto k-hat above 0.5 the delta method's are not valid;
- **tempered sequential Monte Carlo** (:mod:`.smc`, :func:`smc_shares`), the check of another kind: independent
  runs of particles that start as prior draws and follow the tempered path to the posterior, resampled and moved
  by Metropolis-Hastings (random walks scaled by the particles' own clusters, and independence jumps between the
  minima's Laplace fits, which leave each tempered posterior invariant and only speed the particles into the
  narrow cores). No proposal density enters its estimate, and its particles hold every region of the prior that
  the likelihood does not empty, so a region that both proposals miss would show as a difference. Its s.e. is
  the spread of its runs.

The reference is the importance estimate whose Pareto k-hat is lower; it is accepted when its k-hat lies below
:data:`KHAT_MAX` (PSIS's threshold of a trustworthy estimate), the other's below :data:`KHAT_LIMIT` (a finite
mean of the weights: a consistent estimate, a check through the agreement only), the two estimates of every mode
weight and core share agree within :data:`AGREEMENT` (the study's equivalence margin), every batch s.e. is at
most :data:`WEIGHT_SE_MAX`, and the SMC check, of s.e. at most :data:`CHECK_SE_MAX`, agrees with the reference
within :data:`AGREEMENT` on every mode weight (:func:`accepted`); how many s.e. apart they are is reported, not
tested. The facts, the reference's shares (``weights``, ``core_exact``), the modes' Gaussian fits (``modes``) and
the verdict go to ``results/csgmcmc/reference/network_multimodal.json``, which the study reads and whose
``report`` lines its report quotes.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch

from studies.accuracy.multimodal.barriers import minimum, minimum_energy_path
from studies.accuracy.multimodal.importance import (StudentMixture, adapt, estimate, fitted_t, laplace, mixed,
                                                        proposal, region_marks, sample_weighted)
from studies.accuracy.multimodal.acceptance import (AGREEMENT, CHECK_SE_MAX, KHAT_LIMIT, KHAT_MAX,  # noqa: F401
                                                        WEIGHT_SE_MAX, accepted, compare)
from studies.accuracy.multimodal.landscapes import NetworkRows
from studies.accuracy.multimodal.reference_text import report_lines
from studies.accuracy.multimodal.targets import StepNetwork

MAIN_NATS = 5.0         # main minima: at most this far above the lowest


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
    proposal_nats: float = 20.0      # the importance proposal's minima: at most this far above the lowest
    is_anneal: int = 8               # tempering steps of the adaptive proposal, 1/30 to 1 (geometric)
    is_polish: int = 2               # further adaptation rounds at beta = 1
    is_adapt_draws: int = 60_000
    is_components: int = 50
    is_inflate: float = 1.3
    is_df: int = 3
    is_defensive: float = 0.1
    is_draws: int = 1_000_000
    is_batches: int = 10             # independent batches of the draws: the s.e.
    smc_runs: int = 8                # tempered SMC: independent runs (their spread: the s.e.)
    smc_particles: int = 4000
    smc_ess: float = 0.9             # each stage keeps this share of the particles' ESS
    smc_moves: int = 10              # random-walk steps per stage
    smc_clusters: int = 8            # k-means clusters whose covariances scale the random walk
    smc_jumps: int = 5               # independence jumps between the minima's Laplace fits per stage
    smc_inflate: float = 1.2         # the jumps' t scales: this^2 x the Laplace covariances
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


def mode_fits(target: StepNetwork, minima: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The study's modes (:class:`.landscapes.NetworkRows`): the main minima and their Laplace covariances."""
    return np.asarray(minima), laplace(target, np.asarray(minima))[1]


def _proposal_minima(target: StepNetwork, landscape: dict, nats: float):
    """The minima within ``nats`` of the lowest whose Hessian is positive definite, their Laplace covariances and
    log Laplace masses (the first proposal's components)."""
    every, energy = np.array(landscape["all_minima"]), np.array(landscape["all_energies"])
    keep = energy <= energy[0] + nats
    hessians, covariances = laplace(target, every[keep])
    definite = np.linalg.eigvalsh(hessians).min(1) > 0
    log_mass = -energy[keep][definite] - 0.5 * np.linalg.slogdet(hessians[definite])[1]
    return every[keep][definite], covariances[definite], log_mass


def importance_shares(target: StepNetwork, landscape: dict, cold: np.ndarray, settings: Settings, log) -> dict:
    """The mode weights and core shares of the study's region rule by importance sampling (:mod:`.importance`)
    from two proposals of one family (t mixtures with a prior-wide defensive component) adapted from different
    information: ``laplace``, the annealed adaptation that starts from t densities at the minima; ``tempering``,
    t densities fitted to parallel tempering's cold draws ``cold`` (n, dim), nothing of the minima. The s.e. are
    those of ``is_batches`` independent batches; ``z`` the differences of the two in their joint s.e."""
    means, covariances = mode_fits(target, np.array(landscape["minima"]))
    rows = NetworkRows(target, torch.from_numpy(means), torch.from_numpy(covariances), 0, dtype=torch.float64)
    prior_sd = np.asarray(target.prior_sd)
    minima, proposal_covariances, log_mass = _proposal_minima(target, landscape, settings.proposal_nats)
    start = proposal(minima, proposal_covariances, log_mass, prior_sd, inflate=1.5, df=settings.is_df, defensive=0.05)
    wide = StudentMixture(torch.zeros(1, target.dim, dtype=torch.float64), torch.diag(torch.from_numpy(prior_sd))[None],
                          torch.ones(1, dtype=torch.float64), settings.is_df)
    out = {}
    for k, name in enumerate(("laplace", "tempering")):
        started = time.perf_counter()
        if name == "laplace":
            betas = tuple(float(b) for b in np.geomspace(1 / 30, 1, settings.is_anneal)) + (1.0,) * settings.is_polish
            q = adapt(target, start, betas, settings.is_adapt_draws, settings.is_components, settings.is_inflate,
                      settings.is_defensive, settings.seed)
        else:
            q = mixed(fitted_t(cold, settings.is_components, settings.is_inflate, settings.is_df, settings.seed), wide,
                      settings.is_defensive)
        log_w, marks = sample_weighted(target, q, rows, settings.is_draws, torch.Generator().manual_seed(settings.seed + 1 + k))
        out[name] = {**estimate(log_w, marks, len(means), settings.is_batches), "components": int(len(q.weights)),
                     "seconds": time.perf_counter() - started}
        log(f"network: importance sampling ({name} proposal): weights "
            f"{', '.join(f'{w:.3f}' for w in out[name]['weights'])}, k-hat {out[name]['khat']:.2f}, "
            f"ESS {out[name]['ess']:,.0f} ({out[name]['seconds']:.0f} s)")
    first, second = out["laplace"], out["tempering"]
    gap = np.r_[first["weights"], first["core_exact"]] - np.r_[second["weights"], second["core_exact"]]
    joint = np.hypot(np.r_[first["weights_se"], first["core_exact_se"]], np.r_[second["weights_se"], second["core_exact_se"]])
    out["difference"] = float(np.abs(gap).max())
    out["z"] = (gap / joint).tolist()
    out["se_max"] = float(max(max(r["weights_se"] + r["core_exact_se"]) for r in (first, second)))
    out["khat_max"] = float(max(first["khat"], second["khat"]))
    out["reference"] = min(("laplace", "tempering"), key=lambda name: out[name]["khat"])
    out["modes"] = {"means": means.tolist(), "covariances": covariances.tolist()}
    return out


def smc_shares(target: StepNetwork, rows: NetworkRows, covariances: np.ndarray, settings: Settings, log) -> dict:
    """The mode weights and core shares by tempered SMC (:mod:`.smc`): ``smc_runs`` independent runs, their means
    and s.e. (sd over the runs / sqrt(runs)), each run's weights and log evidence; the jumps' t densities sit at
    ``rows``' centres (the main minima) with ``smc_inflate``^2 x their Laplace ``covariances``, equally weighted."""
    from studies.accuracy.multimodal.smc import tempered_smc

    modes = rows.modes
    jump = StudentMixture(rows.centres.clone(), torch.linalg.cholesky(torch.from_numpy(settings.smc_inflate**2 * covariances)),
                          torch.full((modes,), 1 / modes, dtype=torch.float64), settings.is_df)
    started, runs = time.perf_counter(), []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for r in range(settings.smc_runs):
            out = tempered_smc(target.energy, target.prior_sd, settings.smc_particles, settings.smc_moves,
                               settings.smc_clusters, settings.seed + 1000 + r, settings.smc_ess, jump=jump,
                               jumps=settings.smc_jumps)
            runs.append({"shares": region_marks(rows, out["particles"]).mean(0), "log_evidence": out["log_evidence"],
                         "stages": len(out["betas"]) - 1, "walk": out["walk_acceptance"], "jump": out["jump_acceptance"]})
    finally:
        torch.set_num_threads(threads)
    shares = np.stack([r["shares"] for r in runs])
    mean, se = shares.mean(0), shares.std(0, ddof=1) / math.sqrt(len(runs))
    result = {"runs": len(runs), "particles": settings.smc_particles, "weights": mean[:modes].tolist(),
              "weights_se": se[:modes].tolist(), "core_exact": mean[modes:].tolist(), "core_exact_se": se[modes:].tolist(),
              "run_weights": shares[:, :modes].tolist(), "log_evidence": [r["log_evidence"] for r in runs],
              "stages": [r["stages"] for r in runs], "walk_acceptance": float(np.mean([r["walk"] for r in runs])),
              "jump_acceptance": float(np.mean([r["jump"] for r in runs])), "seconds": time.perf_counter() - started}
    log(f"network: tempered SMC ({len(runs)} runs of {settings.smc_particles:,} particles): weights "
        f"{', '.join(f'{w:.3f} +- {e:.3f}' for w, e in zip(result['weights'], result['weights_se']))} "
        f"({result['seconds']:.0f} s)")
    return result


def tempering_shares(cold: np.ndarray, rows: NetworkRows) -> dict:
    """Parallel tempering's own estimate of the shares (runs, kept, dim): means and s.e. over the runs, and the
    means of the first and second halves of the kept draws (a drift between them: the runs had not converged)."""
    mode, inside, _ = rows.regions(torch.from_numpy(cold.reshape(-1, cold.shape[-1])))
    mode, inside = mode.numpy().reshape(cold.shape[:2]), inside.numpy().reshape(cold.shape[:2])
    shares = np.stack([mode == k for k in range(rows.modes)] + [(mode == k) & inside for k in range(rows.modes)], -1)
    shares = np.concatenate([shares, ~shares[..., rows.modes:].any(-1, keepdims=True)], -1).astype(float)
    runs = shares.mean(1)
    half = cold.shape[1] // 2
    return {"weights": runs.mean(0)[:rows.modes].tolist(), "weights_se": (runs.std(0, ddof=1) / math.sqrt(len(runs)))[:rows.modes].tolist(),
            "core": runs.mean(0)[rows.modes:].tolist(), "core_se": (runs.std(0, ddof=1) / math.sqrt(len(runs)))[rows.modes:].tolist(),
            "first_half": shares[:, :half].mean((0, 1))[:rows.modes].tolist(),
            "second_half": shares[:, half:].mean((0, 1))[:rows.modes].tolist()}


def _nearest(theta: np.ndarray, minima: np.ndarray, tau: np.ndarray) -> np.ndarray:
    return (((theta[..., None, :] - minima) / tau) ** 2).sum(-1).argmin(-1)


def _landscape(noise: float, settings: Settings, log) -> dict:
    target = StepNetwork(noise=noise)
    minima, energy = find_minima(target, settings.starts, settings.descent, settings.seed)
    every, every_energy = minima, energy
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
            "all_minima": every.tolist(), "all_energies": every_energy.tolist(),
            "curvature_max": scale, "curvature_min": min(float(e.min()) for e in eigen), "barriers": barriers,
            "laplace_log_mass": [float(-d - 0.5 * np.log(e).sum()) for d, e in zip(depth, eigen)]}


def probe(settings: Settings = Settings(), log=print) -> dict:
    """The facts of the module docstring, with ``accepted`` and the report's lines."""
    from studies.accuracy.reference import ACCURACY_NUTS, diagnostics
    from studies.nuts import require_numpyro, run_nuts

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
        run = run_nuts(replace(ACCURACY_NUTS, chains=settings.nuts_chains, warmup=settings.nuts_warmup,
                               samples=settings.nuts_samples, seed=settings.seed + k),
                       model=target.numpyro_model(), init_params={"theta": jnp.asarray(starts)},
                       chain_method="vectorized")
        theta = run.draws["theta"]
        stay = float((_nearest(theta, minima, tau) == k).mean())
        nuts.append({"minimum": k, "stay_share": stay, "divergences": run.divergences, **diagnostics(theta)})
    threads, pt_started = torch.get_num_threads(), time.perf_counter()
    torch.set_num_threads(1)
    try:
        cold = parallel_tempering(target, settings, torch.Generator().manual_seed(settings.seed))
    finally:
        torch.set_num_threads(threads)
    pt_seconds = time.perf_counter() - pt_started
    means, covariances = mode_fits(target, minima)
    rows = NetworkRows(target, torch.from_numpy(means), torch.from_numpy(covariances), 0, dtype=torch.float64)
    tempering = {**tempering_shares(cold, rows), "runs": settings.pt_runs,
                 "iterations": settings.pt_warmup + settings.pt_samples, "seconds": pt_seconds}
    shares = importance_shares(target, real, cold.reshape(-1, target.dim), settings, log)
    chosen = shares[shares["reference"]]
    check = smc_shares(target, rows, covariances, settings, log)
    check.update(compare(chosen, check))
    ok = accepted(shares, check)
    facts.update(nuts=nuts, tempering=tempering, importance=shares, smc=check, accepted=ok,
                 weights=chosen["weights"], weights_se=chosen["weights_se"],
                 core_exact=chosen["core_exact"], core_exact_se=chosen["core_exact_se"],
                 modes=shares["modes"], seconds=time.perf_counter() - started)
    facts["report"] = report_lines(facts)
    log(f"network: reference {'accepted' if ok else 'not accepted'} ({facts['seconds']:.0f} s)")
    return facts
