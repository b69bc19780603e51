r"""The study: tune every method on the tuning seeds, run the tuned settings on fresh seeds, score each run.

Per group of targets (:data:`GROUPS`: the two-mode mixtures, the two grids, the network), one process
(:func:`run_group`; the network's group runs the budgets :attr:`Protocol.network_budgets` only, :func:`protocol_of`,
and reads its mode weights and core shares from ``make reference-multimodal``'s JSON, :func:`prepare_network`; it
has no exact sampler, so no W2):

1. **tuning**: the first round runs every step of every method's grid (:mod:`.tuning`) on the tuning seeds, all
   budgets from one vectorised run (:mod:`.chains`); per target, method and budget the setting with the lowest
   mean *core TV* (:func:`scores`) is the best, and later rounds run the neighbourhoods of the best settings not
   yet bracketed in step, :math:`\beta` and C (:func:`_tune`) until each is (:func:`.tuning.check_edges`); the
   choice is the one-standard-error rule's (:func:`.tuning.choose`);
2. **evaluation**: each method at its choice and its next :attr:`Protocol.ranks` - 1 settings by mean core TV
   (:func:`.tuning.ranked`) of each budget on the evaluation seeds (50 fresh ones), with the draws for W2; each run
   records its ``rank`` (1: the choice, which the verdicts judge; the others show how the verdicts move).

**The network's shared burn-in** (:func:`burn_in`): its runs start where a per-seed burn-in from the box ended,
the same end points for every method of the seed, so that its cell asks about hopping between modes rather than
descent from the box (energies of thousands of nats, plateaus where a unit saturates).

**Scores of a run** (:func:`scores`, one chain or the pooled chains of an x4 method, over the budget's kept
iterations): the *mode-weight error* :math:`\frac12\sum_k |\hat w_k - w_k|`, :math:`\hat w_k` the mean
responsibility (:mod:`.landscapes`); the *core TV*, the total variation between the shares of the kept
iterations in each mode's core (Table 4's radius) and outside all cores, and the exact shares (from
:data:`EXACT_DRAWS` exact draws): it sees the mode weights and how tightly the chain holds each mode, so a step
that spreads the chain over the whole box (which gets an equal-weight grid's weights right) scores badly; the
*crossings* per chain; the *modes covered* (Table 4: more than 100 kept iterations within the radius, pooled);
*W2* between the run's 128 draws and 128 exact draws (exact assignment), beside W2 between two exact samples
(the floor); *M*, the cycles (constant steps: the chains), and the ceiling of M perfect picks (:mod:`.ceiling`).
A run whose chain diverged, or whose kept iterations went more than 14 sd from every mode (a density below e^-100
of the mode's: the chain has left the target, :data:`.chains.ESCAPE`), scores a mode-weight error and core TV of 1
and no W2. The ICSGLD paper's samplers (:mod:`.contour`): reSGLD is scored on its T = 1 chain (crossings per kept
chain); CSGLD's and ICSGLD x4's mode weights and core shares are importance-weighted means (weighted
accumulators), their W2 draws resampled by weight; the modes covered count their (unweighted) visits.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from csg.errors import ConfigError
from csg.paths import ROOT
from studies.accuracy.multimodal import barriers, ceiling, chains, contour, targets, tuning
from studies.accuracy.multimodal.burnin import burn_in
from studies.accuracy.multimodal.chains import BY_NAME, Block, Setting
from studies.accuracy.multimodal.landscapes import MixtureRows, NetworkRows
from studies.accuracy.multimodal.metrics import w2
from studies.accuracy.multimodal.tuning import Grids

GROUPS = (tuple(f"barrier{b}" for b in targets.BARRIERS), ("mog25", "wang25"), ("network",))
NETWORK_REFERENCE = ROOT / "results" / "csgmcmc" / "reference" / "network_multimodal.json"
EXACT_DRAWS = 2**18
COVERED = 100          # Table 4: a mode is covered when more than this many kept iterations lie in its core


@dataclass(frozen=True)
class Protocol:
    name: str = "full"
    budgets: tuple[int, ...] = (5000, 20000, 80000, 320000)
    tuning_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    seeds: tuple[int, ...] = tuple(range(1000, 1050))
    methods: tuple[str, ...] = ("SGLD", "cSGLD", "SGLD x4", "cSGLD x4", "SGHMC", "cSGHMC", "reSGLD", "CSGLD",
                                "ICSGLD x4")
    grids: Grids = field(default_factory=Grids)
    targets: tuple[str, ...] = targets.TARGETS
    workers: int = 2
    network_budgets: tuple[int, ...] = (5000, 20000, 80000)   # the network's (a gradient costs 12 x a mixture's)
    ranks: int = 3                     # settings evaluated per method and budget: the choice and the next ranks
    network_burnin: int = 40_000       # iterations of the network's shared burn-in (:func:`burn_in`)
    burnin_step: float = 0.5           # its SGLD step h, in units of 1 / L
    network_methods: tuple[str, ...] = ("SGLD", "cSGLD", "SGLD x4", "cSGLD x4", "SGHMC", "cSGHMC", "reSGLD", "CSGLD",
                                        "ICSGLD x4")     # the methods run on the network


_SMOKE_STEPS = (1 / 256, 1 / 16, 1.0, 16.0)
SMOKE = Protocol(name="smoke", budgets=(400, 1600), seeds=(1000, 1001, 1002, 1003),
                 grids=Grids(sgld=_SMOKE_STEPS, csgld=_SMOKE_STEPS, sghmc=_SMOKE_STEPS + (256.0,),
                             csghmc=_SMOKE_STEPS + (256.0,), explore=(0.25,), cycles=(25, 100),
                             explore_lattice=(0.0, 0.25, 0.5, 0.75), cycle_lattice=(2, 5, 25, 100, 400, 1600),
                             resgld=_SMOKE_STEPS, contour=_SMOKE_STEPS, temperatures=(4.0,), zetas=(4.0,)),
                 targets=("barrier4", "barrier16"), workers=1, network_budgets=(400,), ranks=2,
                 network_burnin=2000)
PROTOCOLS = {"full": Protocol(), "smoke": SMOKE}


@dataclass
class Prepared:
    """A target with what its runs are scored against."""

    name: str
    target: object
    scale: float                  # L: the largest curvature at its minima
    core_exact: np.ndarray        # exact shares of each core and of the rest (K + 1)
    low: np.ndarray
    high: np.ndarray
    covariances: np.ndarray | None = None     # the network: its modes' Gaussian fits (no exact sampler, no W2)
    floor: float = 0.0                         # the network: its lowest minimum's energy

    @property
    def exact(self) -> bool:
        return self.covariances is None


def largest_curvature(target) -> float:
    """L: the largest eigenvalue of the Hessian of U at any of the target's ``means`` (its minima)."""
    return max(float(torch.linalg.eigvalsh(torch.autograd.functional.hessian(
        lambda x: target.energy(x[None])[0], mean)).max()) for mean in target.means)


