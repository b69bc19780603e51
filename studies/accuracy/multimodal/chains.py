r"""Every method, setting and seed on a group of targets as one vectorised run: one tensor, one loop.

**Methods** (:data:`METHODS`): SGLD and SGHMC at a constant step h; cSGLD and cSGHMC with the cosine schedule
of cSG-MCMC's Eq. (1), :math:`\alpha_k = \frac{\alpha_0}{2}[\cos(\pi\,\mathrm{mod}(k, C) / C) + 1]`, cycle
length C, the first share :math:`\beta` of each cycle an exploration stage without noise, draws from the
sampling stages (Algorithm 1); "x4": 4 chains sharing the budget, pooled. A :class:`Setting` holds h or
:math:`\alpha_0` in units of 1/L (L: the target's largest curvature at its modes), :math:`\beta` and C.
SGHMC's step is lr = h (1 - m) at momentum m: in the high-friction limit it moves as SGLD at step h. The ICSGLD
paper's samplers, reSGLD (2 chains: T = 1, kept, and a hot one), CSGLD and ICSGLD x4 (4 chains sharing one
contour theta): :mod:`.contour`, their own value (reSGLD's high temperature, the contour methods' zeta) in
:attr:`Setting.explore`. Every budget counts all chains of a method: B gradient evaluations are B / P
iterations of each of its P chains (reSGLD: 2 chains of B / 2).

**One run** (:func:`run`): every :class:`Block` (target, method, setting, seeds, iterations per chain) becomes
seeds x chains rows of one float32 tensor. Each iteration computes every row's gradient (its landscape,
:mod:`.landscapes`), its step from its own schedule, and applies the update rules of
:mod:`csg.samplers.functional` (``sgld`` on the SGLD rows, ``sghmc`` on the SGHMC rows; each row's step
folded into its gradient and noise, lr = 1 in the rule). The noise of a row is that of its (target, seed, chain)
stream: every method and setting of a seed sees the same normal draws and starts at the same points (common
random numbers; seed s's chain c starts at :func:`start_points`). A budget of B gradient evaluations is B / P
iterations of each of P chains, and a shorter budget's chain is the first iterations of a longer one's, so one
run scores every budget: accumulators over the kept iterations (constant steps: all after a burn-in share of
the budget's iterations; cyclical: the sampling stages) are recorded at each budget's window (:func:`window`),
and rows are dropped once their chains end.

Per window: the summed ``soft`` mode weights and the kept count (their ratio estimates the mode weights), the
kept iterations in each mode's core (Table 4's coverage), the crossings (entries into a mode's core other than
the last core the chain was in, over kept iterations: a cyclical restart that lands elsewhere is one crossing),
the kept iterations more than sqrt(:data:`ESCAPE`) sd from their nearest mode (a chain there has left the target),
and :data:`DRAWS` positions spread over the kept iterations (:func:`draw_iterations`), for W2 (a contour run:
:data:`CANDIDATES` positions with their importance weights, :mod:`.contour`; reSGLD: its T = 1 chain's).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from studies.accuracy.multimodal import contour


@dataclass(frozen=True)
class Method:
    name: str
    rule: str                 # "sgld" or "sghmc"
    chains: int = 1           # parallel chains sharing the budget
    cyclical: bool = False
    kind: str = "plain"       # "plain", or the ICSGLD paper's samplers: contour.REPLICA, contour.CONTOUR

    @property
    def sampled(self) -> int:
        """The chains whose iterations are kept: all but a replica's hot chain."""
        return 1 if self.kind == contour.REPLICA else self.chains


