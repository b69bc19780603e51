"""The ICSGLD paper's simulation (Deng et al. 2022, Section 5.2 and Appendix D.2): 25 modes in 2-D.

Five methods at an equal budget of gradient evaluations per repeat (paper: 5 x 80,000), each set as the
authors' notebooks (simulations/ in their repository) set it; :data:`SETTINGS` lists them beside the paper:

- ``SGLD x P5``: 5 independent chains, lr 3e-3, T = 1;
- ``cycSGLD x T5``: one chain 5 times as long, cosine step size from 1e-2, 10 cycles, noise always on;
  samples only where the step size is below 0.009;
- ``reSGLD x P5``: 5 chains at lr 1e-3 .. 5e-3 and T = 1 .. 5; every step each neighbouring pair in turn
  proposes a swap with the correction (1/T_j - 1/T_i)^2 hat_var, hat_var starting at 25 and following the
  variance of 10 noisy energies every 100 steps; samples from the T = 1 chain;
- ``CSGLD x T5``: one contour chain 5 times as long, lr 3e-3, T = 1, zeta = 0.75, 100 partitions
  of width 0.125 from u = -5, SA step min(3e-3, 1 / (k^0.6 + 100)), the forward difference and the random
  field theta(J)^zeta (1{i = J} - theta(i)) of Deng et al. (2020), as the CSGLD notebook;
- ``ICSGLD x P5``: 5 contour chains sharing one theta, the backward difference and ICSGLD's field (Eq. 8).

Both contour methods start theta from a pilot SGLD run's histogram of partitions (+1e-4), reject moves that
leave [-2.5, 2.5]^2 and leave the multiplier unclipped. P5 chains start at (0, -1), (0, 0), (-1, 0), (0, 1),
(1, 0); cycSGLD at (0, 0), CSGLD at (2, 2). Every 20th iteration after a warm-up (1000 iterations for P5,
5000 for T5) is a sample. Gradients and energies carry the authors' noise: + 0.25 N(0, I) and + 0.25 N(0, 1).

How the samples are measured against the target (the notebooks' k-nearest-neighbour KL, the histogram KL, the
masses of the 25 modes): :mod:`studies.synthetic.icsgld_measures`. The study ``train.py synthetic=icsgld_sim``
and its report: :mod:`studies.synthetic.icsgld_simulation_report`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from csg.samplers import SGLD
from csg.samplers.contour import ContourSGLD, EnergyPartition
from csg.samplers.replica import bias_correction, swap_log_ratio
from csg.schedules import Cyclical
from studies.synthetic.icsgld_measures import (BINS, DOMAIN, KNNDivergence, bin_index, exact_density_of_states,
                                                   exact_draws, kl_divergence, mode_masses, true_bin_masses)
from studies.targets import ICSGLDLandscape

GRAD_NOISE = ENERGY_NOISE = 0.25
METHODS = ("SGLD x P5", "cycSGLD x T5", "reSGLD x P5", "CSGLD x T5", "ICSGLD x P5")
P5_STARTS = ((0.0, -1.0), (0.0, 0.0), (-1.0, 0.0), (0.0, 1.0), (1.0, 0.0))
T5_STARTS = {"cycSGLD x T5": (0.0, 0.0), "CSGLD x T5": (2.0, 2.0)}
CYCLICAL_THRESHOLD = 0.009  # cycSGLD keeps the samples drawn at step sizes below this


@dataclass
class Protocol:
    """The notebooks' schedule: warm-up, thinning, the pilot run for theta, the exact draws for the KL."""

    warm_up_p5: int = 1000
    warm_up_t5: int = 5000
    thin: int = 20
    pilot_steps: int = 20_000
    pilot_warm_up: int = 5000
    true_samples: int = 50_000


@dataclass
class SimulationResult:
    final: pd.DataFrame   # method, kl (k-NN, mean over repeats), kl_stderr, hist_kl, mode_tv, ...
    curves: pd.DataFrame  # method, gradient_evaluations, kl, kl_stderr, hist_kl, hist_kl_stderr
    modes: pd.DataFrame   # method, mode_x, mode_y, mass, true_mass
    repeats: pd.DataFrame = None  # method, repeat, kl, hist_kl, mode_tv, weight_ess (each repeat at the end)