def network_reference(reference: Path | None = None) -> dict:
    """The facts of ``make reference-multimodal``'s JSON; a one-line refusal where it holds no accepted reference."""
    reference = reference or NETWORK_REFERENCE
    facts = json.loads(reference.read_text()) if reference.exists() else {}
    if not facts.get("accepted"):
        raise ConfigError("targets", "network", f"mixtures only: {reference} holds no accepted reference "
                                                "(make reference-multimodal)")
    return facts


def prepare_network(reference: Path | None = None) -> Prepared:
    """The network (:class:`.targets.StepNetwork`) with what ``make reference-multimodal`` measured: its modes'
    Gaussian fits (the main minima and their Laplace covariances), the reference's mode weights and core shares
    (importance sampling, checked by tempered SMC), L the largest curvature at the main minima."""
    facts = network_reference(reference)
    target = targets.create("network")
    means = np.array(facts["modes"]["means"])
    target.means, target.weights = torch.from_numpy(means), torch.tensor(facts["weights"], dtype=torch.float64)
    scale = largest_curvature(target)
    low, high = targets.SPECS["network"].start_box(target)
    with torch.no_grad():
        floor = float(target.energy(target.means).min())
    return Prepared("network", target, scale, np.array(facts["core_exact"]), low, high,
                    np.array(facts["modes"]["covariances"]), floor)


def prepare(name: str) -> Prepared:
    if name == "network":
        return prepare_network()
    target = targets.create(name)
    scale = largest_curvature(target)
    rows = MixtureRows([target], torch.zeros(EXACT_DRAWS, dtype=torch.long), dtype=torch.float64)
    exact = target.sample(EXACT_DRAWS, torch.Generator().manual_seed(20_000))
    _, _, mode, inside, _ = rows.step(exact)
    shares = np.bincount(mode[inside].numpy(), minlength=rows.modes) / EXACT_DRAWS
    low, high = targets.SPECS[name].start_box(target)
    return Prepared(name, target, scale, np.append(shares, 1 - shares.sum()), low, high)


