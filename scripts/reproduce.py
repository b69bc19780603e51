#!/usr/bin/env python
"""Regenerate a paper table or figure: its Hydra multiruns through train.py, then the aggregated table.

    python scripts/reproduce.py table1 [--scale smoke] [--launcher slurm] [--seeds 0,1,2] [OVERRIDE ...]
    python scripts/reproduce.py table1 --report-only [--runs multirun/table1/<date>]
    python scripts/reproduce.py fig1

Targets: table1, table2, table3 (cSG-MCMC Tables 1-3), fig1 (the two step-size schedules), fig3 (MDS,
interpolation, cycles sweep), icsgld_table1 (the ICSGLD paper's Table 1; its interacting chains run under
torchrun). Extra OVERRIDEs go to every run (e.g. data.root=/data/cifar).
Results: results/csgmcmc/ or results/icsgld/ (full), .../smoke/ (smoke); runs: multirun/<preset>/<date>/.
"""

import argparse
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from csg.experiments import fig1, fig3, tables  # noqa: E402

TARGETS = (*tables.TABLES, "fig1", "fig3")


def preset_epochs(preset: str, overrides: list[str]) -> int:
    """trainer.epochs of the composed preset (with the user's overrides), for sweeps of half the budget."""
    from hydra import compose, initialize_config_dir

    import csg  # noqa: F401  (registers the config resolvers)

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={preset}", *overrides])
    return int(cfg.trainer.epochs)


def _run(command: list[str], what: str, runs: Path) -> None:
    print("+ " + " ".join(command[1:]), flush=True)
    if subprocess.run(command, cwd=ROOT).returncode != 0:
        sys.exit(f"error: {what} failed (its error is above); the runs that finished stay in {runs}, and "
                 f"--report-only --runs {runs} aggregates them")


def run_sweeps(preset: str, sweeps: list[list[str]], runs: Path, launcher: str, overrides: list[str],
               processes: dict[int, int] | None = None) -> None:
    """Each sweep as one Hydra multirun; a sweep of interacting chains (``processes``: sweep -> P) runs each
    of its points under ``torchrun --nproc_per_node=P`` locally, or as SLURM jobs of P tasks."""
    processes = processes or {}
    for index, sweep in enumerate(sweeps):
        if not sweep:
            continue
        tasks = processes.get(index, 1)
        if tasks > 1 and launcher == "local":
            for number, point in enumerate(tables.expected_runs([sweep])):
                pairs = [f"{key}={value}" for key, value in point.items()]
                name = "_".join(value for key, value in point.items() if key in ("sampler", "model", "seed"))
                command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={tasks}",
                           str(ROOT / "train.py"), f"experiment={preset}", *pairs, *overrides,
                           f"hydra.run.dir={runs / f'sweep{index}' / f'{number}_{name}'}"]
                _run(command, f"the run `{' '.join(pairs)}`", runs)
            continue
        command = [sys.executable, str(ROOT / "train.py"), "-m", f"experiment={preset}", *sweep, *overrides,
                   f"hydra.sweep.dir={runs / f'sweep{index}'}"]
        if launcher == "slurm":
            command.append("hydra/launcher=slurm")
            if tasks > 1:
                command += [f"hydra.launcher.tasks_per_node={tasks}", f"hydra.launcher.gpus_per_node={tasks}"]
        _run(command, f"the multirun `{' '.join(sweep)}`", runs)


def newest_runs(preset: str) -> Path:
    candidates = sorted((Path("multirun") / preset).glob("*"))
    if not candidates:
        sys.exit(f"error: no runs under multirun/{preset}/: run `make {preset.removesuffix('_smoke')}` first")
    return candidates[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", choices=TARGETS)
    parser.add_argument("overrides", nargs="*", help="train.py overrides applied to every run")
    parser.add_argument("--scale", choices=tables.SCALES, default="full")
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local")
    parser.add_argument("--seeds", help="comma-separated seeds (default: the table's)")
    parser.add_argument("--preset", help="another experiment preset for the same sweeps (e.g. table1_official_code)")
    parser.add_argument("--report-only", action="store_true", help="aggregate existing runs; run nothing")
    parser.add_argument("--runs", type=Path, help="the runs to aggregate (default: a new, or the newest, folder)")
    parser.add_argument("--out", type=Path, help="default results/csgmcmc[/smoke]")
    args = parser.parse_intermixed_args()
    for name in ("runs", "out"):  # the user's paths, from where they typed them; ours, from the repository
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).resolve())
    os.chdir(ROOT)
    paper_dir = "icsgld" if args.target.startswith("icsgld") else "csgmcmc"
    out = args.out or Path("results") / paper_dir / ("smoke" if args.scale == "smoke" else "")

    if args.target == "fig1":  # no runs: the schedules themselves, the same at every scale
        out = args.out or Path("results") / "csgmcmc"
        fig1.render(out)
        print(f"fig1: wrote {out / 'fig1.png'}")
        return
    spec = fig3.SPEC if args.target == "fig3" else tables.TABLES[args.target]
    preset = args.preset or spec.presets[args.scale]
    epochs = preset_epochs(preset, args.overrides)
    if args.report_only:
        runs = args.runs or newest_runs(preset)
    else:
        runs = args.runs or Path("multirun") / preset / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        run_sweeps(preset, tables.expand(spec, args.scale, epochs, args.seeds), runs, args.launcher, args.overrides,
                   spec.processes)
    if args.target == "fig3":
        missing = fig3.report(runs, out, args.scale, epochs=epochs, seeds=args.seeds)
    else:
        _, missing = tables.report(args.target, runs, out, args.scale, epochs=epochs, seeds=args.seeds, preset=preset)
    print(f"{args.target}: wrote {out / (args.target + '.md')} from {runs}")
    for run in missing:
        print("missing run: " + " ".join(f"{k}={v}" for k, v in run.items()))


if __name__ == "__main__":
    main()
