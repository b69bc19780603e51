r"""Every method, step size and seed on one target, at one gradient budget, as one vectorised run.

**Budget.** Each method gets B gradient evaluations per seed and step size (:func:`chain_steps`): one chain of
B iterations, or P chains (4 parallel chains, reSGLD's replicas, ICSGLD's interacting chains) of B / P each.
The energy a contour or replica method reads comes from the same evaluation as the gradient (full batch), so
it costs nothing more. Every chain keeps one draw every ``thin`` of its iterations, so every method keeps the
same number of draws per gradient evaluation (but reSGLD, which keeps its T = 1 replica's only, and the
cyclical methods, which keep their sampling stages' only).

**Methods** (:data:`METHODS`), each with the step size h of the grid (:func:`step_grid`):

- SGLD, SGHMC: constant step h, noise on throughout, the first ``burnin`` of each chain discarded;
- cSGLD, cSGHMC: the cosine schedule of :class:`csg.schedules.Cyclical` from lr0 = 2 h (the same mean step),
  cycles of ``cycle_length`` iterations (B / 32: 32 cycles for one chain, 8 for each of 4), exploration
  (the first ``explore`` of each cycle) without noise, draws from the sampling stages (the paper's Algorithm 1);
- "x4": 4 parallel chains of B / 4 iterations each, pooled;
- reSGLD x4: 4 replicas at T = 1, 2, 4, 8 with step h, a swap proposed between neighbours after every step
  (:func:`csg.samplers.replica.replica_exchange`, exact energies, no correction); draws of the T = 1 replica;
- CSGLD, ICSGLD x4: :class:`csg.samplers.contour.ContourSGLD` with step h; ICSGLD's 4 chains share one theta;
  draws weighted by theta(J)^zeta.

SGHMC's step is lr = h (1 - m) at momentum m = 0.9: in the high-friction limit it then moves as SGLD at step h.
All chains of a target (every method, step size and seed) are the rows of one tensor and run in one loop: one
gradient (and energy) evaluation of every row per iteration, then the update rules of
:mod:`csg.samplers.functional` (``sgld``, ``sghmc``) with each row's step and temperature folded into its gradient
and noise (lr = 1 in the rule, the row's lr_r times the gradient, sqrt(2 lr_r T_r) times the normal draw: the same
step as the optimizers take with N = 1). The contour rows take the multiplier of their
:class:`csg.samplers.contour.EnergyPartition` on the gradient, as :class:`csg.samplers.contour.ContourSGLD` does,
one partition group per step size and seed. A chain past its B / P iterations stays where it is (step 0).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from csg.samplers.contour import EnergyPartition
from csg.samplers.replica import replica_exchange
from csg.schedules import Constant, Cyclical, Schedule
from csg.studies.targets.base import Target


@dataclass(frozen=True)
class Method:
    name: str
    rule: str                 # "sgld", "sghmc", "resgld" or "contour"
    chains: int = 1           # parallel chains (replicas) sharing the budget
    cyclical: bool = False


METHODS = (
    Method("SGLD", "sgld"), Method("cSGLD", "sgld", cyclical=True),
    Method("SGHMC", "sghmc"), Method("cSGHMC", "sghmc", cyclical=True),
    Method("SGLD x4", "sgld", 4), Method("cSGLD x4", "sgld", 4, True),
    Method("SGHMC x4", "sghmc", 4), Method("cSGHMC x4", "sghmc", 4, True),
    Method("reSGLD x4", "resgld", 4), Method("CSGLD", "contour"), Method("ICSGLD x4", "contour", 4),
)
BY_NAME = {m.name: m for m in METHODS}
PAIRS = (("cSGLD", "SGLD"), ("cSGHMC", "SGHMC"), ("cSGLD x4", "SGLD x4"), ("cSGHMC x4", "SGHMC x4"))


@dataclass(frozen=True)
class Protocol:
    budget: int = 20_000            # gradient evaluations per method, seed and step size
    thin: int = 20                  # a chain keeps one draw every `thin` iterations
    burnin: float = 0.1             # constant-step methods: the share of each chain's iterations discarded
    cycles_per_budget: int = 32     # cycle length B / 32
    explore: float = 0.25           # cyclical: the exploration share of each cycle (beta)
    momentum: float = 0.9           # SGHMC
    temperatures: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)   # reSGLD's ladder
    zeta: float = 0.75              # contour methods
    partitions: int = 50
    factors: tuple[float, ...] = (1 / 27, 1 / 9, 1 / 3, 1.0)  # step sizes h = factor / L
    checkpoints: tuple[float, ...] = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)  # shares of the budget scored


def chain_steps(method: Method, budget: int) -> int:
    """Iterations of each of the method's chains: B / P."""
    return budget // method.chains


def gradient_evaluations(method: Method, budget: int) -> int:
    return chain_steps(method, budget) * method.chains


