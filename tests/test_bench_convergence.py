"""``make bench-convergence`` (scripts/bench_convergence.py) on tiny shapes: both implementations timed side by side,
agreeing, and the table written."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import ROOT


def test_the_benchmark_times_both_and_writes_their_agreement(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_convergence", ROOT / "scripts" / "bench_convergence.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench, "SHAPES", {"tiny": (2, 12, 30)})
    monkeypatch.setattr(sys, "argv", ["bench_convergence.py", "--rounds", "2", "--out", str(tmp_path)])
    bench.main()
    rows = (tmp_path / "convergence.csv").read_text().splitlines()
    assert rows[0] == "shape,implementation,round,seconds" and len(rows) == 1 + 4
    (row,) = [line for line in (tmp_path / "convergence.md").read_text().splitlines() if line.startswith("| tiny")]
    assert float(row.split("|")[-2]) < 1e-9  # the largest relative difference: the same numbers
