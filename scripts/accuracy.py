"""Sampling accuracy against NUTS reference posteriors: `make reference`, then `make accuracy`.

    python scripts/accuracy.py reference [--targets heart_logreg,...]   # NUTS (needs the reference extra)
    python scripts/accuracy.py accuracy [--scale smoke] [--seeds 0,1,2]  # the samplers against them
    python scripts/accuracy.py accuracy --report-only                    # rewrite the tables from accuracy_runs.csv
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _names(text: str | None, allowed: list[str], key: str) -> tuple[str, ...]:
    from csg.errors import ConfigError

    names = tuple(allowed if text is None else text.split(","))
    for name in names:
        if name not in allowed:
            raise ConfigError(key, name, f"one of {', '.join(allowed)}")
    return names


def main() -> None:
    from csg.accuracy.reference import TARGETS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", choices=("reference", "accuracy"))
    parser.add_argument("--targets", help=f"comma-separated subset of {', '.join(TARGETS)}")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "csgmcmc")
    parser.add_argument("--warmup", type=int, default=1000, help="reference: NUTS warm-up iterations per chain")
    parser.add_argument("--samples", type=int, default=5000, help="reference: NUTS draws per chain")
    parser.add_argument("--scale", choices=("full", "smoke"), default="full", help="accuracy: smoke = 600 iterations")
    parser.add_argument("--seeds", default="0,1,2", help="accuracy: comma-separated seeds")
    parser.add_argument("--report-only", action="store_true", help="accuracy: rewrite the report from the runs CSV")
    args = parser.parse_args()
    args.out = args.out.resolve()
    os.chdir(ROOT)
    targets = _names(args.targets, list(TARGETS), "--targets")
    if args.job == "reference":
        reference(targets, args)
    else:
        accuracy(targets, args)


def reference(targets: tuple[str, ...], args) -> None:
    from csg.accuracy.reference import TARGETS, NutsSettings, build_reference

    settings = NutsSettings(warmup=args.warmup, samples=args.samples)
    for name in targets:
        print(f"{name}: NUTS, {settings.chains} chains x ({settings.warmup} + {settings.samples}) ...", flush=True)
        result = build_reference(TARGETS[name], settings)
        path = args.out / "reference" / f"{name}.json"
        result.save(path)
        print(f"{name}: R-hat {result.rhat_max:.4f}, ESS bulk {result.ess_bulk_min:.0f} / tail "
              f"{result.ess_tail_min:.0f}, {result.divergences} divergences, {result.seconds:.0f} s -> {path}")


def accuracy(targets: tuple[str, ...], args) -> None:
    import pandas as pd

    from csg.accuracy import report, study

    out = args.out / "smoke" if args.scale == "smoke" and args.out == ROOT / "results" / "csgmcmc" else args.out
    references = args.out / "reference"
    missing = [name for name in targets if not (references / f"{name}.json").exists()]
    if missing:
        sys.exit(f"error: no reference for {', '.join(missing)} in {references}: run `make reference` first")
    runs_csv = out / "accuracy_runs.csv"
    if args.report_only:
        if not runs_csv.exists():
            sys.exit(f"error: --report-only needs {runs_csv}: run `make accuracy` first")
        runs = pd.read_csv(runs_csv)
        result = study.Study(runs, study.summarise(runs), float("nan"))
    else:
        seeds = tuple(int(s) for s in args.seeds.split(","))
        overrides = study.SMOKE if args.scale == "smoke" else ()
        factors = (0.5, 1.0) if args.scale == "smoke" else None
        result = study.run_study(references, targets, seeds, **({"factors": factors} if factors else {}),
                                 overrides=overrides, log=lambda line: print(line, flush=True))
    report.write(result, out, references, args.scale)
    print(f"accuracy: wrote {out / 'accuracy.md'}")


if __name__ == "__main__":
    from csg.cli import run_or_exit

    run_or_exit(main)