def starts_of(prepared: dict[str, Prepared], seeds: Sequence[int], protocol: Protocol | None = None) -> dict:
    """(4, dim) start points of every target and seed: uniform on the target's box; the network's, where the
    ``protocol`` asks for a burn-in, the end points of :func:`burn_in` from there."""
    starts = {(name, seed): chains.start_points(targets.TARGETS.index(name), seed, len(p.low), p.low, p.high)
              for name, p in prepared.items() for seed in seeds}
    if "network" in prepared and protocol is not None and protocol.network_burnin > 0:
        ends, _ = burn_in(prepared["network"], seeds, protocol.network_burnin, protocol.burnin_step)
        starts.update({("network", seed): ends[seed] for seed in seeds})
    return starts


def _landscape(prepared: dict[str, Prepared]):
    names = list(prepared)

    def landscape_of(row_targets: list[str]) -> MixtureRows | NetworkRows:
        if names == ["network"]:
            p = prepared["network"]
            return NetworkRows(p.target, p.target.means, torch.from_numpy(p.covariances), len(row_targets), floor=p.floor)
        index = torch.tensor([names.index(t) for t in row_targets])
        return MixtureRows([prepared[n].target for n in names], index)

    return landscape_of


def scores(outcome: chains.Outcome, b: int, budget: int, prepared: Prepared) -> list[dict] | None:
    """One row per seed of block ``b`` at ``budget`` (module docstring); ``None`` where the setting has no window."""
    block = outcome.blocks[b]
    span = chains.window(block.method, block.setting, budget)
    if span is None or span[1] > block.iterations:
        return None
    start, end = outcome.marks[(b, span[0])], outcome.marks[(b, span[1])]
    kept = (end["kept"] - start["kept"]).sum(1)
    core = (end["core"] - start["core"]).sum(1)
    mass = (end["mass"] - start["mass"]).sum(1) if "mass" in end else core    # contour: weighted
    with np.errstate(invalid="ignore"):    # no kept iteration (no sampling stage: ceil(beta C) = C) scores 1
        weights = (end["soft"] - start["soft"]).sum(1) / kept[:, None]
        shares = np.concatenate([mass / kept[:, None], 1 - mass.sum(1, keepdims=True) / kept[:, None]], 1)
    escaped = (end["escaped"] - start["escaped"]).sum(1)
    finite = end["finite"].all(1) & np.isfinite(weights).all(1) & (escaped == 0)
    truth = prepared.target.weights.numpy()
    rows = []
    for s, seed in enumerate(block.seeds):
        ok = bool(finite[s])
        rows.append({"target": prepared.name, "method": block.method.name, "budget": budget, "seed": seed,
                     "step": block.setting.step, "explore": block.setting.explore, "cycle": block.setting.cycle,
                     "cycles": tuning.cycles(block.method, block.setting, budget), "finite": ok,
                     "mode_error": 0.5 * float(np.abs(weights[s] - truth).sum()) if ok else 1.0,
                     "core_tv": 0.5 * float(np.abs(shares[s] - prepared.core_exact).sum()) if ok else 1.0,
                     "crossings": float((end["crossings"] - start["crossings"])[s].sum()) / block.method.sampled,
                     "covered": int((core[s] > COVERED).sum())})
    return rows


def exact_sample(prepared: Prepared, seed: int, budget: int, copy: int = 0) -> np.ndarray:
    generator = torch.Generator().manual_seed(7_919 * seed + 31 * budget + copy + 104_729 * targets.TARGETS.index(prepared.name))
    return prepared.target.sample(chains.DRAWS, generator).numpy()


