#!/usr/bin/env python
"""Evaluate the samples of a finished train.py run again, without training.

    python scripts/evaluate_run.py runs/2026-11-22/10-00-00_csghmc_mnist5k_seed0 evaluation.cycle_weights=harmonic

Overrides are dotted key=value pairs applied to the run's saved config. Writes
evaluation_<cycle_weights>.json into the run directory and prints the table.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from csg.cli import run_or_exit  # noqa: E402
from csg.evaluation.store import evaluate_run, format_metrics  # noqa: E402


def main(argv: list[str]) -> None:
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__)
        raise SystemExit(0 if argv else 2)
    metrics = run_or_exit(lambda: evaluate_run(argv[0], argv[1:]))
    print(format_metrics(metrics))


if __name__ == "__main__":
    main(sys.argv[1:])
