r"""Fidelity against cost, and the decomposition of chains, noise and optimiser (issue 73, part 2).

Cost is counted in full-data gradient equivalents (epochs over all chains: N = 1000 example gradients each, what one
of NUTS's leapfrog steps costs on this task). Every csg method runs through :func:`csg.train` with the posterior
benchmark's contenders' overrides (:mod:`studies.benchmark.contenders`: a method of K chains pays for all K), at
the step the benchmark tuned on the held-out digits at that budget (results/benchmark/posterior_benchmark_tuning.csv;
3200 epochs, beyond the benchmark, takes its 800-epoch step, untuned), at :data:`BUDGETS`, seeds :data:`SEEDS`:

- the paper's recipe (cSGHMC), csg-tune's pick (the rule's lr0, beta and cycles at 200 epochs,
  :mod:`studies.sampling.oracle`, kept at every budget), constant-step SGHMC, cSGHMC x4, deep ensemble x5;
- **decomposition**, at 800 epochs, seeds :data:`DECOMPOSITION_SEEDS`: cSGHMC and its noise-off control
  (Snapshot-SGDM), cSGHMC x4 and its noise-off control, the deep ensemble x5 at momentum 0.9 and at cSGHMC's 0.1
  (with cSGHMC x4's step 1.6: the same update, untuned for this arm), so that chains (x4 against x1), noise (T
  against 0) and optimiser (momentum 0.9 against 0.1; one decay against four cycles) are told apart;
- **NUTS at fewer draws**: k consecutive draws of one NUTS chain after its warm-up (cost: that chain's warm-up and
  k draws' leapfrog steps), scored against the predictive of the other three chains (so that the draws are not
  part of their own reference), averaged over the four choices of chain.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from studies.sampling.measure import REFERENCE, measure

__all__ = ["BUDGETS", "DECOMPOSITION", "METHODS", "SEEDS", "cost_jobs", "nuts_points", "run_method"]

BUDGETS = (40, 200, 800, 3200)
SEEDS = (0, 1, 2)
DECOMPOSITION_SEEDS = (0, 1, 2, 3, 4)
TUNED = {  # (method, budget epochs) -> lr0 from the benchmark's held-out tuning (3200: the 800 pick)
    "cSGHMC": {40: 0.8, 200: 0.4, 800: 0.05, 3200: 0.05}, "Snapshot-SGDM": {800: 0.05},
    "SGHMC": {40: 0.8, 200: 0.1, 800: 0.0125, 3200: 0.0125}, "cSGHMC x4": {40: 1.6, 200: 1.6, 800: 1.6, 3200: 1.6},
    "deep ensemble x5": {40: 0.4, 200: 0.4, 800: 0.4, 3200: 0.4}}
METHODS = ("cSGHMC", "csg-tune's pick", "SGHMC", "cSGHMC x4", "deep ensemble x5")
DECOMPOSITION = ("cSGHMC", "Snapshot-SGDM", "cSGHMC x4", "cSGHMC x4 noise off", "deep ensemble x5",
                 "deep ensemble x5, momentum 0.1")
NUTS_DRAWS = (3, 12, 50, 200, 1000)


def method_overrides(method: str, budget: int, seed: int, temperature: float, pick: tuple | None) -> list[str]:
    """train.py's overrides of ``method`` at ``budget`` epochs over all chains (``pick``: the rule's (lr0, beta,
    cycles) at this temperature)."""
    from studies.benchmark.contenders import overrides

    common = ("ood=none", "trainer.checkpoint.every_n_epochs=0", "trainer.threads=1",
              f"evaluation.reference={REFERENCE / f'mnist_mlp_T{temperature:g}.npz'}")
    if method == "csg-tune's pick":
        from studies.benchmark.contenders import Contender, fitted
        from studies.sampling.oracle import HELD, MEMBERS

        lr0, beta, cycles = pick  # where a budget is short: fewer cycles or samples, as the benchmark fits them
        _, cycles, samples = fitted(Contender("pick", (), cycles=cycles, samples=MEMBERS // cycles, explore=beta),
                                    budget)
        return ["experiment=posterior_benchmark", "sampler=csghmc", f"seed={seed}", f"trainer.epochs={budget}",
                f"sampler.lr0={lr0:g}", f"sampler.explore={beta:g}", f"sampler.cycles={cycles}",
                f"sampler.samples_per_cycle={samples}", f"sampler.sampling_lr={HELD}",
                f"sampler.temperature={temperature:g}", "logger=none", "trainer.progress=false", *common]
    if method == "cSGHMC x4 noise off":
        return overrides("cSGHMC x4", budget, seed, 0.0, lr0=TUNED["cSGHMC x4"][budget], extra=common)
    if method == "deep ensemble x5, momentum 0.1":
        words = overrides("deep ensemble x5", budget, seed, temperature, lr0=TUNED["cSGHMC x4"][budget], extra=common)
        return [w if w != "sampler.momentum=0.9" else "sampler.momentum=0.1" for w in words]
    return overrides(method, budget, seed, temperature, lr0=TUNED[method][budget], extra=common)


def run_method(job: tuple) -> dict:
    """One method at one budget, seed and temperature: its row."""
    method, budget, seed, temperature, pick, runs = job
    folder = "".join(c if c.isalnum() or c in "._-" else "_" for c in method)
    run_dir = Path(runs) / f"T{temperature:g}" / f"{folder}_{budget}" / f"seed{seed}"
    row = {"temperature": temperature, "method": method, "budget_epochs": budget, "seed": seed}
    return {**row, **measure(method_overrides(method, budget, seed, temperature, pick), run_dir, temperature)}


def cost_jobs(picks: dict, runs: Path, temperatures=(1.0, 0.2)) -> list[tuple]:
    """The cost curve's runs and the decomposition's, each once (``picks``: temperature -> the rule's point)."""
    wanted = {(m, b, s, t) for t in temperatures for m in METHODS for b in BUDGETS for s in SEEDS}
    wanted |= {(m, 800, s, t) for t in temperatures for m in DECOMPOSITION for s in DECOMPOSITION_SEEDS}
    ordered = sorted(wanted, key=lambda j: (-j[1], j[3], j[0], j[2]))  # the longest first: the pool ends evenly
    return [(m, b, s, t, picks.get(t), str(runs)) for m, b, s, t in ordered]


def nuts_points(temperature: float, draws_dir: Path) -> list[dict]:
    """NUTS at k draws of one chain (:data:`NUTS_DRAWS`), against the other chains' predictive: TV, the members' MI
    and their TV to their average, and the cost in full-data gradients; mean over the four chains."""
    import torch

    from csg.evaluation.spread import member_spread
    from studies.benchmark.reference import predictive
    from studies.benchmark.task import load_task
    from studies.sampling.study import nuts_draws

    draws = nuts_draws(temperature, draws_dir)
    record = json.loads((REFERENCE / "reference_network.json").read_text())[f"{temperature:g}"]
    task, _ = load_task(temperature)
    chains = [predictive(draws[c], task.test_x, task.layers) for c in range(draws.shape[0])]
    rows = []
    for k in NUTS_DRAWS:
        per_chain = []
        for c, probs in enumerate(chains):
            others = np.mean([chains[o].mean(axis=0) for o in range(len(chains)) if o != c], axis=0)
            picked = probs[:k]
            spread = member_spread(torch.from_numpy(picked))
            info = record["chains"][c]
            per_chain.append((0.5 * np.abs(picked.mean(axis=0) - others).sum(axis=1).mean(), spread.mutual_information,
                              spread.tv_to_average, info["gradient_evaluations_warmup"] + k * info["mean_steps"]))
        tv, mi, tva, cost = np.mean(per_chain, axis=0)
        rows.append({"temperature": temperature, "method": "NUTS (one chain)", "members": k, "tv": tv,
                     "mutual_information": mi, "tv_to_average": tva, "epochs": cost})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the cost curve and the decomposition (after the oracle grid: csg-tune's pick) and write their CSVs."""
    import argparse
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    import pandas as pd

    from csg.paths import ROOT
    from studies.sampling.study import DRAWS, reference_spread, write_csv

    parser = argparse.ArgumentParser(description="The sampling study's cost curve and decomposition")
    parser.add_argument("--runs", type=Path, default=Path("runs") / "sampling-study" / "cost")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "sampling")
    parser.add_argument("--draws", type=Path, default=DRAWS)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    chosen = pd.read_csv(args.out / "sampling_oracle_picks.csv")
    picks = {float(r.temperature): (float(r.lr0), float(r.beta), int(r.cycles))
             for r in chosen.itertuples() if r.who == "rule"}
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=get_context("spawn")) as pool:
        rows = list(pool.map(run_method, cost_jobs(picks, args.runs.resolve())))
    sizes = tuple(sorted({int(r["members"]) for r in rows if r.get("members")} | {k for k in NUTS_DRAWS if k <= 400}))
    nuts = [row for t in (1.0, 0.2) for row in nuts_points(t, args.draws)]
    references = [reference_spread(t, draws_dir=args.draws, sizes=sizes) for t in (1.0, 0.2)]
    write_csv(args.out / "sampling_cost_runs.csv", rows)
    write_csv(args.out / "sampling_cost_nuts.csv", nuts)
    write_csv(args.out / "sampling_cost_reference.csv", references)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
