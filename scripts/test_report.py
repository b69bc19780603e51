#!/usr/bin/env python
"""Run the test suite as `make test` runs it and record what it gave: results/tests.md.

    python scripts/test_report.py [--out results/tests.md] [--pythons-apart] -- <pytest arguments>

The counts (passed, failed, skipped, errors) come from pytest's JUnit XML; the wall time is each pytest
command's, measured here; the machine is what this process sees (CPU count, Python, torch). With
``--pythons-apart`` (what `make test` does), the suite runs without tests/pythons, then the other-Python checks
(tests/pythons) run on their own, and each phase's time is recorded against its budget (the suite 12 minutes on 2
cores, the other Pythons 3 more). Exits with the first failing phase's status (0 if both pass), after writing the
file.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from csg.io.atomic import atomic_write_text  # noqa: E402
from csg.reporting import markdown_table  # noqa: E402


def counts(junit: Path) -> dict[str, int]:
    """tests, failures, errors and skipped summed over the JUnit XML's test suites."""
    root = ElementTree.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {key: sum(int(suite.get(key, 0)) for suite in suites) for key in ("tests", "failures", "errors", "skipped")}
    total["passed"] = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return total


def _commit() -> str:
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return (found.stdout.strip() or "unknown") + (" with uncommitted changes" if dirty else "")


PYTHONS = "tests/pythons"
BUDGETS = {"the suite": 12.0, "the other-Python checks": 3.0}  # minutes on 2 cores


def markdown(phases: list[tuple[str, dict[str, int], float, list[str], int]]) -> str:
    """The file: one row per phase (its name, counts, seconds, command, exit status)."""
    import torch

    rows = [[name, total["passed"], total["failures"], total["errors"], total["skipped"], f"{seconds / 60:.1f} min",
             f"{BUDGETS.get(name, float('nan')):g} min", f"`{' '.join(command)}`", status]
            for name, total, seconds, command, status in phases]
    return "\n".join([
        "# The test suite",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC at commit {_commit()} by `make test-report` "
        f"(the commands of `make test`), on {os.cpu_count()} CPUs, Python {platform.python_version()}, torch "
        f"{torch.__version__}.",
        "",
        *markdown_table(["phase", "passed", "failed", "errors", "skipped", "wall time", "budget", "command",
                         "exit status"], rows, align="lrrrrrrlr"),
        "",
        "Skipped tests say why in pytest's summary (GPU tests without CUDA; SLURM tests without slurm-wlm and "
        "munge). The time does not include `make install`.",
        "",
    ])


def run_phase(name: str, pytest_args: list[str]) -> tuple[str, dict[str, int], float, list[str], int] | None:
    """One pytest command, timed: (name, counts, seconds, the command as shown, status); None without a report."""
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "junit.xml"
        started = time.perf_counter()
        status = subprocess.call([sys.executable, "-m", "pytest", *pytest_args, f"--junitxml={junit}"], cwd=ROOT)
        seconds = time.perf_counter() - started
        if not junit.is_file():
            print(f"error: pytest wrote no report for {name} (exit status {status})", file=sys.stderr)
            return None
        return name, counts(junit), seconds, ["python", "-m", "pytest", *pytest_args], status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "tests.md")
    parser.add_argument("--pythons-apart", action="store_true", help=f"the suite without {PYTHONS}, then {PYTHONS}")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: pytest's arguments")
    args = parser.parse_args()
    pytest_args = [a for a in args.pytest_args if a != "--"]
    plan = [("the suite", pytest_args)]
    if args.pythons_apart:
        plan = [("the suite", [*pytest_args, f"--ignore={PYTHONS}"]),
                ("the other-Python checks", ["-n", "2", "--dist", "loadfile", PYTHONS])]
    phases = []
    for name, phase_args in plan:
        done = run_phase(name, phase_args)
        if done is None:
            print(f"{args.out} is unchanged", file=sys.stderr)
            return 1
        phases.append(done)
    atomic_write_text(args.out, markdown(phases))
    for name, total, seconds, _, _ in phases:
        print(f"{name}: {total['passed']} passed, {total['failures']} failed, {total['errors']} errors, "
              f"{total['skipped']} skipped in {seconds / 60:.1f} min")
    print(f"wrote {args.out}")
    return next((status for *_, status in phases if status), 0)


if __name__ == "__main__":
    sys.exit(main())
