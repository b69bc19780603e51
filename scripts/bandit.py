#!/usr/bin/env python
"""The ICSGLD paper's Mushroom bandit: every agent of configs/bandit/mushroom.yaml, cumulative regret.

    python scripts/bandit.py [--scale smoke] [--out results/icsgld] [--agents pSGLD,pICSGLD] [--report-only] [KEY=VALUE ...]

Writes <out>/bandit.csv (the curves), bandit_final.csv, bandit.md (final regret, mean +- s.e. over seeds, the
contour agents' traces summarised, every setting beside the paper's and the authors' code's), bandit.png/.pdf
(the curves), bandit_trace.csv, bandit_theta.csv and bandit_trace.png/.pdf (the contour agents' energy,
multiplier and theta along the run). KEY=VALUE pairs override the YAML (e.g. steps=500 data.source=keel).
"""

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from csg.cli import run_or_exit  # noqa: E402


def main() -> None:
    from omegaconf import OmegaConf

    from csg.bandit.report import load_results, report, run_all

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--scale", choices=("full", "smoke"), default="full")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "icsgld")
    parser.add_argument("--agents", help="comma-separated subset of the agents")
    parser.add_argument("--report-only", action="store_true", help="rewrite the tables and figures from <out>'s CSVs")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = OmegaConf.merge(OmegaConf.load(ROOT / "configs" / "bandit" / "mushroom.yaml"),
                          OmegaConf.from_dotlist(args.overrides))
    if args.report_only:
        results = load_results(args.out, cfg)
        args.scale = str(results.curves.scale.iloc[0])
    else:
        results = run_all(cfg, args.scale, args.agents.split(",") if args.agents else None)
    path = report(results, cfg, args.out, args.scale)
    print(f"icsgld-bandit: wrote {path}")


if __name__ == "__main__":
    run_or_exit(main)