def _tune(blocks: list[Block], prepared: dict[str, Prepared], protocol: Protocol, log, ranges: dict) -> tuple:
    """The tuning rounds of :mod:`.tuning`: the first round's ``blocks``, then the neighbourhoods of the choices
    that are not bracketed yet; every round with the first round's noise streams and starts. Returns the tuning
    table, the choices and the number of rounds."""
    names = list(prepared)
    streams = [(name, seed, c) for name in names for seed in protocol.tuning_seeds for c in range(4)]
    starts = starts_of(prepared, protocol.tuning_seeds, protocol)
    scale = {name: p.scale for name, p in prepared.items()}
    rows: list[dict] = []
    for round_ in range(1, protocol.grids.rounds + 1):
        log(f"{', '.join(names)}: tuning round {round_}, {len(blocks)} settings x {len(protocol.tuning_seeds)} seeds")
        outcome = chains.run(blocks, _landscape(prepared), starts, scale, protocol.budgets,
                             seed=1 + targets.TARGETS.index(names[0]), draws=False, streams=streams, ranges=ranges)
        rows += [row for b, block in enumerate(blocks) for budget in protocol.budgets
                 for row in scores(outcome, b, budget, prepared[block.target]) or []]
        del outcome
        runs = pd.DataFrame(rows).drop_duplicates(tuning.KEYS + tuning.SETTING + ["seed"])
        table = tuning.summarise(runs)
        chosen = tuning.choose(table, protocol.grids)
        more = tuning.wanted(chosen, table, protocol.grids)
        if not more:
            break
        blocks = [Block(name, BY_NAME[method], setting, protocol.tuning_seeds,
                        chains.chain_length(BY_NAME[method], budget)) for (name, method, setting), budget in more.items()]
    return table, chosen, round_


def run_group(names: Sequence[str], protocol: Protocol, log=print) -> dict[str, pd.DataFrame]:
    """Tuning and evaluation of one group of targets (module docstring): the tuning runs, the chosen settings, the
    evaluation runs and the exact floor, as data frames."""
    started = time.perf_counter()
    prepared = {name: prepare(name) for name in names}
    scale = {name: p.scale for name, p in prepared.items()}
    methods = [BY_NAME[m] for m in protocol.methods if tuple(names) != ("network",) or m in protocol.network_methods]
    longest = max(protocol.budgets)
    blocks = [Block(name, method, setting, protocol.tuning_seeds, chains.chain_length(method, longest))
              for name in names for method in methods for setting in protocol.grids.settings(method)]
    barrier = pd.concat([barriers.barrier_table(n, p.target, p.target.means.numpy(), p.scale) for n, p in prepared.items()],
                        ignore_index=True)
    ranges = {n: contour.energy_range(barrier[barrier.target == n]) for n in names}
    if not blocks:
        raise ConfigError("methods", ",".join(protocol.methods), f"methods that run on {', '.join(names)}")
    tuned, chosen, rounds = _tune(blocks, prepared, protocol, log, ranges)
    log(f"{', '.join(names)}: tuned in {time.perf_counter() - started:.0f} s ({rounds} rounds)")
    evaluation = []
    for (name, method_name), part in tuning.ranked(tuned, protocol.ranks).groupby(["target", "method"], sort=False):
        method = BY_NAME[method_name]
        for setting, budgets in part.groupby(tuning.SETTING, sort=False):
            step, explore, cycle = setting
            evaluation.append((Block(name, method, Setting(float(step), float(explore), int(cycle)), protocol.seeds,
                                     chains.chain_length(method, int(budgets.budget.max()))),
                               dict(zip(budgets.budget.astype(int), budgets["rank"].astype(int)))))
    blocks = [block for block, _ in evaluation]
    network = ("network" in prepared and protocol.network_burnin > 0)
    starts = starts_of({n: p for n, p in prepared.items() if n != "network"}, protocol.seeds)
    burnin = pd.DataFrame()
    if network:
        ends, burnin = burn_in(prepared["network"], protocol.seeds, protocol.network_burnin, protocol.burnin_step)
        starts.update({("network", seed): ends[seed] for seed in protocol.seeds})
        log(f"network: burn-in of {protocol.network_burnin:,} iterations, {int(burnin.arrived.sum())} of "
            f"{len(burnin)} end points arrived")
    elif "network" in prepared:
        starts.update(starts_of({"network": prepared["network"]}, protocol.seeds))
    streams = [(name, seed, c) for name in names for seed in protocol.seeds for c in range(4)]
    outcome = chains.run(blocks, _landscape(prepared), starts, scale, protocol.budgets,
                         seed=1000 + targets.TARGETS.index(names[0]), streams=streams, ranges=ranges)
    runs = []
    for b, (block, ranks) in enumerate(evaluation):
        for budget in sorted(ranks):
            rows = scores(outcome, b, budget, prepared[block.target])
            for row, pooled in zip(rows, _draws(outcome, b, budget)):
                p = prepared[block.target]
                ok = p.exact and row["finite"] and np.isfinite(pooled).all()
                row["w2"] = w2(pooled, exact_sample(p, row["seed"], budget)) if ok else math.nan
                row["rank"] = ranks[budget]
            runs += rows
    runs = pd.DataFrame(runs)
    runs["ceiling"] = [ceiling.ceiling(prepared[t].target.weights.numpy(), m) for t, m in zip(runs.target, runs.cycles)]
    floor = [{"target": name, "method": "exact", "budget": budget, "seed": seed, "finite": True, "rank": 1,
              "w2": w2(exact_sample(p, seed, budget, 1), exact_sample(p, seed, budget))}
             for name, p in prepared.items() if p.exact for budget in protocol.budgets for seed in protocol.seeds]
    runs = pd.concat([runs, pd.DataFrame(floor)], ignore_index=True) if floor else runs
    log(f"{', '.join(names)}: evaluated in {time.perf_counter() - started:.0f} s ({outcome.rows} rows)")
    info = pd.DataFrame([{"target": n, "scale": p.scale, "modes": len(p.core_exact) - 1, "tuning_rounds": rounds,
                          "core_share": 1 - p.core_exact[-1], "seconds": time.perf_counter() - started}
                         for n, p in prepared.items()])
    return {"tuning": tuned, "chosen": chosen, "runs": runs, "barriers": barrier, "targets": info, "burnin": burnin}


