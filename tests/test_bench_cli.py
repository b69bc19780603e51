"""``make bench-cli`` (scripts/bench_cli.py) in a dry run: every command of the benchmark once, so that it cannot
rot between the runs that write results/bench/cli.{md,csv}; its timings are the benchmark's, not this test's."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd

from tests.conftest import ROOT


def test_the_cli_benchmark_runs_every_command_and_checks_each_refusal(tmp_path):
    done = subprocess.run([sys.executable, "scripts/bench_cli.py", "--rounds", "1", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]  # each refusal one line, exit 2, nothing written
    rows = pd.read_csv(tmp_path / "cli.csv")
    assert sorted(rows.what) == sorted(["import torch", "--help", "unknown option", "bad value", "bad key"])
    assert (rows.seconds > 0).all()
    text = (tmp_path / "cli.md").read_text()
    assert "| `python -m csg --help` (--help) |" in text and "Goal: `--help` and a refusal under 2 s" in text