METHODS = (
    Method("SGLD", "sgld"), Method("cSGLD", "sgld", cyclical=True),
    Method("SGHMC", "sghmc"), Method("cSGHMC", "sghmc", cyclical=True),
    Method("SGLD x4", "sgld", 4), Method("cSGLD x4", "sgld", 4, True),
    Method("SGHMC x4", "sghmc", 4), Method("cSGHMC x4", "sghmc", 4, True),
    Method("reSGLD", "sgld", 2, kind=contour.REPLICA), Method("CSGLD", "sgld", kind=contour.CONTOUR),
    Method("ICSGLD x4", "sgld", 4, kind=contour.CONTOUR),
)
BY_NAME = {m.name: m for m in METHODS}
PAIRS = (("cSGLD", "SGLD"), ("cSGHMC", "SGHMC"), ("cSGLD x4", "SGLD x4"), ("cSGHMC x4", "SGHMC x4"))
CONTOUR_PAIRS = (("ICSGLD x4", "SGLD x4"), ("ICSGLD x4", "cSGLD x4"), ("ICSGLD x4", "CSGLD"), ("CSGLD", "SGLD"),
                 ("reSGLD", "SGLD"))
MOMENTUM = 0.9
BURNIN = 0.1
ESCAPE = 200.0                # a kept iteration this far (squared, in sd) from its nearest mode: the chain left
FLUSH = 1024                  # float32 sums of the mode weights go into float64 this often
DRAWS = 128                   # positions kept per budget window for W2 (x4: 32 per chain)
CANDIDATES = 4 * DRAWS        # a contour run's weighted positions, resampled to DRAWS for W2


@dataclass(frozen=True)
class Setting:
    step: float               # h (constant) or alpha_0 (cyclical), in units of 1 / L
    explore: float = 0.0      # beta: the exploration share of each cycle
    cycle: int = 1            # C: cycle length in iterations of one chain (1: a constant step)


@dataclass(frozen=True)
class Block:
    target: str
    method: Method
    setting: Setting
    seeds: tuple[int, ...]
    iterations: int           # of each chain


def chain_length(method: Method, budget: int) -> int:
    """Iterations of each of the method's chains at a budget of ``budget`` gradient evaluations: B / P."""
    return budget // method.chains


def window(method: Method, setting: Setting, budget: int) -> tuple[int, int] | None:
    """The kept window [start, end) of a chain at ``budget`` (``None``: the setting has no whole cycle there)."""
    end = chain_length(method, budget)
    if method.cyclical:
        return (0, end) if setting.cycle <= end and end % setting.cycle == 0 else None
    return (int(round(BURNIN * end)), end)


def draws_per_chain(method: Method) -> int:
    """Positions each chain keeps per budget: DRAWS / P; a contour run CANDIDATES / P; reSGLD DRAWS (each chain
    records them, its T = 1 chain's are used)."""
    if method.kind == contour.REPLICA:
        return DRAWS
    return (CANDIDATES if method.kind == contour.CONTOUR else DRAWS) // method.chains


def first_kept(setting: Setting) -> int:
    """The first iteration of each cycle in its sampling stage: r(k) = mod(k, C) / C >= beta."""
    return math.ceil(round(setting.explore * setting.cycle, 9))


