#!/usr/bin/env python
"""Aggregate finished runs into a paper table (CSV + Markdown), listing missing runs.

    python scripts/report.py table5 multirun/table5/<date> --out results/csgmcmc

RUNS may be any directory above the run directories; without it, the newest multirun/<table>/* is used.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from csg.experiments import fig4, table5  # noqa: E402

TABLES = {"table5": table5.report, "fig4": fig4.report}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("runs", nargs="?", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "csgmcmc")
    args = parser.parse_args()
    runs = args.runs
    if runs is None:
        candidates = sorted((ROOT / "multirun" / args.table).glob("*"))  # fig4 SCALE=smoke: pass the folder
        if not candidates:
            parser.error(f"no runs under multirun/{args.table}/: run `make {args.table}` first")
        runs = candidates[-1]
    table = TABLES[args.table](runs, args.out)
    print(f"{args.table}: {len(table)} rows from {runs} -> {args.out}")


if __name__ == "__main__":
    main()
