#!/usr/bin/env python
"""R-hat and ESS of many variables (``make bench-convergence``): ArviZ's ``rhat`` / ``ess`` beside
:mod:`csg.evaluation.convergence` (the same formulas on every variable at once), side by side in one run.

Shapes: the NUTS reference network at the test budget (2 chains x 20 draws of 10 000 test probabilities), and a
run's chain diagnostics (4 chains x 200 draws of 2 000 examples). Each is timed ``--rounds`` times, the order
alternating, medians reported, with the largest relative difference between the two (they must agree). Writes
``<out>/convergence.csv`` (every measurement) and ``<out>/convergence.md``.

    python scripts/bench_convergence.py [--rounds 3] [--out results/bench]
"""

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_summary import cpu_name  # noqa: E402  (the machine, as the other benchmarks name it)
from csg.reporting import markdown_table  # noqa: E402

SHAPES = {"reference network (2 x 20 draws, 10 000 variables)": (2, 20, 10_000),
          "chain diagnostics (4 x 200 draws, 2 000 variables)": (4, 200, 2_000)}


def arviz_all(draws: np.ndarray) -> list[np.ndarray]:
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = az.convert_to_dataset(draws)
        return [np.asarray(az.rhat(data)["x"].values), np.asarray(az.ess(data, method="bulk")["x"].values),
                np.asarray(az.ess(data, method="tail", prob=(0.05, 0.95))["x"].values)]  # 1.x's default: ci_prob


def csg_all(draws: np.ndarray) -> list[np.ndarray]:
    from csg.evaluation.convergence import ess, rank_rhat

    return [rank_rhat(draws)] + [ess(draws, m) for m in ("bulk", "tail")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench")
    args = parser.parse_args()
    rows, table = [], []
    for name, shape in SHAPES.items():
        rng = np.random.default_rng(0)
        draws = np.cumsum(rng.standard_normal(shape), axis=1) * 0.1 + rng.standard_normal(shape)  # autocorrelated
        times: dict[str, list[float]] = {"arviz": [], "csg": []}
        results = {}
        for round_ in range(args.rounds):
            for which in (("arviz", "csg") if round_ % 2 == 0 else ("csg", "arviz")):
                start = time.perf_counter()
                results[which] = (arviz_all if which == "arviz" else csg_all)(draws)
                times[which].append(time.perf_counter() - start)
                rows.append(f"{name},{which},{round_},{times[which][-1]:.4f}")
        worst = max(float(np.nanmax(np.abs(a - c) / np.abs(a))) for a, c in zip(results["arviz"], results["csg"]))
        arviz_s, csg_s = statistics.median(times["arviz"]), statistics.median(times["csg"])
        table.append([name, f"{arviz_s:.2f}", f"{csg_s:.3f}", f"{arviz_s / csg_s:.0f}", f"{worst:.1e}"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "convergence.csv").write_text("shape,implementation,round,seconds\n" + "\n".join(rows) + "\n")
    (args.out / "convergence.md").write_text(
        f"# R-hat and ESS of many variables: ArviZ beside csg.evaluation.convergence\n\n"
        f"`make bench-convergence` (scripts/bench_convergence.py), {time.strftime('%Y-%m-%d')}, "
        f"{cpu_name()}, {os.cpu_count()} CPUs, {args.rounds} rounds each, the order alternating, medians. "
        f"Each time is the rank-normalised R-hat and the bulk and tail ESS of every variable.\n\n"
        + "\n".join(markdown_table(["draws", "ArviZ s", "csg s", "ArviZ / csg", "largest relative difference"], table,
                                   align="lrrrr")) + "\n")
    print((args.out / "convergence.md").read_text())


if __name__ == "__main__":
    main()