def _draws(outcome: chains.Outcome, b: int, budget: int) -> list[np.ndarray]:
    """Each seed's DRAWS draws of block ``b`` for W2: its kept chains' pooled; a contour run's resampled by weight
    (:func:`.contour.resample`, one uniform per seed and budget)."""
    block = outcome.blocks[b]
    draws, weights = outcome.draws[(b, budget)], outcome.weights[(b, budget)]
    kept = block.method.sampled
    pooled = draws[:, :kept].reshape(len(block.seeds), -1, draws.shape[-1])
    if block.method.kind != contour.CONTOUR:
        return list(pooled)
    weights = weights[:, :kept].reshape(len(block.seeds), -1)
    return [contour.resample(pooled[s], weights[s], chains.DRAWS, 31 * seed + budget)
            for s, seed in enumerate(block.seeds)]


@dataclass
class Study:
    protocol: Protocol
    tables: dict[str, pd.DataFrame]
    seconds: float
    load: float = math.nan        # the machine's 15-minute load average when the study ended (other jobs' too)


def _group_job(args):
    names, protocol = args
    return run_group(names, protocol, log=lambda line: print(line, flush=True))


def protocol_of(group: Sequence[str], protocol: Protocol) -> Protocol:
    """The network's group runs the protocol's ``network_budgets`` only: its gradient costs about 12 x a 2-D
    mixture's (1 against 0.08 microseconds a row); at budgets up to 80,000 its group took 2.2 to 4 min of one busy
    core, and the longest budget, 320,000, would take about 4 x that."""
    return replace(protocol, budgets=protocol.network_budgets) if tuple(group) == ("network",) else protocol


def run_study(protocol: Protocol = Protocol(), log=print) -> Study:
    """Every group of the protocol's targets, in ``workers`` processes (the report checks the grids' edges)."""
    started = time.perf_counter()
    groups = [tuple(n for n in group if n in protocol.targets) for group in GROUPS]
    groups = [g for g in groups if g and (g != ("network",) or set(protocol.methods) & set(protocol.network_methods))]
    if ("network",) in groups:
        network_reference()            # refused before any group starts, not in the network's own process
    if protocol.workers > 1 and len(groups) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(protocol.workers, len(groups)), mp_context=context) as pool:
            results = list(pool.map(_group_job, [(g, protocol_of(g, protocol)) for g in groups]))
    else:
        results = [run_group(g, protocol_of(g, protocol), log) for g in groups]
    tables = {key: pd.concat([r[key] for r in results], ignore_index=True) for key in results[0]}
    load = os.getloadavg()[2] if hasattr(os, "getloadavg") else math.nan
    study = Study(protocol, tables, time.perf_counter() - started, load)
    if protocol.name == "full":       # the long study; smoke runs (and tests) leave nothing behind
        _keep(study)
    return study


KEPT = ROOT / "multirun" / "accuracy-multimodal-tables"


def _keep(study: Study) -> None:
    """Every table of the finished study into :data:`KEPT` (git-ignored, overwritten by the next study) before the
    report's edge check, so that a refused report leaves its runs to look at."""
    from csg.reporting import write_text

    KEPT.mkdir(parents=True, exist_ok=True)
    for key, table in study.tables.items():
        write_text(KEPT / f"{key}.csv", table.to_csv(index=False))


def with_seeds(protocol: Protocol, seeds: Sequence[int]) -> Protocol:
    """The protocol evaluated on ``seeds`` (each once, none of them a tuning seed)."""
    return replace(protocol, seeds=tuple(seeds))
