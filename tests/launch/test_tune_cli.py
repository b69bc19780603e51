"""csg-tune end to end (python scripts/tune.py, what the console script runs): a grid run, its YAML, its reuse of
finished runs, and bad input refused in one line before any run."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT

TINY = ["experiment=posterior_benchmark", "trainer.epochs=10", "sampler.cycles=1", "sampler.samples_per_cycle=2",
        "ood=none", "trainer.threads=1"]


def _tune(*words, cwd):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "tune.py"), *words], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    here = tmp_path_factory.mktemp("tune")
    done = _tune(*TINY, "--grid", "sampler.lr0=0.05,0.4", "--seeds", "0,1", "--out", "picked.yaml", cwd=here)
    assert done.returncode == 0, done.stderr[-2000:]
    return here, done


def test_the_pick_is_the_rule_applied_to_every_point_s_held_out_nll(tuned):
    here, done = tuned
    record = yaml.safe_load((here / "picked.yaml").read_text())
    points = {tuple(p["overrides"]): p for p in record["points"]}
    assert set(points) == {("sampler.lr0=0.05",), ("sampler.lr0=0.4",)}
    best = min(points.values(), key=lambda p: p["heldout_nll"])
    within = [p for p in points.values() if p["heldout_nll"] <= best["heldout_nll"] + best["stderr"]]
    assert tuple(record["overrides"]) in {tuple(p["overrides"]) for p in within}
    assert record["command"] == " ".join(["csg-train", *TINY, *record["overrides"]])
    assert f"picked: {' '.join(record['overrides'])}" in done.stdout
    runs = sorted((here / "csg-tune-runs").glob("*/seed*/metrics.json"))
    assert len(runs) == 4  # 2 points x 2 seeds, each trained on 90 % of the training digits
    assert all('"num_data": 900' in path.read_text() for path in runs)


def test_a_second_call_reads_the_finished_runs_instead_of_training_again(tuned):
    here, _ = tuned
    before = {p: p.stat().st_mtime_ns for p in (here / "csg-tune-runs").glob("*/seed*/metrics.json")}
    again = _tune(*TINY, "--grid", "sampler.lr0=0.05,0.4", "--seeds", "0,1", "--out", "again.yaml", cwd=here)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert yaml.safe_load((here / "again.yaml").read_text())["overrides"] == \
        yaml.safe_load((here / "picked.yaml").read_text())["overrides"]


@pytest.mark.parametrize("words, fragments", [
    ((), ["--grid", "at least one"]),
    (("--grid", "sampler.lr0"), ["--grid='sampler.lr0'", "KEY=V1,V2"]),
    (("--grid", "seed=1,2"), ["--grid", "csg-tune sets them"]),
    (("seed=3", "--grid", "sampler.lr0=0.1"), ["seed=", "--seeds"]),
    (("--grid", "sampler.lr0=0.1", "--holdout", "1.5"), ["--holdout='1.5'", "(0, 1)"]),
    (("--grid", "sampler.lr0=0.1", "--seeds", "a"), ["--seeds='a'", "integers"]),
    (("--grid", "sampler.lr0=0.1", "--out", "x.txt"), ["--out='x.txt'", ".yaml"]),
    (("--grid", "sampler.lr0=0.1,-1"), ["--grid='sampler.lr0=-1'", "sampler.lr0=-1"]),
    (("--grid", "sampler.lr0=0.1", "--bogus"), ["--bogus", "no option"]),
])
def test_bad_input_is_one_line_and_changes_no_file(tmp_path, monkeypatch, capsys, words, fragments):
    from csg.launch.tune_cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        main([*TINY, *words])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert stopped.value.code == 2 and "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(fragment in lines[0] for fragment in fragments), lines[0]
    assert list(tmp_path.iterdir()) == []


def test_help_says_what_it_does(tmp_path):
    done = _tune("--help", cwd=tmp_path)
    assert done.returncode == 0 and "--grid KEY=V1,V2" in done.stdout and "held-out" in done.stdout