class _Recorder:
    """The kept samples per repeat, their weighted histograms, and both KLs at budget checkpoints."""

    def __init__(self, repeats: int, truth: Tensor, knn: KNNDivergence, weighted: bool, generator: torch.Generator):
        self.histograms = torch.zeros(repeats, BINS * BINS, dtype=torch.float64)
        self.truth, self.knn, self.weighted, self.generator = truth, knn, weighted, generator
        self.points: list[Tensor] = []   # (kept, repeats, chains, 2)
        self.weights: list[Tensor] = []  # (kept, repeats, chains)
        self.curve: list[tuple] = []
        self.theta_tv: Tensor | None = None  # contour methods: TV of theta's density of states to the exact one

    def add(self, points: Tensor, weights: Tensor) -> None:
        """``points``: (steps, repeats, chains, 2), ``weights`` (steps, repeats, chains)."""
        if not len(points):
            return
        flat, inside = bin_index(points)
        repeats = points.shape[1]
        row = torch.arange(repeats)[None, :, None].expand_as(flat)
        index = (row * BINS * BINS + flat)[inside]
        self.histograms.view(-1).index_add_(0, index, weights[inside].to(torch.float64))
        self.points.append(points)
        self.weights.append(weights.to(torch.float64))

    def knn_kl(self) -> Tensor:
        """The k-NN KL(p || q) of each repeat's samples so far (weighted for the contour methods)."""
        if not self.points:
            return torch.full((self.histograms.shape[0],), float("nan"), dtype=torch.float64)
        points, weights = torch.cat(self.points), torch.cat(self.weights)
        values = []
        for r in range(points.shape[1]):
            q, w = points[:, r].reshape(-1, 2), weights[:, r].reshape(-1)
            values.append(self.knn(q, w if self.weighted else None))
        return torch.tensor(values, dtype=torch.float64)

    def weight_ess(self) -> Tensor:
        r"""Per repeat, the effective share of its samples under their weights, :math:`(\sum w)^2 / (n \sum w^2)`:
        1 for equal weights, 1/n when one sample holds all."""
        weights = torch.cat(self.weights).transpose(0, 1).reshape(self.histograms.shape[0], -1)
        return weights.sum(1).square() / (weights.shape[1] * weights.square().sum(1))

    def checkpoint(self, gradient_evaluations: int) -> None:
        knn = self.knn_kl()
        hist = kl_divergence(self.histograms, self.truth)
        self.curve.append((gradient_evaluations, knn.mean().item(), _stderr(knn), hist.mean().item(), _stderr(hist)))


def _stderr(values: Tensor) -> float:
    return values.std(unbiased=True).item() / math.sqrt(len(values)) if len(values) > 1 else float("nan")


def contour_step(sampler, partition: EnergyPartition, x: Tensor, energy: Tensor) -> tuple[Tensor, Tensor]:
    """One contour step from ``x`` at its (noisy) ``energy``; returns the sample it yields and its weight.

    The sample is ``x`` itself, before the move: its energy gave the partition J, and theta(J)^zeta (after
    this step's update of theta) is its importance weight. The moved point's partition is not known until its
    energy is evaluated at the next step."""
    point = x.detach().clone()
    sampler.step(energy=energy)
    return point, partition.importance_weights(sampler.last_index)


def pilot_theta(target, partition: EnergyPartition, repeats: int, protocol: Protocol, generator) -> Tensor:
    """theta's start, as the notebooks: the histogram of the partitions of a pilot SGLD chain from the origin
    (lr 3e-3, T = 1; every ``thin``-th iteration after ``pilot_warm_up``) plus 1e-4. One pilot per repeat."""
    x = torch.zeros(repeats, 2, dtype=torch.float64)
    sampler = SGLD([x], lr=3e-3, num_data=1, temperature=1.0, generator=generator)
    counts = torch.zeros(repeats, partition.partitions, dtype=torch.float64)
    for k in range(protocol.pilot_steps):
        x.grad = target.noisy_grad(x, generator)
        sampler.step()
        if k > protocol.pilot_warm_up and k % protocol.thin == 0:
            j = partition.index(target.noisy_energy(x, generator))
            counts.scatter_add_(1, j[:, None], torch.ones(repeats, 1, dtype=torch.float64))
    return counts / counts.sum(1, keepdim=True).clamp_min(1.0) + 1e-4


