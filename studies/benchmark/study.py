r"""``make posterior-benchmark``: how close each method's predictive comes to the network's posterior predictive, at
equal gradient budgets.

**The protocol** (:class:`Protocol`, :data:`FULL`): every contender of :mod:`.contenders` at every budget of
:data:`.contenders.BUDGETS` (epochs over all its chains), as ``python train.py experiment=posterior_benchmark``
runs it, at the embedded default's temperature T = 0.2 (the cold posterior :math:`\exp(-U/T)` that the reference
``results/benchmark/reference/mnist_mlp_T0.2.npz`` samples; the optimisers' runs have no temperature and are scored
against the same predictive). Per contender and budget:

1. *tuning*: ``sampler.lr0`` on the grid :data:`.tuning.STEP_FACTORS` x the sampler's recipe step, chosen by
   :func:`.tuning.search` on the ensemble's NLL on held-out digits over the tuning seeds (:data:`.tuning.TUNING_SEEDS`,
   disjoint from the evaluation seeds). Only the step is tuned; cycles, exploration share and samples per cycle are
   the recipe's (chosen for cSGHMC on mnist5k: a home advantage the report states). The reference is never used to
   tune: what a user without one can do.
2. *evaluation*: the chosen step on every evaluation seed (:data:`EVAL_SEEDS`, 20), each run scored against the
   reference on the test digits and Fashion-MNIST (``evaluation.reference``: agreement, total variation).

The control for noise, paired: besides Snapshot-SGDM at its own tuned step, cSGHMC's cycles with the noise off at
*cSGHMC's* chosen step on the same seeds (:data:`NOISE_OFF`), so that the two differ in the noise alone.

Each (contender, budget) is one task; ``workers`` processes run the tasks, the longest first, one thread each.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from studies.benchmark.contenders import BUDGETS, CONTENDERS, run_contender
from studies.benchmark.peers import PEERS, peer_recipe_lr0, peer_validation_nll, run_peer
from studies.benchmark.tuning import STEP_FACTORS, TUNING_SEEDS, search, validation_batches, validation_nll

__all__ = ["ALL", "EVAL_SEEDS", "FULL", "NOISE_OFF", "Protocol", "SMOKE", "recipe_lr0", "run_study", "run_task"]

EVAL_SEEDS = tuple(range(100, 120))
BASE = "cSGHMC"
NOISE_OFF = "cSGHMC, noise off"   # cSGHMC's cycles at T = 0, at cSGHMC's chosen step: the paired control for noise
QUIET = ("hydra.job_logging.root.handlers=[file]",)   # each run logs to its train.log only
ALL = (*CONTENDERS, *PEERS)      # csg's contenders, then the peers' (run through their own APIs: .peers)


@dataclass(frozen=True)
class Protocol:
    name: str
    contenders: tuple[str, ...] = ALL
    budgets: dict[str, int] = field(default_factory=lambda: dict(BUDGETS))
    seeds: tuple[int, ...] = EVAL_SEEDS
    tuning_seeds: tuple[int, ...] = TUNING_SEEDS
    factors: tuple[float, ...] = STEP_FACTORS
    temperature: float = 0.2
    workers: int = 2
    overrides: tuple[str, ...] = ()     # train.py overrides of every run (e.g. ood.root=...)


FULL = Protocol("full")
SMOKE = Protocol("smoke", contenders=(BASE, "Snapshot-SGDM", "SGHMC"), budgets={"0.2x": 40}, seeds=(100, 101, 102),
                 tuning_seeds=(0,), factors=(0.5, 1.0, 2.0), workers=1)


def recipe_lr0(name: str, temperature: float) -> float:
    """The contender's ``sampler.lr0`` as the preset composes it (the grid's centre; a peer: its csg sampler's)."""
    from studies.benchmark.task import compose

    if name in PEERS:
        return peer_recipe_lr0(name, temperature)
    return float(compose(temperature, CONTENDERS[name].sampler).sampler.lr0)


def _slug(name: str) -> str:
    return name.replace(" ", "_").replace(",", "")


