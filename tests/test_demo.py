"""The embedded default samples (issue 42): `make demo`'s run is a sampling ensemble, not continued training.

`python train.py` with nothing else (cSGHMC, MLP, mnist5k, 200 epochs), seed 0, then the report `make demo`
prints (scripts/demo_report.py): the ensemble's NLL at most 0.95 x its best member's, its error at most its
members' mean, no two members closer than 0.001 in mean TV; beside the committed numbers of results/demo.csv.
`make demo-seeds` shows the same on seeds 0, 1, 2 (results/demo.md).
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_default_run_is_a_sampling_ensemble_and_is_printed_beside_the_committed_numbers(run_train):
    process, run_dir = run_train("trainer.checkpoint.every_n_epochs=0")
    assert process.returncode == 0, process.stderr
    report = subprocess.run([sys.executable, "scripts/demo_report.py", str(run_dir), "--beside", "results/demo.csv",
                             "--out", str(run_dir / "demo.md")], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert report.returncode == 0, report.stdout + report.stderr
    lines = report.stdout.splitlines()
    assert re.match(r"this run \(seed 0, \d+ threads\): ensemble \d+\.\d\d % error", lines[0]), lines[0]
    assert lines[1].startswith("committed (results/demo.csv, seeds 0, 1, 2, ")
    assert [line.split(":")[0].strip() for line in lines[2:5]] == ["pass"] * 3
    written = (run_dir / "demo.md").read_text()
    assert "| 200 epochs / 4 cycles | 0 | 12 |" in written


def test_the_committed_numbers_show_the_three_checks_on_three_seeds():
    with open(ROOT / "results" / "demo.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["seed"] for row in rows] == ["0", "1", "2"]
    for row in rows:
        assert row["budget"] == "200 epochs / 4 cycles" and row["members"] == "12"
        assert float(row["nll_ratio"]) <= 0.95 and row["checks_passed"] == "True"
        assert float(row["ensemble_error_pct"]) <= float(row["mean_member_error_pct"])
        assert float(row["min_pairwise_tv"]) >= 1e-3
