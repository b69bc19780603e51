"""Regenerate a paper table or figure: its runs, then its tables and figures under results/.

    csg-reproduce table1 [--scale smoke] [--launcher slurm] [--seeds 0,1,2] [KEY=VALUE ...]
    csg-reproduce table1 --report-only [--runs multirun/table1/<date>]
    csg-reproduce table1 --scale smoke --add "sampler=csgld sampler.name=my_csgld sampler.temperature=0.5"
    csg-reproduce accuracy --scale smoke targets=heart_logreg

`csg-reproduce` works in the folder it is started from (its data/, multirun/ and results/); in a clone,
`python scripts/reproduce.py` (what every `make <target>` calls: `make -n <target>` shows the call) works in
the repository, whose results/ holds the committed tables. The targets and what they run are in
studies/experiments/registry.py. KEY=VALUE overrides go to every train.py run of the target
(e.g. data.root=/data/cifar), to the bandit's YAML (icsgld-bandit; agents=pSGLD,pICSGLD runs a
subset), or to the NUTS jobs (reference: targets, warmup, samples; accuracy: targets).
Results: results/<paper>/ (full) or results/<paper>/smoke/ (smoke); runs: multirun/<preset>/<date>/.
--report-only refuses, in one line and before writing anything, a --runs folder that does not exist or
holds no finished run (metrics.json) of the target, and a run whose config or metrics.json is damaged.
The committed tables (results/...) are written only from runs of the table's protocol: its preset and budget
(every key of a run's saved config but logging, device and data loading), its methods and its seeds; runs
still missing are listed, not refused. Another --preset, other --seeds, KEY=VALUE overrides of the budget, or
a --runs folder of other runs need --out DIR (the table's header then says how they differ); without it the
driver stops in one line naming the difference, before anything runs or is written.
--seeds are the seeds themselves (--seeds 7: seed 7), for every target that takes them.
--add "OVERRIDES" (table1, table3; repeatable) runs one more method beside the paper's: the table's sweep with
its sampler= choice replaced by OVERRIDES (space-separated train.py overrides, e.g. sampler=custom
sampler.optimizer._target_=my_pkg.MySGLD sampler.name=my_sgld), under the same preset, data, seeds, budget and
KEY=VALUE overrides, into the same runs folder; the table shows it as one more row named by its sampler.name.
Every run of an added method is checked as train.py checks it before anything runs. The folder the driver is
started from goes first on the runs' PYTHONPATH, so `_target_`s of the user's own modules import.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime
from pathlib import Path

__all__ = ["main"]


def main(workdir: Path | None = None, argv: list[str] | None = None) -> None:
    """The driver: ``argv`` (default ``sys.argv[1:]``) parsed, the target run in ``workdir`` (default: the current
    folder), its lines printed. Errors are raised (:func:`csg.launch.cli.run_or_exit` puts them in one line)."""
    from studies.experiments.job import Job
    from studies.experiments.registry import TARGETS, default_out

    parser = argparse.ArgumentParser(
        prog="csg-reproduce" if workdir is None else None, description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="targets:\n" + "\n".join(f"  {name:<16}{target.what}" for name, target in TARGETS.items()))
    parser.add_argument("target", type=lambda name: name.replace("_", "-"), choices=list(TARGETS), metavar="target")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides (see above)")
    parser.add_argument("--scale", choices=("full", "smoke"), default="full")
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local")
    parser.add_argument("--seeds", help="comma-separated seeds, each once (default: the target's)")
    parser.add_argument("--preset", help="another experiment preset for the same sweeps (e.g. table1_official_code)")
    parser.add_argument("--report-only", action="store_true",
                        help="aggregate existing runs; run nothing (a --runs folder without finished runs of the "
                             "target is a one-line error, and nothing is written)")
    parser.add_argument("--runs", type=Path, help="the runs: a new folder by default, or the newest "
                        "multirun/<preset>/<date> with --report-only")
    parser.add_argument("--out", type=Path, help="default results/<paper>[/smoke], which takes only runs of the "
                        "table's protocol (preset, budget, methods, seeds)")
    parser.add_argument("--add", action="append", default=[], metavar="OVERRIDES",
                        help="one more method, as space-separated train.py overrides (repeatable; table1, table3)")
    parser.add_argument("--tune-factors", help="a tuning stage's grid: comma-separated factors x each method's recipe "
                        "step (posterior-benchmark-cifar10; default the table's)")
    parser.add_argument("--tune-seeds", help="a tuning stage's seeds, each once, none of the table's "
                        "(posterior-benchmark-cifar10; default the table's)")
    args = parser.parse_intermixed_args(argv)
    target = TARGETS[args.target]
    # the user's paths, from where they typed them; the target's own, from the working folder
    runs, out = (path.resolve() if path is not None else None for path in (args.runs, args.out))
    # the user's own modules (a `_target_` of theirs) import in the runs, which start in the working folder
    here, path = os.getcwd(), os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = here + (os.pathsep + path if path else "")
    sys.path.append(here)  # and in the driver's own checks of the runs
    if workdir is not None:
        os.chdir(workdir)
    job = Job(target=target.name, out=out or default_out(target, args.scale), out_given=out is not None,
              scale=args.scale, launcher=args.launcher, seeds=args.seeds, report_only=args.report_only, runs=runs,
              preset=args.preset, overrides=tuple(args.overrides), add=tuple(args.add),
              tune_factors=args.tune_factors, tune_seeds=args.tune_seeds,
              stamp=datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
    target.check(job)
    try:
        lines = target.make(job)
    except FileNotFoundError as error:
        if not job.report_only:
            raise
        from csg.errors import ConfigError  # a report of nothing: say what is missing, not "run it again"

        raise ConfigError("--report-only", error.filename or str(error), f"the files a finished {target.name} wrote "
                          "(this one is missing): run the target without --report-only first, or pass the --out "
                          "(--runs) folder of one that finished") from None
    for line in lines:
        print(line, flush=True)
