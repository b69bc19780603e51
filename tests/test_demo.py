"""The embedded default samples (issue 42): `make demo`'s run is a sampling ensemble, not continued training.

`python train.py` with nothing else (cSGHMC, MLP, mnist5k, 200 epochs), seed 0, then the report `make demo`
prints (scripts/demo_report.py): the ensemble's NLL at most 0.95 x its best member's, its error at most its
members' mean, no two members closer than 0.001 in mean TV; beside the committed numbers of results/demo.csv.
`make demo-seeds` shows the same on seeds 0-9 (results/demo.md), beside the same cycles without noise (T = 0) and
at T = 1, with paired verdicts (issue 54); `make demo-seeds-report` rewrites the report from the committed CSVs.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from csg.errors import ConfigError

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
    assert lines[1].startswith("committed (results/demo.csv, seeds 0-9, ")
    assert [line.split(":")[0].strip() for line in lines[2:5]] == ["pass"] * 3
    written = (run_dir / "demo.md").read_text()
    assert "| 200 epochs / 4 cycles | 0 | 12 |" in written
    # what the run wrote: metrics.json, the samples and their manifest, the saved config, the log, the epochs' rows
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["method"], metrics["data"], metrics["model"]) == ("csghmc", "mnist5k", "mlp")
    for key in ("test_error_pct", "nll", "ece", "brier"):
        assert key in metrics["ensemble"] and all(key in sample for sample in metrics["per_sample"])
    assert metrics["ensemble"]["num_samples"] == len(metrics["per_sample"]) == 12
    assert metrics["temperature"] == 0.2 and metrics["gradient_evaluations"] == 200 * 63  # the recipe's tempered T
    # the process's start to its first update: the interpreter, the imports and the checks, before all the training
    assert 0 < metrics["wall_time_s"]["to_first_step"] < metrics["wall_time_s"]["total"]
    samples = sorted(p.name for p in (run_dir / "samples").iterdir())
    assert samples == ["manifest.json", *[f"sample_{3 * c + i:04d}_cycle{c:02d}_epoch{50 * c + 47 + i:04d}.pt"
                                          for c in range(4) for i in range(3)]]
    assert yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["sampler"]["name"] == "csghmc"
    assert "epoch 200/200" in (run_dir / "train.log").read_text()
    assert (run_dir / "epochs.csv").read_text().count("\n") == 201
    assert "ensemble of 12" in process.stdout and "best single sample" in process.stdout
    # does the chain sample? The default's own steps say not (issue 73): its sampling stages leave the chain near
    # the mode exploration found (configurational temperature far below T, a stage far shorter than the prior's
    # diffusion time), its momentum at T, its 12 members worth fewer; the end-of-run line says so and names settings
    sampling, spread = metrics["sampling"], metrics["spread"]
    assert sampling["target"] == pytest.approx(0.2) and sampling["steps"] == 4 * 10 * 63
    assert sampling["configurational"] < 0.1 * 0.2 and sampling["kinetic"] == pytest.approx(0.2, rel=0.5)
    assert sampling["relaxation"] < 0.05 and len(sampling["stages"]) == 4
    assert 1 < spread["effective_members"] < 0.5 * 12 and spread["members"] == 12 and spread["examples"] == 1000
    check = metrics["sampling_check"]
    assert check.startswith("does the chain sample? not as run: configurational temperature")
    assert "sampler.explore" in check and "near copies" in check and check in process.stdout
    assert "T = 0.2 (data=mnist5k's recipe)" in (run_dir / "train.log").read_text()
    from csg import Posterior

    diagnostics = Posterior.load(run_dir).diagnostics()
    assert diagnostics.configurational_temperature == sampling["configurational"]
    assert diagnostics.kinetic_temperature == sampling["kinetic"]
    assert diagnostics.effective_members == spread["effective_members"] and diagnostics.sampling_check == check


def test_the_committed_numbers_show_the_three_checks_on_ten_seeds_of_the_default():
    with open(ROOT / "results" / "demo.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if (row["temperature"], row["lr0"]) == ("0.2", "0.1")]
    assert [row["seed"] for row in rows] == [str(seed) for seed in range(10)]
    for row in rows:
        assert row["budget"] == "200 epochs / 4 cycles" and row["members"] == "12"
        assert float(row["nll_ratio"]) <= 0.95 and row["checks_passed"] == "True"
        assert float(row["ensemble_error_pct"]) <= float(row["mean_member_error_pct"])
        assert float(row["min_pairwise_tv"]) >= 1e-3


def _report_module():
    spec = importlib.util.spec_from_file_location("demo_report", ROOT / "scripts" / "demo_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


demo_report = _report_module()


def _arms_csv(path: Path, arms=((0.2, 0.1), (0, 0.1), (1, 0.05)), seeds=range(6)) -> Path:
    """Constructed per-run rows of three arms: the default 1 point better than T = 0 in error on every seed (with
    seed-to-seed spread), and T = 1 within 0.02 of it."""
    rows = []
    for temperature, lr0 in arms:
        for seed in seeds:
            error = 6.0 + 0.1 * seed + {0: 1.0, 1: 0.02 * (-1) ** seed}.get(temperature, 0.0)
            rows.append({"budget": "200 epochs / 4 cycles", "seed": seed, "temperature": temperature, "lr0": lr0,
                         "ensemble_error_pct": error, "ensemble_nll": 0.2 + 0.01 * error + 0.001 * seed % 3,
                         "best_member_nll": 0.25, "nll_ratio": 0.85, "mean_member_error_pct": error + 0.4,
                         "min_pairwise_tv": 0.01, "members": 12, "checks_passed": temperature != 0, "threads": 1,
                         "train_seconds": 25.0, "max_lr0_times_lambda": "", "method": "csghmc", "data": "mnist5k",
                         "num_data": 4000, "num_test": 1000, "model": "mlp", "device": "cpu", "epochs": 200,
                         "weight_decay": 0.0005, "momentum": 0.1, "cycles": 4, "explore": 0.8,
                         "hold_sampling_lr": True, "samples_per_cycle": 3})
    path.write_text(demo_report.table_csv(rows, []))
    return path


def _refused(*args) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        demo_report.report(demo_report.parse([str(a) for a in args]))
    return refused.value


def test_the_arms_report_states_the_cold_prior_the_arms_and_one_verdict_per_arm_and_metric(tmp_path):
    table = _arms_csv(tmp_path / "demo.csv")
    # the default's runs pass their checks (T = 0's fail, which does not fail the report)
    assert demo_report.report(demo_report.parse(["--from-csv", "--csv", str(table), "--arms", "--out",
                                                 str(tmp_path / "demo.md")])) == 0
    text = (tmp_path / "demo.md").read_text()
    assert "T = 0.2: the tempered posterior p(theta | D)^(1/T)" in text
    assert "precision N wd / T = 10 (standard deviation 0.316 per weight), not the N wd = 2 " in text
    assert "**The members are not equilibrium draws.** Each cycle's sampling stage lasts 10 epochs" in text
    for label, passed in (("T = 0.2, lr0 0.1 (the default)", 6), ("T = 0, lr0 0.1 (noise off: a snapshot "
                                                                   "ensemble)", 0), ("T = 1, lr0 0.05", 6)):
        assert re.search(rf"^\| {re.escape(label)} \| 6 \| .* \| {passed} of 6 \| 25 \|$", text, re.M), label
    verdicts = re.findall(r"^\| (T = [^|]*) \| (ensemble error %|ensemble NLL) \| .* \| (\w+) \|$", text, re.M)
    assert [(arm.split(",")[0], metric) for arm, metric, _ in verdicts] == [
        ("T = 0", "ensemble error %"), ("T = 0", "ensemble NLL"), ("T = 1", "ensemble error %"),
        ("T = 1", "ensemble NLL")]
    # 1 point lower on every seed: helps; within 0.02 of T = 1 (margin 0.3): equivalent
    assert [verdict for _, _, verdict in verdicts] == ["helps", "helps", "equivalent", "equivalent"]
    assert "+-0.3" in text and "+-0.01" in text and "Family: 4 comparisons, one family: " in text
    assert "the same runs at T = 0, lr0 0.1 (noise off: a snapshot ensemble), T = 1, lr0 0.05" in text


def test_the_report_only_path_rewrites_the_committed_report_identically(tmp_path):
    out = tmp_path / "demo.md"
    demo_report.report(demo_report.parse([
        "--from-csv", "--arms", "--csv", "results/demo.csv", "--restarts-csv", "results/demo_restarts.csv",
        "--probes", "results/demo_t1_probes.csv", "--long", "results/demo_long.csv", "--out", str(out),
        "--command", "make demo-seeds"]))
    assert out.read_text() == (ROOT / "results" / "demo.md").read_text()


@pytest.mark.parametrize(("args", "key"), [
    (("--from-csv", "--arms", "--out", "x.md"), "--csv"),
    (("--from-csv", "--csv", "results/demo.csv", "runs/x", "--out", "x.md"), "runs"),
    (("--from-csv", "--csv", "results/demo.csv", "--out", "x.md", "--probes", "no/such.csv"), "--probes"),
    (("--from-csv", "--csv", "results/demo.csv", "--out", "x.md", "--long", "no/such.csv"), "--long"),
    (("--from-csv", "--csv", "results/demo.csv", "--out", "x.md", "--curvature"), "--curvature"),
    (("--from-csv", "--csv", "results/demo.csv"), "--out"),
    ((), "runs"),
])
def test_bad_input_is_refused_naming_the_key(args, key):
    assert _refused(*args).key == key


def test_a_refusal_is_one_line_without_a_traceback():
    process = subprocess.run([sys.executable, "scripts/demo_report.py", "--from-csv", "--out", "x.md"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert process.returncode == 2 and process.stderr.strip() == (
        "error: --csv=None is not allowed: an existing per-run CSV with --from-csv"), process.stderr


@pytest.mark.parametrize(("arms", "allowed"), [
    (((0.2, 0.1),), "and of at least one other (temperature, lr0)"),
    (((0, 0.1), (1, 0.05)), "runs of the default (T = 0.2, lr0 0.1) and"),
])
def test_arms_without_the_default_or_a_control_are_refused(tmp_path, arms, allowed):
    table = _arms_csv(tmp_path / "demo.csv", arms=arms, seeds=range(3))
    refused = _refused("--from-csv", "--csv", table, "--arms", "--out", tmp_path / "demo.md")
    assert refused.key == "--arms" and allowed in str(refused)
    assert not (tmp_path / "demo.md").exists()


def test_arms_on_different_seeds_are_refused_since_the_verdicts_pair_by_seed(tmp_path):
    table = _arms_csv(tmp_path / "demo.csv")
    kept = [line for line in table.read_text().splitlines() if not line.startswith("200 epochs / 4 cycles,5,0,")]
    table.write_text("\n".join(kept) + "\n")
    refused = _refused("--from-csv", "--csv", table, "--arms", "--out", tmp_path / "demo.md")
    assert refused.key == "--arms" and "pair by seed" in str(refused) and "seeds [0, 1, 2, 3, 4]" in str(refused)
