"""The ICSGLD paper's simulation (Deng et al. 2022, Section 5.2 and Appendix D.2): 25 modes in 2-D.

Five methods at an equal budget of gradient evaluations per repeat (paper: 5 x 80,000):

- ``SGLD x P5``: 5 independent chains, lr 3e-3, T = 1;
- ``cycSGLD x T5``: one chain 5 times as long, cosine step size from 1e-2, 10 cycles, noise always on;
- ``reSGLD x P5``: 5 chains at lr 1e-3 .. 5e-3 and T = 1 .. 5, neighbouring swaps with the bias
  correction of the known energy noise (:mod:`csg.samplers.replica`); samples from the T = 1 chain;
- ``CSGLD x T5``: one contour chain 5 times as long, lr 3e-3, T = 1, zeta = 0.75, 100 partitions
  of width 0.125 from u = -5, SA step min(3e-3, 1 / (k^0.6 + 100));
- ``ICSGLD x P5``: 5 contour chains sharing one theta, otherwise as CSGLD.

Gradients and energies carry the authors' noise: + 0.25 N(0, I) and + 0.25 N(0, 1). Contour samples
are weighted by theta(J)^zeta. The KL divergence KL(p_hat || p) of the (weighted) sample histogram
against the exact bin masses (from the density on a fine grid) is recorded along the run; the mass
near each of the 25 modes measures whether the weights recover them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor

from csg.samplers import SGLD
from csg.samplers.contour import ContourSGLD, EnergyPartition
from csg.samplers.replica import bias_correction, replica_exchange
from csg.schedules import Cyclical
from csg.targets import ICSGLDLandscape

LIMIT, BINS = 3.0, 60  # histogram on [-3, 3]^2, 0.1-wide bins
GRAD_NOISE = ENERGY_NOISE = 0.25
METHODS = ("SGLD x P5", "cycSGLD x T5", "reSGLD x P5", "CSGLD x T5", "ICSGLD x P5")


@dataclass
class SimulationResult:
    final: pd.DataFrame   # method, kl (mean over repeats), kl_stderr, mode_tv, ...
    curves: pd.DataFrame  # method, gradient_evaluations, kl, kl_stderr
    modes: pd.DataFrame   # method, mode_x, mode_y, mass, true_mass


def true_bin_masses(target: ICSGLDLandscape, refine: int = 10) -> Tensor:
    """Exact probability of each histogram bin (flattened BINS x BINS), from the density on a refined grid."""
    fine = BINS * refine
    half_cell = LIMIT / fine
    _, _, p = target.grid_density(-LIMIT + half_cell, LIMIT - half_cell, fine)  # cell centres; p[y, x]
    return p.T.reshape(BINS, refine, BINS, refine).sum((1, 3)).flatten()


def bin_index(x: Tensor) -> tuple[Tensor, Tensor]:
    """(flat bin of each point, inside mask) for points of shape (..., 2)."""
    ij = torch.floor((x + LIMIT) / (2 * LIMIT / BINS)).long()
    inside = ((ij >= 0) & (ij < BINS)).all(-1)
    return ij[..., 0].clamp(0, BINS - 1) * BINS + ij[..., 1].clamp(0, BINS - 1), inside


def kl_divergence(histograms: Tensor, truth: Tensor) -> Tensor:
    """KL(p_hat || p) of each row of ``histograms`` (unnormalised) against ``truth``."""
    p_hat = histograms / histograms.sum(-1, keepdim=True).clamp_min(1e-300)
    terms = torch.where(p_hat > 0, p_hat * (p_hat.clamp_min(1e-300).log() - truth.log()), torch.zeros_like(p_hat))
    return terms.sum(-1)


def mode_masses(histograms: Tensor) -> Tensor:
    """Mass of each of the 25 modes (bins nearest to each integer point of [-2, 2]^2): (rows, 25)."""
    centres = -LIMIT + (torch.arange(BINS, dtype=torch.float64) + 0.5) * (2 * LIMIT / BINS)
    nearest = centres.round().clamp(-2, 2).long() + 2  # 0..4
    owner = (nearest[:, None] * 5 + nearest[None, :]).flatten()  # bin -> mode
    p = histograms / histograms.sum(-1, keepdim=True).clamp_min(1e-300)
    out = torch.zeros(p.shape[0], 25, dtype=p.dtype)
    return out.index_add_(1, owner, p)


class _Recorder:
    """Weighted histograms per repeat, filled in chunks, and the KL curve at budget checkpoints."""

    def __init__(self, repeats: int, truth: Tensor):
        self.histograms = torch.zeros(repeats, BINS * BINS, dtype=torch.float64)
        self.truth, self.curve = truth, []

    def add(self, points: Tensor, weights: Tensor) -> None:
        """``points``: (steps, repeats, chains, 2), ``weights`` (steps, repeats, chains)."""
        flat, inside = bin_index(points)
        repeats = points.shape[1]
        row = torch.arange(repeats)[None, :, None].expand_as(flat)
        index = (row * BINS * BINS + flat)[inside]
        self.histograms.view(-1).index_add_(0, index, weights[inside].to(torch.float64))

    def checkpoint(self, gradient_evaluations: int) -> None:
        kl = kl_divergence(self.histograms, self.truth)
        self.curve.append((gradient_evaluations, kl.mean().item(), _stderr(kl)))


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


def _run(method: str, target, truth, steps: int, repeats: int, checkpoints: int, generator) -> _Recorder:
    """One method for ``steps`` iterations of 5 chains (P5) or 5 * steps of one chain (T5)."""
    parallel = method.endswith("P5")
    chains, length = (5, steps) if parallel else (1, 5 * steps)
    start = (torch.rand(repeats, chains, 2, generator=generator, dtype=torch.float64) * 2 - 1) * 2.5
    recorder = _Recorder(repeats, truth)
    every = max(1, length // checkpoints)
    chunk_points, chunk_weights = [], []
    partition = None
    if method.startswith("reSGLD"):
        temperatures, lrs = [1.0, 2.0, 3.0, 4.0, 5.0], [1e-3, 2e-3, 3e-3, 4e-3, 5e-3]
        xs = [start[:, k].clone() for k in range(5)]
        sampler = SGLD([{"params": [x], "lr": lr, "temperature": t} for x, lr, t in zip(xs, lrs, temperatures)],
                       num_data=1, generator=generator)
        corrections = [bias_correction(temperatures[k], temperatures[k + 1], ENERGY_NOISE**2) for k in range(4)]
    else:
        x = start.reshape(repeats * chains, 2).clone()
        xs = [x]
        if method.startswith(("CSGLD", "ICSGLD")):
            partition = EnergyPartition(-5.0, 0.125, 100, zeta=0.75, groups=repeats)
            sampler = ContourSGLD(xs, lr=3e-3, num_data=1, temperature=1.0, partition=partition,
                                  chains=repeats * chains, generator=generator)
        elif method.startswith("cycSGLD"):
            schedule = Cyclical(1e-2, length, 10, explore=0.0)
            sampler = SGLD(xs, lr=1e-2, num_data=1, temperature=1.0, generator=generator)
        else:
            sampler = SGLD(xs, lr=3e-3, num_data=1, temperature=1.0, generator=generator)
    for k in range(length):
        for x in xs:
            x.grad = target.noisy_grad(x, generator)
        if method.startswith("reSGLD"):
            sampler.step()
            stacked = torch.stack(xs, 1)  # (repeats, 5, 2)
            energies = target.noisy_energy(stacked, generator)
            replica_exchange(stacked, energies, temperatures, correction=corrections, offset=k % 2, generator=generator)
            for j, x in enumerate(xs):
                x.copy_(stacked[:, j])
            chunk_points.append(xs[0][:, None].clone())
            chunk_weights.append(torch.ones(repeats, 1, dtype=torch.float64))
        elif partition is not None:
            points, weights = contour_step(sampler, partition, xs[0], target.noisy_energy(xs[0], generator))
            chunk_points.append(points.reshape(repeats, chains, 2))
            chunk_weights.append(weights.reshape(repeats, chains))
        else:
            if method.startswith("cycSGLD"):
                sampler.param_groups[0]["lr"] = schedule.lr(k)
            sampler.step()
            chunk_points.append(xs[0].reshape(repeats, chains, 2).clone())
            chunk_weights.append(torch.ones(repeats, chains, dtype=torch.float64))
        if (k + 1) % every == 0 or k + 1 == length:
            recorder.add(torch.stack(chunk_points), torch.stack(chunk_weights))
            chunk_points, chunk_weights = [], []
            recorder.checkpoint((k + 1) * (5 if parallel else 1))
    return recorder


def run_simulation(steps: int = 80_000, repeats: int = 20, checkpoints: int = 100, seed: int = 0,
                   methods: tuple[str, ...] = METHODS) -> SimulationResult:
    """Every method at ``5 * steps`` gradient evaluations per repeat; ``repeats`` independent repeats."""
    target = ICSGLDLandscape(grad_noise=GRAD_NOISE, energy_noise=ENERGY_NOISE)
    truth = true_bin_masses(target)
    true_modes = mode_masses(truth[None])[0]
    finals, curves, modes = [], [], []
    for number, method in enumerate(methods):
        generator = torch.Generator().manual_seed(seed * 1000 + number)
        with torch.no_grad():
            recorder = _run(method, target, truth, steps, repeats, checkpoints, generator)
        kl = kl_divergence(recorder.histograms, truth)
        masses = mode_masses(recorder.histograms)
        tv = 0.5 * (masses - true_modes).abs().sum(-1)
        finals.append({"method": method, "kl": kl.mean().item(), "kl_stderr": _stderr(kl), "mode_tv": tv.mean().item(),
                       "mode_tv_stderr": _stderr(tv), "modes_visited": (masses > 0.2 * true_modes).sum(-1).double().mean().item(),
                       "gradient_evaluations": 5 * steps, "repeats": repeats})
        curves += [{"method": method, "gradient_evaluations": g, "kl": m, "kl_stderr": s} for g, m, s in recorder.curve]
        mean_masses = masses.mean(0)
        for index in range(25):
            modes.append({"method": method, "mode_x": index // 5 - 2, "mode_y": index % 5 - 2,
                          "mass": mean_masses[index].item(), "true_mass": true_modes[index].item()})
    return SimulationResult(pd.DataFrame(finals), pd.DataFrame(curves), pd.DataFrame(modes))


def run(study, output_dir, seed: int) -> dict:
    """``python train.py synthetic=icsgld_sim``: the simulation, its CSVs, Markdown and figure."""
    import time

    from csg.atomic import atomic_write_text

    started = time.perf_counter()
    result = run_simulation(steps=int(study.steps), repeats=int(study.repeats), checkpoints=int(study.checkpoints),
                            seed=seed)
    output_dir = Path(output_dir)
    atomic_write_text(output_dir / "simulation.csv", result.final.to_csv(index=False))
    atomic_write_text(output_dir / "simulation_curve.csv", result.curves.to_csv(index=False))
    atomic_write_text(output_dir / "simulation_modes.csv", result.modes.to_csv(index=False))
    seconds = time.perf_counter() - started
    atomic_write_text(output_dir / "simulation.md", _markdown(result, study, seed, seconds))
    _figure(result, output_dir / "simulation.png")
    final = result.final.set_index("method")
    return {"seconds": seconds, "kl": final.kl.to_dict(), "mode_tv": final.mode_tv.to_dict()}


def _markdown(result: SimulationResult, study, seed: int, seconds: float) -> str:
    full = int(study.steps) == 80_000 and int(study.repeats) == 20
    final = result.final.set_index("method")
    lines = [
        "# ICSGLD Section 5.2: the 25-mode 2-D landscape" + ("" if full else " (REDUCED SIZE)"), "",
        f"Scale: {'full (the paper: 5 chains x 80,000 steps or 1 chain x 400,000, 20 repeats)' if full else 'reduced'}: "
        f"{5 * int(study.steps):,} gradient evaluations per method and repeat, {int(study.repeats)} repeats, seed "
        f"{seed}; {seconds:.0f} s on CPU. Command: `make icsgld-sim`. KL(p_hat || p) of the (importance-weighted) "
        f"sample histogram on [-{LIMIT:g}, {LIMIT:g}]^2 in {BINS}x{BINS} bins against the exact bin masses; "
        "mode TV: total variation between the sampled and the true masses of the 25 modes (0: all modes at their "
        "true weight). The paper gives the KL curves as a figure only (its Figure 6), no numbers: ICSGLD x P5 lowest, "
        "then reSGLD x P5, CSGLD x T5 / cycSGLD x T5, SGLD x P5 highest.", "",
        "| method | final KL, mean +- s.e. | mode TV | modes with >= 20% of their mass |", "|---|---:|---:|---:|",
    ]
    lines += [f"| {m} | {r.kl:.3f} +- {r.kl_stderr:.3f} | {r.mode_tv:.3f} +- {r.mode_tv_stderr:.3f} | "
              f"{r.modes_visited:.1f} |" for m, r in final.iterrows()]
    ranking = final.kl.sort_values().index.tolist()
    lines += ["", f"Ranked by final KL, lowest first: {', '.join(ranking)}."]
    return "\n".join(lines) + "\n"


def _figure(result: SimulationResult, path: Path) -> None:
    import matplotlib.pyplot as plt

    from csg.synthetic import plots

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for method, group in result.curves.groupby("method", sort=False):
        ax.plot(group.gradient_evaluations, group.kl, label=method, lw=2 if "ICSGLD" in method else 1.2)
        ax.fill_between(group.gradient_evaluations, group.kl - group.kl_stderr, group.kl + group.kl_stderr, alpha=0.2)
    ax.set_xlabel("gradient evaluations per repeat (5 chains, or one chain 5 times as long)")
    ax.set_ylabel("KL(sampled || true) on the grid")
    ax.set_yscale("log")
    ax.set_title("ICSGLD Figure 6: convergence on the 25-mode landscape")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    plots.save_png_pdf(fig, path)
