#!/usr/bin/env python
"""Speed of the synthetic studies: wall time of Table 4 and of the 1-D tempering study at full size,
and chain-steps per second of vectorised SGLD on the 25-Gaussian target as the number of chains grows.

    python scripts/bench_synthetic.py            (make bench-synthetic)

Prints the figures and writes results/bench/synthetic.csv and .md (atomically).
"""

import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from csg.io.atomic import atomic_write_text  # noqa: E402
from csg.reporting import markdown_table  # noqa: E402
from csg.schedules import Decreasing  # noqa: E402
from studies.synthetic import run_study  # noqa: E402
from studies.synthetic.chains import ChainGroup, run_chains  # noqa: E402
from studies.targets import create_target  # noqa: E402


def study_seconds(name: str) -> float:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=[f"synthetic={name}"])
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        run_study(cfg, run_dir=tmp)
        return time.perf_counter() - started


def chain_steps_per_second(chains: int, steps: int = 500, trials: int = 3) -> float:
    """Best of ``trials`` timed runs, after one untimed warm-up run."""
    target = create_target("mog25", grad_noise=1.0)
    group = ChainGroup("sgld", Decreasing(0.043, 1, 0.55), chains=chains)
    best = float("inf")
    for trial in range(trials + 1):
        started = time.perf_counter()
        run_chains(target, [group], steps=steps, repeats=1, generator=torch.Generator().manual_seed(0))
        if trial:
            best = min(best, time.perf_counter() - started)
    return chains * steps / best


def main() -> None:
    machine = f"{platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
    rows = []
    for chains in (1, 10, 100, 1000, 10000):
        rate = chain_steps_per_second(chains)
        rows.append({"measure": f"SGLD chain-steps per second, {chains} chains (25-Gaussian target)", "value": rate})
        print(f"{chains:>6} chains: {rate:,.0f} chain-steps/s")
    for name, goal in (("table4", 60.0), ("wang_mixture1d", 60.0)):
        seconds = study_seconds(name)
        rows.append({"measure": f"wall time of synthetic={name} at full size, s (goal < {goal:g})", "value": seconds})
        print(f"{name}: {seconds:.1f} s (goal < {goal:g} s)")
    table = pd.DataFrame(rows)
    out = ROOT / "results" / "bench"
    atomic_write_text(out / "synthetic.csv", table.to_csv(index=False))
    lines = ["# Synthetic studies: speed", "", f"Machine: {machine}. Command: `make bench-synthetic`.", "",
             *markdown_table(["measure", "value"], [[r.measure, f"{r.value:,.1f}"] for r in table.itertuples()],
                             align="lr")]
    atomic_write_text(out / "synthetic.md", "\n".join(lines) + "\n")
    print(f"wrote {out / 'synthetic.csv'}")


if __name__ == "__main__":
    main()