def run_task(name: str, label: str, protocol: Protocol, runs: Path, reference: Path) -> tuple[list[dict], list[dict]]:
    """Tune contender ``name`` at budget ``label``, then run its choice on the evaluation seeds (and, for cSGHMC,
    the noise-off control at its step): (tuning rows, evaluation rows). The runs' summaries are not printed (each
    run's train.log and metrics.json hold them)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return _task(name, label, protocol, runs, reference)


def _task(name: str, label: str, protocol: Protocol, runs: Path, reference: Path) -> tuple[list[dict], list[dict]]:
    import torch

    torch.set_num_threads(1)
    epochs, temperature = protocol.budgets[label], protocol.temperature
    recipe, batches = recipe_lr0(name, temperature), validation_batches()
    started = time.perf_counter()

    tuning_overrides = [o for o in protocol.overrides if not o.startswith("ood.")]   # tuning runs have ood=none

    def objective(index: int) -> float:
        lr0 = recipe * protocol.factors[index]
        if name in PEERS:
            return peer_validation_nll(name, epochs, temperature, lr0, protocol.tuning_seeds, batches,
                                       tuple(tuning_overrides))
        return validation_nll(name, epochs, temperature, lr0, runs / "tuning", protocol.tuning_seeds, batches,
                              extra=(*tuning_overrides, *QUIET))

    found = search(objective, len(protocol.factors), protocol.factors.index(1.0))
    lr0 = recipe * protocol.factors[found.best]
    tuned = [{"method": name, "budget": label, "budget_epochs": epochs, "factor": protocol.factors[i],
              "lr0": recipe * protocol.factors[i], "validation_nll": score, "chosen": i == found.best,
              "bracketed": found.bracketed} for i, score in found.scores.items()]
    tuning_seconds = time.perf_counter() - started
    arms = [(name, name, ())]
    if name == BASE:
        arms.append((NOISE_OFF, "Snapshot-SGDM", ()))   # the same cycles and samples, T = 0
    rows = []
    for shown, contender, extra in arms:
        for seed in protocol.seeds:
            if contender in PEERS:
                row = run_peer(contender, epochs, seed, temperature, lr0, reference=reference,
                               overrides=protocol.overrides)
            else:
                row = run_contender(contender, epochs, seed, temperature,
                                    runs / f"{_slug(shown)}_{epochs}_seed{seed}", lr0=lr0, reference=reference,
                                    extra=(*extra, *protocol.overrides, *QUIET))
            rows.append({**row, "method": shown, "budget": label, "factor": protocol.factors[found.best],
                         "bracketed": found.bracketed, "tuning_seconds": tuning_seconds})
    return tuned, rows


def _cost(task: tuple[str, str], protocol: Protocol) -> float:
    return protocol.budgets[task[1]] * (2 if task[0] == BASE else 1)


def _task_file(runs: Path, name: str, label: str) -> Path:
    return runs / "tasks" / f"{_slug(name)}_{label}.json"


def run_study(protocol: Protocol, runs: Path, reference: Path, log=print) -> tuple[list[dict], list[dict], float]:
    """Every (contender, budget) task of ``protocol``, the longest first, in ``protocol.workers`` processes:
    (tuning rows, evaluation rows, wall seconds). Each finished task's rows are written to ``runs``/tasks/ at once
    (atomically), and a task whose file is there is read, not run again: a study stopped part-way resumes with the
    same ``runs`` (``--runs``)."""
    import json

    from csg.reporting import write_text

    tasks = sorted(((n, b) for n in protocol.contenders for b in protocol.budgets),
                   key=lambda t: -_cost(t, protocol))
    for name, label in tasks:   # every run's cycles and samples fit, before anything runs (a ValueError names it)
        if name in CONTENDERS:
            from studies.benchmark.contenders import fitted

            fitted(CONTENDERS[name], protocol.budgets[label])
    found: dict[tuple[str, str], tuple[list, list]] = {}
    for task in tasks:
        path = _task_file(runs, *task)
        if path.is_file():
            saved = json.loads(path.read_text())
            found[task] = (saved["tuning"], saved["rows"])
            log(f"posterior-benchmark: {task[0]} at {task[1]} read from {path}")
    todo = [t for t in tasks if t not in found]
    started = time.perf_counter()

    def keep(task, result) -> None:
        found[task] = result
        write_text(_task_file(runs, *task), json.dumps({"tuning": result[0], "rows": result[1]}))
        log(f"posterior-benchmark: {task[0]} at {task[1]} done ({time.perf_counter() - started:.0f} s)")

    (runs / "tasks").mkdir(parents=True, exist_ok=True)
    if protocol.workers <= 1:
        for task in todo:
            keep(task, run_task(*task, protocol, runs, reference))
    elif todo:
        from concurrent.futures import as_completed

        os.environ.setdefault("OMP_NUM_THREADS", "1")  # the workers inherit it: one thread each
        with ProcessPoolExecutor(protocol.workers) as pool:
            futures = {pool.submit(run_task, *task, protocol, runs, reference): task for task in todo}
            for future in as_completed(futures):
                keep(futures[future], future.result())
    tuned = [row for task in tasks for row in found[task][0]]
    rows = [row for task in tasks for row in found[task][1]]
    return tuned, rows, time.perf_counter() - started
