#!/usr/bin/env python
"""How fast the command line answers (``make bench-cli``): ``--help`` and refusals, beside ``import torch``.

Each command is a fresh process (``python -m csg ...``, what ``csg-train`` runs), interleaved over rounds (the
order alternating), medians reported, in an empty folder (a refusal writes nothing there: checked):

- ``import torch``: ``python -c "import torch"``, what any answer that needs torch costs at least;
- ``--help``: Hydra's help of csg's configs;
- ``unknown option``: ``sampler=nuts`` (a config group's option that does not exist);
- ``bad value``: ``sampler.lr0=-1`` (every job composed and its values checked, then refused);
- ``bad key``: ``sampler.lr=0.1`` (a key the config does not have).

The goal (issue 58): ``--help`` and a refusal under 2 s on these machines. A refusal found once the run's data
are built (a data root that does not exist) needs torch, and is not one of these. Writes
``<out>/cli.csv`` (every measurement) and ``<out>/cli.md``.

    python scripts/bench_cli.py [--rounds 5] [--out results/bench]
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 2.0
COMMANDS = {
    "import torch": ["-c", "import torch"],
    "--help": ["-m", "csg", "--help"],
    "unknown option": ["-m", "csg", "sampler=nuts"],
    "bad value": ["-m", "csg", "sampler.lr0=-1"],
    "bad key": ["-m", "csg", "sampler.lr=0.1"],
}
EXIT = {"import torch": 0, "--help": 0, "unknown option": 2, "bad value": 2, "bad key": 2}


def measure(what: str, folder: Path, env: dict[str, str]) -> float:
    """Seconds of one fresh process of ``what``; raises if it exits otherwise than it should or writes a file."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *COMMANDS[what]], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=120)
    seconds = time.perf_counter() - started
    if done.returncode != EXIT[what]:
        raise SystemExit(f"{what}: exit status {done.returncode}, not {EXIT[what]}: {done.stderr[-500:]}")
    if EXIT[what] == 2 and len(done.stderr.strip().splitlines()) != 1:
        raise SystemExit(f"{what}: not one line: {done.stderr[-500:]}")
    if any(folder.iterdir()):
        raise SystemExit(f"{what}: wrote {sorted(p.name for p in folder.iterdir())} into the folder it ran in")
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "WANDB_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for round_ in range(args.rounds):
            order = list(COMMANDS) if round_ % 2 == 0 else list(reversed(COMMANDS))
            for what in order:
                rows.append({"what": what, "round": round_, "seconds": measure(what, folder, env)})
    medians = {what: statistics.median(r["seconds"] for r in rows if r["what"] == what) for what in COMMANDS}
    args.out.mkdir(parents=True, exist_ok=True)
    import csv
    import io

    sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
    from bench_summary import cpu_name
    from csg.io.atomic import atomic_write_text
    from csg.reporting import markdown_table

    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=["what", "round", "seconds"])
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(args.out / "cli.csv", table.getvalue())
    lines = [
        "# How fast the command line answers (`make bench-cli`, scripts/bench_cli.py)",
        "",
        f"{time.strftime('%Y-%m-%d')}, {cpu_name()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {args.rounds} rounds of fresh processes (interleaved, order alternating), "
        f"medians; OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', 'unset')}. Goal: `--help` and a refusal under "
        f"{GOAL_S:g} s. Each refusal is one line, exit status 2, and writes nothing in the folder it runs in.",
        "",
    ]
    cells = []
    for what in COMMANDS:
        goal = "" if what == "import torch" else ("yes" if medians[what] < GOAL_S else "no")
        command = "python " + " ".join(f'"{w}"' if " " in w else w for w in COMMANDS[what])
        cells.append([f"`{command}` ({what})", f"{medians[what]:.2f}",
                      f"{medians[what] / medians['import torch']:.2f}", goal])
    lines += markdown_table(["command", "median s", "/ import torch", "goal met"], cells, align="lrrl")
    lines += ["", "A refusal found once the run's data are built (a data root that does not exist, a plan that does "
              "not fit the data) imports torch and builds the data first: it is not among these."]
    atomic_write_text(args.out / "cli.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
