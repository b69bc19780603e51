r"""The oracle bound and csg-tune's rule on the same grid (issue 73, parts 2 and 3).

cSGHMC on the posterior benchmark's task (200 epochs, the recipe's held sampling step, 12 members: 12 / cycles a
cycle), on the grid :data:`LR0` x :data:`BETA` x :data:`CYCLES`, seeds :data:`SEEDS`, at T = 1 and T = 0.2. Every
grid point logs its held-out NLL (the 3000 validation digits), its TV to NUTS on the test set's halves A and B and
its diagnostics (:mod:`studies.sampling.measure`).

- **oracle**: the point of least mean TV on half A, scored on half B: the best any tuning of these three keys could
  do at this budget, with the reference in hand;
- **rule**: :func:`csg.evaluation.tuning.pick` (what ``csg-tune`` runs) on the held-out NLL, effective members and
  sampling checks, without the reference, scored on half B;
- **recipe**: the paper's recipe as the benchmark runs it (lr0 0.4, beta 0.8, 4 cycles), scored on half B.

The rule scores on the benchmark's validation digits, not on a share of the training split (``csg-tune``'s
``data.holdout``), so that every grid point targets the very posterior NUTS sampled (N = 1000).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from studies.sampling.measure import REFERENCE, measure

__all__ = ["BETA", "CYCLES", "LR0", "SEEDS", "grid_overrides", "picks", "run_point"]

LR0 = (0.1, 0.2, 0.4, 0.8, 1.6)
BETA = (0.8, 0.5, 0.2)
CYCLES = (1, 2, 4)
SEEDS = (0, 1, 2)
FRESH_SEEDS = (3, 4, 5, 6, 7)  # the chosen points again, at seeds no choice saw
MEMBERS = 12
HELD = 0.095  # the recipe's held sampling step as a fraction of lr0
RECIPE = (0.4, 0.8, 4)


def grid_overrides(lr0: float, beta: float, cycles: int, seed: int, temperature: float) -> list[str]:
    """train.py's overrides of one grid point at one seed."""
    return ["experiment=posterior_benchmark", "sampler=csghmc", f"sampler.lr0={lr0:g}", f"sampler.explore={beta:g}",
            f"sampler.cycles={cycles}", f"sampler.samples_per_cycle={MEMBERS // cycles}",
            f"sampler.sampling_lr={HELD}", f"sampler.temperature={temperature:g}", f"seed={seed}", "ood=none",
            "logger=none", "trainer.progress=false", "trainer.checkpoint.every_n_epochs=0", "trainer.threads=1",
            f"evaluation.reference={REFERENCE / f'mnist_mlp_T{temperature:g}.npz'}"]


def run_point(job: tuple) -> dict:
    """One grid point at one seed and temperature: its row."""
    (lr0, beta, cycles), seed, temperature, runs = job
    run_dir = Path(runs) / f"T{temperature:g}" / f"lr{lr0:g}_beta{beta:g}_cycles{cycles}" / f"seed{seed}"
    row = {"temperature": temperature, "lr0": lr0, "beta": beta, "cycles": cycles, "seed": seed}
    return {**row, **measure(grid_overrides(lr0, beta, cycles, seed, temperature), run_dir, temperature)}


def jobs(runs: Path, temperatures=(1.0, 0.2)) -> list[tuple]:
    """Every grid point at every seed and temperature, as :func:`run_point`'s jobs."""
    return [(point, seed, t, str(runs)) for t in temperatures
            for point in itertools.product(LR0, BETA, CYCLES) for seed in SEEDS]


def fresh_jobs(chosen, runs: Path) -> list[tuple]:
    """The oracle's, the rule's and the recipe's points (``chosen``: :func:`picks`' rows), each once per temperature,
    at :data:`FRESH_SEEDS`: scored there, the choice's own seed noise does not favour it."""
    points = {(float(r.temperature), (float(r.lr0), float(r.beta), int(r.cycles))) for r in chosen.itertuples()}
    return [(point, seed, t, str(runs)) for t, point in sorted(points) for seed in FRESH_SEEDS]


def picks(frame) -> list[dict]:
    """Per temperature: the oracle's, the rule's and the recipe's points with their half-B TV (mean over the
    seeds), from the grid's rows (a pandas frame)."""
    from csg.evaluation.tuning import GridPoint, pick

    out = []
    for temperature, rows in frame.groupby("temperature", sort=False):
        by_point = {key: block for key, block in rows.groupby(["lr0", "beta", "cycles"])}
        mean = {key: block[["tv_a", "tv_b"]].mean() for key, block in by_point.items()
                if np.isfinite(block.validation_nll).all() and len(block) == len(SEEDS)}
        oracle = min(mean, key=lambda key: mean[key].tv_a)
        points = [GridPoint(key, tuple(block.validation_nll), tuple(block.effective_members.fillna(0)),
                            tuple(block.check.fillna("").astype(str))) for key, block in by_point.items()]
        rule = pick(points)
        chosen = rule.point.overrides
        for name, key, why in (("oracle", oracle, "least TV on half A"), ("rule", chosen, rule.reason),
                               ("recipe", RECIPE, "the paper's recipe at the benchmark's lr0")):
            block = by_point[key]
            out.append({"temperature": temperature, "who": name, "lr0": key[0], "beta": key[1], "cycles": key[2],
                        "tv_b": float(block.tv_b.mean()), "tv_b_stderr": float(block.tv_b.std(ddof=1) / len(block) ** .5),
                        "validation_nll": float(block.validation_nll.mean()),
                        "effective_members": float(block.effective_members.mean()), "why": why})
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the grid (2 processes) and write its rows and the picks as CSVs under --out."""
    import argparse
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    import pandas as pd

    from csg.paths import ROOT
    from studies.sampling.study import write_csv

    parser = argparse.ArgumentParser(description="The sampling study's oracle grid and csg-tune's rule")
    parser.add_argument("--runs", type=Path, default=Path("runs") / "sampling-study" / "grid")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "sampling")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--fresh-only", action="store_true", help="only the chosen points at the fresh seeds "
                        "(after a run that wrote the picks)")
    args = parser.parse_args(argv)
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=get_context("spawn")) as pool:
        if not args.fresh_only:
            rows = list(pool.map(run_point, jobs(args.runs.resolve())))
            args.out.mkdir(parents=True, exist_ok=True)
            write_csv(args.out / "sampling_oracle_grid.csv", rows)
            write_csv(args.out / "sampling_oracle_picks.csv", picks(pd.DataFrame(rows)))
        chosen = pd.read_csv(args.out / "sampling_oracle_picks.csv")
        fresh = list(pool.map(run_point, fresh_jobs(chosen, args.runs.resolve())))
    write_csv(args.out / "sampling_oracle_fresh.csv", fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