def curvature(target: Target, points: Tensor) -> float:
    """L: the largest eigenvalue of the Hessian of U over ``points`` (the modes' centres)."""
    largest = 0.0
    for point in points:
        hessian = torch.autograd.functional.hessian(lambda x: target.energy(x[None])[0], point.to(torch.float64))
        largest = max(largest, float(torch.linalg.eigvalsh(hessian).max()))
    return largest


def step_grid(target: Target, centres: Tensor, protocol: Protocol) -> list[float]:
    """The step sizes h = factor / L of the grid."""
    scale = curvature(target, centres)
    return [factor / scale for factor in protocol.factors]


def schedule_of(method: Method, h: float, steps: int, protocol: Protocol) -> Schedule:
    if method.cyclical:
        cycles = max(1, steps // (protocol.budget // protocol.cycles_per_budget))
        return Cyclical(2 * h, steps, cycles, protocol.explore)
    return Constant(h)


@dataclass
class Unit:
    """One method at one step size: rows ``first .. first + seeds * chains`` of the run's tensor (seed-major)."""

    method: Method
    step: float
    steps: int
    schedule: Schedule
    first: int
    rows: int


@dataclass
class Draws:
    """A unit's kept draws per seed: ``draws[s]`` (n, dim), ``weights[s]`` (n,), ``iterations`` (n,)."""

    method: str
    step: float
    steps: int
    draws: list[np.ndarray]
    weights: list[np.ndarray]
    iterations: np.ndarray
    finite: list[bool]


FAMILIES = ("sgld", "resgld", "contour", "sghmc")  # row order: the SGLD-type rows first, then SGHMC's


def _layout(methods, steps_h, seeds: int, protocol: Protocol) -> list[Unit]:
    units, first = [], 0
    for family in FAMILIES:
        for method in (m for m in methods if m.rule == family):
            for h in steps_h:
                steps = chain_steps(method, protocol.budget)
                units.append(Unit(method, h, steps, schedule_of(method, h, steps, protocol), first, seeds * method.chains))
                first += seeds * method.chains
    return units


def _tables(units: list[Unit], protocol: Protocol) -> tuple[Tensor, Tensor, Tensor]:
    """Per iteration and unit: the step size of the update rule, the temperature, and whether a draw is kept."""
    longest = max(unit.steps for unit in units)
    lr = torch.zeros(longest, len(units), dtype=torch.float64)
    temperature = torch.zeros_like(lr)
    keep = torch.zeros(longest, len(units), dtype=torch.bool)
    for u, unit in enumerate(units):
        k = np.arange(unit.steps)
        lr[: unit.steps, u] = torch.tensor([unit.schedule.lr(i) for i in k], dtype=torch.float64)
        sampling = np.array([unit.schedule.sampling(i) for i in k]) if unit.method.cyclical else np.ones(unit.steps, bool)
        temperature[: unit.steps, u] = torch.from_numpy(sampling.astype(np.float64))
        kept = (k % protocol.thin == 0) & (sampling if unit.method.cyclical else k >= protocol.burnin * unit.steps)
        keep[: unit.steps, u] = torch.from_numpy(kept)
        if unit.method.rule == "sghmc":
            lr[:, u] *= 1 - protocol.momentum
    return lr, temperature, keep


def run(target: Target, starts: Tensor, steps_h: list[float], protocol: Protocol, *, energy_low: float,
        methods: tuple[Method, ...] = METHODS, seed: int = 0) -> tuple[list[Draws], float]:
    """Every method at every step size of ``steps_h``, from ``starts`` (seeds, 4, dim): seed s's chains start at
    its first P points for every method and step (so methods are paired by seed). Returns the kept draws and
    the seconds the loop took."""
    from csg.samplers import functional as rules

    generator = torch.Generator().manual_seed(seed)
    seeds, dim = starts.shape[0], starts.shape[-1]
    units = _layout(methods, steps_h, seeds, protocol)
    x = torch.cat([starts[:, : unit.method.chains].reshape(unit.rows, dim) for unit in units]).clone()
    unit_of_row = torch.cat([torch.full((unit.rows,), u) for u, unit in enumerate(units)])
    lr_table, temperature_table, keep_table = _tables(units, protocol)
    ladder = torch.tensor(protocol.temperatures, dtype=torch.float64)
    is_replica = torch.tensor([units[u].method.rule == "resgld" for u in unit_of_row.tolist()])
    replica_t = torch.ones(len(x), dtype=torch.float64)
    replica_t[is_replica] = ladder.repeat(int(is_replica.sum()) // len(ladder))
    hmc = int(sum(unit.rows for unit in units if unit.method.rule == "sghmc"))
    langevin = len(x) - hmc
    velocity = torch.zeros(hmc, dim, dtype=torch.float64)
    span = 2 * dim + 15.0  # contour partitions: from the lowest energy - 1 over 2 d + 15 above it
    contours = []  # (method's units, rows slice, partition)
    for method in (m for m in methods if m.rule == "contour"):
        mine = [unit for unit in units if unit.method is method]
        rows = slice(mine[0].first, mine[-1].first + mine[-1].rows)
        partition = EnergyPartition(energy_low - 1.0, span / protocol.partitions, protocol.partitions,
                                    zeta=protocol.zeta, groups=len(mine) * seeds, difference="forward")
        contours.append((mine, rows, partition))
    replicas = [unit for unit in units if unit.method.rule == "resgld"]
    weights = torch.ones(len(x), dtype=torch.float64)
    kept: list[tuple[int, Tensor, Tensor, Tensor]] = []

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a few hundred rows: threads cost more than they give, and more under contention
    started = time.perf_counter()
    try:
        for k in range(len(lr_table)):
            energy, grad = target.energy_and_grad(x)
            if replicas and 0 < k < replicas[0].steps:  # swaps of the last move, on this evaluation's energies
                block = slice(replicas[0].first, replicas[-1].first + replicas[-1].rows)
                both = torch.cat([x[block], grad[block]], -1).reshape(-1, len(ladder), 2 * dim)  # gradients go along
                e = energy[block].reshape(-1, len(ladder))
                replica_exchange(both, e, list(protocol.temperatures), offset=k % 2, generator=generator)
                x[block], grad[block] = both[..., :dim].reshape(-1, dim), both[..., dim:].reshape(-1, dim)
                energy[block] = e.reshape(-1)
            lr = lr_table[k][unit_of_row]
            temperature = temperature_table[k][unit_of_row] * replica_t
            multiplier = torch.ones(len(x), dtype=torch.float64)
            indices = []
            for mine, rows, partition in contours:
                j = partition.index(energy[rows])
                indices.append(j)
                multiplier[rows] = partition.multiplier(j, 1.0, energy[rows])
            keep_units = keep_table[k]
            if keep_units.any():
                kept.append((k, keep_units.clone(), x.clone(), None))
            noise = rules.standard_normal([x], generator)[0]
            step = (lr * multiplier)[:, None] * grad
            scale = (2 * lr * temperature).sqrt()[:, None]
            rules.sgld([x[:langevin]], [step[:langevin]], lr=1.0, weight_decay=0.0, noise_std=1.0,
                       noise=[scale[:langevin] * noise[:langevin]])
            if hmc:
                rules.sghmc([x[langevin:]], [step[langevin:]], [velocity], lr=1.0, momentum=protocol.momentum,
                            weight_decay=0.0, noise_std=1.0,
                            noise=[(1 - protocol.momentum) ** 0.5 * scale[langevin:] * noise[langevin:]])
            for (mine, rows, partition), j in zip(contours, indices):
                if k < mine[0].steps:
                    partition.update(j)
                    weights[rows] = partition.importance_weights(j)
            if keep_units.any():
                kept[-1] = kept[-1][:3] + (weights.clone(),)
    finally:
        torch.set_num_threads(threads)
    seconds = time.perf_counter() - started
    return [_draws(u, unit, kept, seeds, dim) for u, unit in enumerate(units)], seconds


def _draws(u: int, unit: Unit, kept, seeds: int, dim: int) -> Draws:
    """Per seed, the unit's kept draws of all its chains (those of the T = 1 replica for reSGLD)."""
    chains = unit.method.chains
    mine = [(k, x, w) for k, keep, x, w in kept if keep[u]]
    block = slice(unit.first, unit.first + unit.rows)
    if mine:
        points = torch.stack([x[block] for _, x, _ in mine]).reshape(len(mine), seeds, chains, dim)
        weights = torch.stack([w[block] for _, _, w in mine]).reshape(len(mine), seeds, chains)
    else:
        points, weights = torch.empty(0, seeds, chains, dim, dtype=torch.float64), torch.empty(0, seeds, chains)
    if unit.method.rule == "resgld":
        points, weights, chains = points[:, :, :1], weights[:, :, :1], 1
    iterations = np.repeat(np.array([k for k, _, _ in mine], dtype=np.int64), chains)
    draws = [points[:, s].reshape(-1, dim).numpy() for s in range(seeds)]
    return Draws(unit.method.name, unit.step, unit.steps, draws, [weights[:, s].reshape(-1).numpy() for s in range(seeds)],
                 iterations, [bool(np.isfinite(d).all()) for d in draws])


MAX_SEED = 9999  # the starts of seed s are row s of one draw per target: seeds up to this


def start_points(seeds: Sequence[int], dim: int, scale: Tensor | float, seed: int) -> Tensor:
    """(len(seeds), 4, dim) starts N(0, scale^2), the same for every method: seed s starts at row s of one draw of
    max(seeds) + 1 rows from the target's generator (``seed``), so seeds 0..n-1 start as they always have."""
    if not seeds or min(seeds) < 0 or max(seeds) > MAX_SEED:
        raise ValueError(f"seeds from 0 to {MAX_SEED}, at least one: {list(seeds)}")
    generator = torch.Generator().manual_seed(10_000 + seed)
    draw = torch.randn(max(seeds) + 1, 4, dim, generator=generator, dtype=torch.float64) * scale
    return draw[list(seeds)]


__all__ = ["BY_NAME", "METHODS", "PAIRS", "Draws", "Method", "Protocol", "chain_steps", "gradient_evaluations",
           "run", "start_points", "step_grid"]