def _starts(method: str, repeats: int) -> Tensor:
    points = P5_STARTS if method.endswith("P5") else (T5_STARTS[method],)
    return torch.tensor(points, dtype=torch.float64).expand(repeats, -1, -1).clone()


def _resgld_swaps(xs: list[Tensor], temperatures: list[float], hat_var: Tensor, k: int, target, generator) -> None:
    """The notebook's swaps: each neighbouring pair in turn, with fresh noisy energies; every 100 steps hat_var
    first moves towards the variance of 10 noisy energies of the lower chain."""
    for j in range(len(xs) - 1):
        if (k + 1) % 100 == 0:
            omega = min(3e-3, 1.0 / (k**0.6 + 100))
            probes = target.noisy_energy(xs[j][:, None].expand(-1, 10, -1), generator)
            hat_var.mul_(1 - omega).add_(omega * probes.var(1, unbiased=False))
        correction = bias_correction(temperatures[j], temperatures[j + 1], 1.0) * hat_var
        log_s = swap_log_ratio(target.noisy_energy(xs[j], generator), target.noisy_energy(xs[j + 1], generator),
                               temperatures[j], temperatures[j + 1], correction)
        rows = torch.rand(log_s.shape, generator=generator, dtype=log_s.dtype).log() < log_s
        xs[j][rows], xs[j + 1][rows] = xs[j + 1][rows].clone(), xs[j][rows].clone()


