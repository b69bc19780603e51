#!/usr/bin/env python
"""Run the test suite as `make test` runs it and record what it gave: results/tests.md.

    python scripts/test_report.py [--out results/tests.md] -- <pytest arguments>

The counts (passed, failed, skipped, errors) come from pytest's JUnit XML; the wall time is the whole pytest
command's, measured here; the machine is what this process sees (CPU count, Python, torch). Exits with
pytest's status, after writing the file.
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


def markdown(total: dict[str, int], seconds: float, command: list[str], status: int) -> str:
    import torch

    return "\n".join([
        "# The test suite",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC at commit {_commit()}: "
        f"`{' '.join(command)}` (`make test-report`, the command of `make test`).",
        "",
        "| passed | failed | errors | skipped | wall time | CPUs | Python | torch | exit status |",
        "|---:|---:|---:|---:|---:|---:|---|---|---:|",
        f"| {total['passed']} | {total['failures']} | {total['errors']} | {total['skipped']} | "
        f"{seconds / 60:.1f} min | {os.cpu_count()} | {platform.python_version()} | {torch.__version__} | {status} |",
        "",
        "Skipped tests say why in pytest's summary (GPU tests without CUDA; SLURM tests without slurm-wlm and "
        "munge). The time does not include `make install`.",
        "",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "tests.md")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: pytest's arguments")
    args = parser.parse_args()
    pytest_args = [a for a in args.pytest_args if a != "--"]
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "junit.xml"
        command = [sys.executable, "-m", "pytest", *pytest_args]
        started = time.perf_counter()
        status = subprocess.call([*command, f"--junitxml={junit}"], cwd=ROOT)
        seconds = time.perf_counter() - started
        if not junit.is_file():
            print(f"error: pytest wrote no report (exit status {status}); {args.out} is unchanged", file=sys.stderr)
            return status or 1
        total = counts(junit)
    shown = ["python", "-m", "pytest", *pytest_args]
    atomic_write_text(args.out, markdown(total, seconds, shown, status))
    print(f"wrote {args.out}: {total['passed']} passed, {total['failures']} failed, {total['errors']} errors, "
          f"{total['skipped']} skipped in {seconds / 60:.1f} min")
    return status


if __name__ == "__main__":
    sys.exit(main())