def draw_iterations(method: Method, setting: Setting, budget: int) -> np.ndarray | None:
    """The iterations of each chain whose positions are the budget's draws for W2: DRAWS / P spread over the kept
    iterations of its window, one at a random place in each of DRAWS / P equal strata (evenly spaced draws would
    alias with the cycles: every one at the same phase). The offsets are the same for every setting and seed;
    ``None``: no window."""
    span = window(method, setting, budget)
    if span is None:
        return None
    n, (start, end) = draws_per_chain(method), span
    offset = np.random.default_rng(DRAWS + n).random(n)
    if not method.cyclical:
        return start + ((np.arange(n) + offset) * (end - start) / n).astype(np.int64)
    first = first_kept(setting)
    kept = setting.cycle - first
    j = ((np.arange(n) + offset) * (end // setting.cycle) * kept / n).astype(np.int64)
    return (j // kept) * setting.cycle + first + j % kept


def start_points(target_index: int, seed: int, dim: int, low: np.ndarray, high: np.ndarray) -> Tensor:
    """(4, dim) starts of seed ``seed`` on a target: uniform on the box, from a generator of (target, seed)."""
    generator = torch.Generator().manual_seed(1_000_003 * (target_index + 1) + seed)
    u = torch.rand(4, dim, generator=generator, dtype=torch.float64)
    return torch.from_numpy(low) + u * torch.from_numpy(high - low)


@dataclass
class Outcome:
    """Per block: its rows' accumulators at each recorded iteration, and its draws per budget."""

    blocks: list[Block]
    marks: dict = field(default_factory=dict)      # (block, k) -> dict of arrays (seeds, chains, ...)
    draws: dict = field(default_factory=dict)      # (block, budget) -> array (seeds, chains, DRAWS / P, dim)
    weights: dict = field(default_factory=dict)    # (block, budget) -> array (seeds, chains, DRAWS / P)
    seconds: float = 0.0
    rows: int = 0


def _rows(blocks: Sequence[Block]) -> list[tuple[int, int, int]]:
    """(block, seed position, chain) of every row, the SGLD rows first."""
    order = sorted(range(len(blocks)), key=lambda b: blocks[b].method.rule != "sgld")
    return [(b, s, c) for b in order for s in range(len(blocks[b].seeds)) for c in range(blocks[b].method.chains)]


def _marks(blocks: Sequence[Block], budgets: Sequence[int]) -> set[int]:
    marks = set()
    for block in blocks:
        for budget in budgets:
            span = window(block.method, block.setting, budget)
            if span and span[1] <= block.iterations:
                marks.update(span)
    return marks


def _draw_events(blocks: Sequence[Block], layout, budgets: Sequence[int]):
    """Every (iteration, row, slot) at which a row's position is a draw, sorted by iteration. The slots of a
    (block, budget) are contiguous, seed-major, then chain, then draw; returns the events, each (block, budget)'s
    first slot, and the number of slots."""
    iterations, rows, slots, first, offset = [], [], [], {}, 0
    starts = {}
    for row, (b, _, _) in enumerate(layout):
        starts.setdefault(b, row)
    for b, row0 in starts.items():
        block = blocks[b]
        count = len(block.seeds) * block.method.chains
        for budget in budgets:
            k = draw_iterations(block.method, block.setting, budget)
            if k is None or window(block.method, block.setting, budget)[1] > block.iterations:
                continue
            first[(b, budget)] = offset
            iterations.append(np.tile(k, count))
            rows.append(np.repeat(np.arange(row0, row0 + count), len(k)))
            slots.append(offset + np.arange(count * len(k)))
            offset += count * len(k)
    if not iterations:
        return (np.zeros(0, np.int64),) * 3, first, 0
    k, r, slot = np.concatenate(iterations), np.concatenate(rows), np.concatenate(slots)
    order = np.argsort(k, kind="stable")
    return (k[order], r[order], slot[order]), first, offset


def run(blocks: Sequence[Block], landscape_of: Callable, starts: dict, scale: dict[str, float],
        budgets: Sequence[int], *, seed: int, draws: bool = True, streams: Sequence[tuple] = (), log=None,
        ranges: dict | None = None) -> Outcome:
    """Run ``blocks``: ``landscape_of(targets)`` builds the landscape of rows whose targets are the list given;
    ``starts[(target, seed)]``: (4, dim) start points; ``scale[target]``: L, so that a step of s means s / L;
    ``draws``: whether to keep the draws for W2 (the tuning runs need only the accumulators); ``streams``: every
    (target, seed, chain) whose noise each iteration draws (default: the rows'), so that runs of different blocks
    given the same ``streams`` and ``seed`` give a row the same noise; ``ranges[target]``: the contour rows' energy
    range (:func:`.contour.energy_range`)."""
    from csg.samplers import functional as rules

    layout = _rows(blocks)
    block_of = [b for b, _, _ in layout]
    dim = next(iter(starts.values())).shape[-1]
    own = {(blocks[b].target, blocks[b].seeds[s], c) for b, s, c in layout}
    streams = {key: i for i, key in enumerate(sorted(own | set(streams)))}
    stream = torch.tensor([streams[(blocks[b].target, blocks[b].seeds[s], c)] for b, s, c in layout])
    x = torch.stack([starts[(blocks[b].target, blocks[b].seeds[s])][c] for b, s, c in layout]).float()
    amplitude = torch.tensor([blocks[b].setting.step / scale[blocks[b].target] for b in block_of], dtype=torch.float32)
    hmc = torch.tensor([blocks[b].method.rule == "sghmc" for b in block_of])
    factor = torch.where(hmc, 1 - MOMENTUM, 1.0)                    # SGHMC: lr = h (1 - m), noise sqrt(2 lr (1 - m))
    cycle = torch.tensor([blocks[b].setting.cycle for b in block_of])
    first = torch.tensor([first_kept(blocks[b].setting) if blocks[b].method.cyclical else 0 for b in block_of])
    end = torch.tensor([blocks[b].iterations for b in block_of])
    landscape = landscape_of([blocks[b].target for b in block_of])
    extra = contour.Interactions(blocks, layout, ranges or {}, streams, seed)
    landscape.with_energy = extra.active
    modes, rows = landscape.modes, len(layout)
    soft_sum = torch.zeros(rows, modes, dtype=torch.float64)
    soft_recent = torch.zeros(rows, modes)   # float32, flushed into soft_sum every FLUSH iterations
    kept = torch.zeros(rows, dtype=torch.float64)
    core_count = torch.zeros(rows, modes, dtype=torch.int32)
    core_mass = torch.zeros(rows if extra.active else 0, modes, dtype=torch.float64)   # weighted core_count
    crossings = torch.zeros(rows, dtype=torch.int32)
    escaped = torch.zeros(rows, dtype=torch.int32)
    last = torch.full((rows,), -1, dtype=torch.int64)
    velocity = torch.zeros(int(hmc.sum()), dim)
    alive, flat = torch.arange(rows), torch.arange(rows) * modes
    position = torch.arange(rows)            # each original row's index among the rows still running
    (event_k, event_row, event_slot), draw_first, slots = _draw_events(blocks, layout, budgets if draws else ())
    event_row, event_slot = torch.from_numpy(event_row), torch.from_numpy(event_slot)
    bounds = np.searchsorted(event_k, np.arange(int(end.max()) + 2)).tolist()
    kept_draws, kept_weights = torch.full((slots, dim), math.nan), torch.ones(slots)
    marks, stops = _marks(blocks, budgets), sorted(set(end.tolist()))
    recorded: dict[int, tuple] = {}
    generator = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a few thousand rows: threads cost more than they give, and more under contention
    started = time.perf_counter()
    try:
        for k in range(stops[-1] + 1):
            if k % FLUSH == 0 or k in marks or k in stops:
                soft_sum += soft_recent
                soft_recent.zero_()
            if k in marks or k in stops:
                recorded[k] = (alive.clone(), soft_sum.clone(), kept.clone(), core_count.clone(), crossings.clone(),
                               escaped.clone(), torch.isfinite(x).all(-1), core_mass.clone())
            if k in stops:
                keep = end > k
                if not keep.any():
                    break
                velocity = velocity[keep[hmc]]
                x, alive, amplitude, factor, cycle, first, end, hmc, flat = (
                    t[keep] for t in (x, alive, amplitude, factor, cycle, first, end, hmc, flat))
                soft_sum, soft_recent, kept, core_count, crossings, escaped, last, stream = (
                    t[keep] for t in (soft_sum, soft_recent, kept, core_count, crossings, escaped, last, stream))
                flat = torch.arange(len(x)) * modes
                position[alive] = torch.arange(len(alive))
                landscape = landscape.subset(keep)
                if extra.active:
                    core_mass = core_mass[keep]
                    extra.subset(k, keep, position)
                if log:
                    log(f"  iteration {k}: {len(x)} rows go on ({time.perf_counter() - started:.0f} s)")
            inner = torch.remainder(k, cycle)
            on = inner >= first
            lr = amplitude * factor * (0.5 * (torch.cos(inner * (math.pi / cycle)) + 1))
            grad, soft, where, inside, far = landscape.step(x)
            gate = on.to(soft.dtype)
            weight = gate
            if extra.active:                      # swaps, then the contour multiplier and importance weights
                extra.swap(landscape.energy, (x, grad, soft, where, inside, far, landscape.energy))
                multiplier, worth = extra.contour_step(landscape.energy)
                grad, weight, on = grad * multiplier[:, None], gate * worth, on & (extra.counted > 0)
            if bounds[k] < bounds[k + 1]:
                event = position[event_row[bounds[k]:bounds[k + 1]]]
                kept_draws[event_slot[bounds[k]:bounds[k + 1]]] = x[event]
                if extra.active:
                    kept_weights[event_slot[bounds[k]:bounds[k + 1]]] = worth[event]
            soft_recent += soft * weight[:, None]
            kept += weight
            escaped += on & (far > ESCAPE)
            inside &= on
            core_count.view(-1).index_add_(0, flat + where, inside.to(torch.int32))
            if extra.active:
                core_mass.view(-1).index_add_(0, flat + where, (inside * weight).double())
            crossings += inside & (last >= 0) & (where != last)
            last = torch.where(inside, where, last)
            noise = torch.randn(len(streams), dim, generator=generator)[stream]
            scale_noise = ((2 * lr * factor).sqrt() * gate * (extra.noise if extra.active else 1.0))[:, None]
            step = lr[:, None] * grad
            langevin = len(x) - len(velocity)
            rules.sgld([x[:langevin]], [step[:langevin]], lr=1.0, weight_decay=0.0, noise_std=1.0,
                       noise=[scale_noise[:langevin] * noise[:langevin]])
            if len(velocity):
                rules.sghmc([x[langevin:]], [step[langevin:]], [velocity], lr=1.0, momentum=MOMENTUM,
                            weight_decay=0.0, noise_std=1.0, noise=[scale_noise[langevin:] * noise[langevin:]])
    finally:
        torch.set_num_threads(threads)
    outcome = Outcome(list(blocks), seconds=time.perf_counter() - started, rows=rows)
    _collect(outcome, layout, recorded, kept_draws.numpy(), draw_first, kept_weights.numpy())
    return outcome


def _collect(outcome: Outcome, layout, recorded: dict, draws: np.ndarray, draw_first: dict, weights: np.ndarray) -> None:
    """Regroup the recorded accumulators and the draws per block as (seeds, chains, ...) arrays."""
    rows_of: dict[int, list[int]] = {}
    for row, (b, _, _) in enumerate(layout):
        rows_of.setdefault(b, []).append(row)
    for k, (alive, soft_sum, kept, core_count, crossings, escaped, finite, core_mass) in recorded.items():
        index = np.full(len(layout), -1)
        index[alive.numpy()] = np.arange(len(alive))
        for b, rows in rows_of.items():
            picked = index[rows]
            if picked[0] < 0:
                continue
            block = outcome.blocks[b]
            shape = (len(block.seeds), block.method.chains)
            outcome.marks[(b, k)] = {
                "soft": soft_sum[picked].numpy().reshape(*shape, -1), "kept": kept[picked].numpy().reshape(shape),
                "core": core_count[picked].numpy().reshape(*shape, -1),
                "crossings": crossings[picked].numpy().reshape(shape), "escaped": escaped[picked].numpy().reshape(shape),
                "finite": finite[picked].numpy().reshape(shape)}
            if block.method.kind == contour.CONTOUR:
                outcome.marks[(b, k)]["mass"] = core_mass[picked].numpy().reshape(*shape, -1)
    for (b, budget), offset in draw_first.items():
        block = outcome.blocks[b]
        shape = (len(block.seeds), block.method.chains, draws_per_chain(block.method))
        count = math.prod(shape)
        outcome.draws[(b, budget)] = draws[offset:offset + count].reshape(*shape, -1)
        outcome.weights[(b, budget)] = weights[offset:offset + count].reshape(shape)