def _run(method: str, target, truth, knn, steps: int, repeats: int, checkpoints: int, protocol: Protocol,
         generator) -> _Recorder:
    """One method for ``steps`` iterations of 5 chains (P5) or 5 * steps of one chain (T5)."""
    parallel = method.endswith("P5")
    chains, length = (5, steps) if parallel else (1, 5 * steps)
    warm_up = protocol.warm_up_p5 if parallel else protocol.warm_up_t5
    start = _starts(method, repeats)
    contour = method.startswith(("CSGLD", "ICSGLD"))
    recorder = _Recorder(repeats, truth, knn, contour, generator)
    every = max(1, length // checkpoints)
    chunk_points, chunk_weights = [], []
    if method.startswith("reSGLD"):
        temperatures, lrs = [1.0, 2.0, 3.0, 4.0, 5.0], [1e-3, 2e-3, 3e-3, 4e-3, 5e-3]
        xs = [start[:, k].clone() for k in range(5)]
        sampler = SGLD([{"params": [x], "lr": lr, "temperature": t} for x, lr, t in zip(xs, lrs, temperatures)],
                       num_data=1, generator=generator)
        hat_var = torch.full((repeats,), 25.0, dtype=torch.float64)
    else:
        xs = [start.reshape(repeats * chains, 2).clone()]
        if contour:
            csgld = method.startswith("CSGLD")
            partition = EnergyPartition(-5.0, 0.125, 100, zeta=0.75, groups=repeats,
                                        multiplier_clip=(-math.inf, math.inf),
                                        difference="forward" if csgld else "backward",
                                        field_exponent=0.75 if csgld else 1.0)
            partition.theta.copy_(pilot_theta(target, partition, repeats, protocol, generator))
            sampler = ContourSGLD(xs, lr=3e-3, num_data=1, temperature=1.0, partition=partition,
                                  chains=repeats * chains, generator=generator)
        elif method.startswith("cycSGLD"):
            schedule = Cyclical(1e-2, length, 10, explore=0.0)
            sampler = SGLD(xs, lr=1e-2, num_data=1, temperature=1.0, generator=generator)
        else:
            sampler = SGLD(xs, lr=3e-3, num_data=1, temperature=1.0, generator=generator)
    for k in range(length):
        keep = k > warm_up and k % protocol.thin == 0
        for x in xs:
            x.grad = target.noisy_grad(x, generator)
        if method.startswith("reSGLD"):
            sampler.step()
            _resgld_swaps(xs, temperatures, hat_var, k, target, generator)
            point, weight = xs[0][:, None].clone(), torch.ones(repeats, 1, dtype=torch.float64)
        elif contour:
            before = xs[0].clone()
            point, weight = contour_step(sampler, partition, xs[0], target.noisy_energy(xs[0], generator))
            outside = (xs[0].abs() > DOMAIN).any(-1)  # the notebooks reject a move out of the square
            xs[0][outside] = before[outside]
            point, weight = point.reshape(repeats, chains, 2), weight.reshape(repeats, chains)
        else:
            if method.startswith("cycSGLD"):
                sampler.param_groups[0]["lr"] = schedule.lr(k)
                keep = keep and schedule.lr(k) < CYCLICAL_THRESHOLD
            sampler.step()
            point, weight = xs[0].reshape(repeats, chains, 2).clone(), torch.ones(repeats, chains, dtype=torch.float64)
        if keep:
            chunk_points.append(point)
            chunk_weights.append(weight)
        if (k + 1) % every == 0 or k + 1 == length:
            if chunk_points:
                recorder.add(torch.stack(chunk_points), torch.stack(chunk_weights))
            chunk_points, chunk_weights = [], []
            recorder.checkpoint((k + 1) * (5 if parallel else 1))
    if contour:
        exact = exact_density_of_states(target, partition)
        recorder.theta_tv = 0.5 * (partition.density_of_states() - exact).abs().sum(1)
    return recorder


def run_simulation(steps: int = 80_000, repeats: int = 20, checkpoints: int = 10, seed: int = 0,
                   methods: tuple[str, ...] = METHODS, protocol: Protocol | None = None) -> SimulationResult:
    """Every method at ``5 * steps`` gradient evaluations per repeat; ``repeats`` independent repeats."""
    protocol = protocol or Protocol()
    target = ICSGLDLandscape(grad_noise=GRAD_NOISE, energy_noise=ENERGY_NOISE)
    truth = true_bin_masses(target)
    knn = KNNDivergence(exact_draws(target, protocol.true_samples, torch.Generator().manual_seed(seed * 1000 + 999)))
    true_modes = mode_masses(truth[None])[0]
    finals, curves, modes, per_repeat = [], [], [], []
    for number, method in enumerate(methods):
        generator = torch.Generator().manual_seed(seed * 1000 + number)
        with torch.no_grad():
            recorder = _run(method, target, truth, knn, steps, repeats, checkpoints, protocol, generator)
        kl, hist = recorder.knn_kl(), kl_divergence(recorder.histograms, truth)
        masses = mode_masses(recorder.histograms)
        tv = 0.5 * (masses - true_modes).abs().sum(-1)
        kept = sum(len(p) for p in recorder.points) * recorder.points[0].shape[2] if recorder.points else 0
        finals.append({"method": method, "kl": kl.mean().item(), "kl_stderr": _stderr(kl),
                       "hist_kl": hist.mean().item(), "hist_kl_stderr": _stderr(hist), "mode_tv": tv.mean().item(), "mode_tv_stderr": _stderr(tv),
                       "modes_visited": (masses > 0.2 * true_modes).sum(-1).double().mean().item(),
                       "samples": kept, "gradient_evaluations": 5 * steps, "repeats": repeats})
        curves += [{"method": method, "gradient_evaluations": g, "kl": m, "kl_stderr": s, "hist_kl": hm,
                    "hist_kl_stderr": hs} for g, m, s, hm, hs in recorder.curve]
        ess = recorder.weight_ess()
        theta_tv = recorder.theta_tv if recorder.theta_tv is not None else torch.full((repeats,), float("nan"))
        per_repeat += [{"method": method, "repeat": r, "kl": kl[r].item(), "hist_kl": hist[r].item(),
                        "mode_tv": tv[r].item(), "weight_ess": ess[r].item(), "theta_tv": theta_tv[r].item()}
                       for r in range(repeats)]
        mean_masses = masses.mean(0)
        for index in range(25):
            modes.append({"method": method, "mode_x": index // 5 - 2, "mode_y": index % 5 - 2,
                          "mass": mean_masses[index].item(), "true_mass": true_modes[index].item()})
    return SimulationResult(pd.DataFrame(finals), pd.DataFrame(curves), pd.DataFrame(modes), pd.DataFrame(per_repeat))
