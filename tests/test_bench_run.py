"""``make bench-run`` (scripts/bench_run.py) in a dry run: every path of the benchmark at a tiny budget, so that
it cannot rot between the runs that write results/bench/run.{md,csv}."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd

from tests.conftest import ROOT


def test_the_benchmark_runs_every_command_and_reports_them_side_by_side(tmp_path):
    subprocess.run([sys.executable, "scripts/bench_run.py", "--epochs", "4", "--samples-per-cycle", "1", "--rounds", "1",
                    "--threads", "1", "--out", str(tmp_path)], cwd=ROOT, check=True, capture_output=True, text=True)
    rows = pd.read_csv(tmp_path / "run.csv").set_index("what")
    assert sorted(rows.index) == ["csg", "import torch", "plain loop"]
    for what in ("csg", "plain loop"):
        row = rows.loc[what]
        # from the process's start to the first update: after the interpreter started, before the process ended
        assert 0 < row.to_first_step < row.wall_s
        assert row.train_s < row.wall_s and row.members == 4  # one member a cycle, 4 cycles
        assert 0 <= row.error_pct < 60  # 4 epochs of the MLP on the digits: well above chance (90 %)
    text = (tmp_path / "run.md").read_text()
    assert "a dry run, not the default" in text and "| 1 | " in text
    ratio = rows.loc["csg"].wall_s / rows.loc["plain loop"].wall_s
    assert f"{ratio:.3f}" in text


def test_the_plain_loop_reads_the_digits_csg_trains_on():
    """The plain loop's split is csg.data.mnist's written out again (it imports nothing of csg): the same digits."""
    import importlib.util

    from csg.data.mnist import mnist5k

    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "scripts" / "bench_run.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    splits = mnist5k()
    x_train, y_train, x_test, y_test = bench.mnist5k_arrays()
    assert (x_train.reshape(-1, 1, 28, 28) == splits.train.tensors[0].numpy()).all()
    assert (y_train == splits.train.tensors[1].numpy()).all()
    assert (x_test.reshape(-1, 1, 28, 28) == splits.test.tensors[0].numpy()).all()
    assert (y_test == splits.test.tensors[1].numpy()).all()
