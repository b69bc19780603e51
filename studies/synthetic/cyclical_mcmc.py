"""Cyclical MCMC with tempering by powering (Wang, Dai & Atchade, AISTATS 2024, Algorithm 1).

The chain targets Pi_j proportional to exp(-beta_j E) at step j, with
beta_j = beta((j mod L) / L) (equation 5, floored at 0.001 as in their
simulations), and keeps the state at the end of every cycle of L steps. Each
kernel M_j is a random-walk Metropolis step with a proposal scale chosen from
beta_j. Many independent chains run as one tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from studies.targets import Target


def tempering_beta(t: float | Tensor, r: float = 1.0, floor: float = 1e-3):
    """beta(t) = max((1 + cos(2 pi t^r)) / 2, floor) for t in [0, 1] (the fraction of the cycle)."""
    if isinstance(t, Tensor):
        return torch.clamp((1 + torch.cos(2 * math.pi * t.pow(r))) / 2, min=floor)
    return max((1 + math.cos(2 * math.pi * t**r)) / 2, floor)


def rwm_step(
    x: Tensor, energy_x: Tensor, target: Target, beta: float, proposal_std: float, generator: torch.Generator | None
) -> tuple[Tensor, Tensor, Tensor]:
    """One random-walk Metropolis step on exp(-beta E), for every chain (row) at once.

    Proposes y = x + proposal_std * N(0, I) and accepts with probability
    min(1, exp(-beta (E(y) - E(x)))). Returns the new states, their energies and
    the acceptance indicators.
    """
    y = x + proposal_std * torch.randn(x.shape, generator=generator, dtype=x.dtype)
    energy_y = target.energy(y)
    log_u = torch.rand(energy_x.shape, generator=generator, dtype=x.dtype).log()
    accept = log_u < -beta * (energy_y - energy_x)
    x = torch.where(accept[..., None], y, x)
    return x, torch.where(accept, energy_y, energy_x), accept


def cyclical_rwm(
    target: Target,
    *,
    cycle_length: int,
    cycles: int,
    chains: int,
    proposal_variance: Callable[[float], float],
    start: Tensor,
    r: float = 1.0,
    floor: float = 1e-3,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Algorithm 1 with random-walk Metropolis kernels; returns the end-of-cycle states (cycles, chains, dim).

    ``proposal_variance(beta)`` is the variance of the Gaussian proposal at
    inverse temperature beta (the paper: 0.25 / beta in 1-D, 0.01 beta^-1/2
    in 2-D). ``start`` holds the (chains, dim) initial states.
    """
    x = start.clone()
    energy = target.energy(x)
    betas = [tempering_beta((j % cycle_length) / cycle_length, r, floor) for j in range(1, cycle_length + 1)]
    scales = [math.sqrt(proposal_variance(beta)) for beta in betas]
    kept = torch.empty(cycles, chains, target.dim, dtype=x.dtype)
    for cycle in range(cycles):
        for beta, scale in zip(betas, scales):
            x, energy, _ = rwm_step(x, energy, target, beta, scale, generator)
        kept[cycle] = x
    return kept
