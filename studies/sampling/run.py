"""``make sampling-study``: every part of the sampling study in order, then its report.

    python -m studies.sampling.run [--parts dose,oracle,cost] [--report-only] [--workers 2] [--out DIR]

- dose: SGHMC and SGLD from NUTS draws and the sampling stage's dose (:mod:`studies.sampling.study`);
- oracle: the grid, the oracle's and csg-tune's rule's picks, and the chosen points at fresh seeds
  (:mod:`studies.sampling.oracle`);
- cost: the cost curve and the decomposition, with csg-tune's pick from the oracle's part
  (:mod:`studies.sampling.cost`).

Every run is cached in its folder under --runs; --report-only rewrites the report from the CSVs in --out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from csg.paths import ROOT

__all__ = ["PARTS", "main"]

PARTS = ("dose", "oracle", "cost")


def main(argv: list[str] | None = None) -> int:
    """Run the parts asked for (all by default), then write the report."""
    from studies.sampling import cost, oracle, study
    from studies.sampling.report import write_report

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"of {', '.join(PARTS)} (cost after oracle)")
    parser.add_argument("--runs", type=Path, default=Path("runs") / "sampling-study")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "sampling")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--draws", type=Path, default=study.DRAWS, help="the NUTS draws (make reference-network)")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from the committed CSVs")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    if set(parts) - set(PARTS):
        parser.error(f"--parts: some of {', '.join(PARTS)}, comma-separated (not {args.parts})")
    common = ["--out", str(args.out), "--workers", str(args.workers)]
    if not args.report_only:
        if "dose" in parts:
            study.run_dose((0, 1, 2, 3, 4), (1.0, 0.2), args.runs, args.out, args.workers, args.draws)
        if "oracle" in parts:
            oracle.main(["--runs", str(args.runs / "grid"), *common])
        if "cost" in parts:
            cost.main(["--runs", str(args.runs / "cost"), "--draws", str(args.draws), *common])
    write_report(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
