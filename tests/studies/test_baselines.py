"""Baselines named as they are (issue 54): the constant-step SGLD / SGHMC presets, the step-size column of every
paper table, and a table's report regenerated from its committed per-run record alone."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from omegaconf import OmegaConf

from csg.errors import ConfigError
from studies.experiments import registry, table_report, tables
from studies.experiments.job import Job
from studies.experiments.registry import TARGETS
from tests.conftest import ROOT

SMALL = ["trainer.epochs=2", "sampler.samples_per_cycle=1", "data.batch_size=500", "data.test_per_class=20",
         "logger=none", "trainer.progress=false", "trainer.device=cpu"]


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    import csg  # noqa: F401  (the config resolvers)

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("config", overrides=overrides)


@pytest.mark.parametrize("name, rule, momentum", [("sgld_constant", "sgld", 0.0), ("sghmc_constant", "sghmc", 0.1)])
def test_the_constant_step_presets_hold_half_the_recipes_step_and_sample(tmp_path, name, rule, momentum):
    """The preset composes to one step, alpha_0 / 2 of the data's recipe, for every iteration of the run; its
    stages and samples are the decreasing baseline's; a short run trains at that step and samples."""
    import csg
    from csg.engine.build import build_schedule
    from csg.engine.settings import schedule_settings

    cfg = _compose(["experiment=table1_smoke", f"sampler={name}"])
    decreasing = _compose(["experiment=table1_smoke", f"sampler={rule}"])
    assert cfg.sampler.schedule == "constant" and cfg.sampler.update_rule == rule
    assert cfg.sampler.lr0 == pytest.approx(0.5 * cfg.data.recipe.lr0) == pytest.approx(0.1)
    assert cfg.sampler.momentum == momentum
    for key in ("explore", "samples_per_cycle", "cycles", "temperature", "weight_decay"):
        assert cfg.sampler[key] == decreasing.sampler[key], key
    schedule = build_schedule(schedule_settings(cfg), 1000)
    assert {schedule.lr(k) for k in range(1000)} == {cfg.sampler.lr0}
    assert not schedule.sampling(0) and schedule.sampling(999)  # burn-in first, as the decreasing baseline
    run = tmp_path / "run"
    posterior = csg.train([f"sampler={name}", "sampler.lr0=0.05", *SMALL, f"hydra.run.dir={run}"])
    steps = [float(lr) for lr in re.findall(r"epoch \d+/2 .* lr (\S+)", (run / "train.log").read_text())]
    assert steps == [0.05, 0.05]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["schedule"] == "constant" and len(posterior) == 1
    assert 0 <= metrics["ensemble"]["test_error_pct"] < 100


def test_every_sampler_presets_schedule_is_the_step_its_rows_say():
    """tables.SCHEDULES (the "step size" column's source) against each preset's own `schedule` key."""
    for name, schedule in tables.SCHEDULES.items():
        preset = OmegaConf.load(ROOT / "configs" / "sampler" / f"{name}.yaml")
        assert preset.schedule == schedule, name
    for name in ("sgld", "sghmc", "sgd", "sgdm"):
        assert tables.TABLES["table1"].step(tables.LABELS[name]) == "decreasing"
    assert tables.TABLES["table1"].step("SGLD (constant step)") == "constant"
    assert tables.TABLES["table1"].step("cSGHMC") == "cyclical" and tables.TABLES["table1"].step("mine") == "-"
    assert tables.TABLES["table2"].step("Decreasing+Parallel SGLD (100/400)") == "decreasing"
    assert tables.TABLES["table2"].step("Cyclical+Single SGHMC (200/200)") == "cyclical"
    assert tables.TABLES["icsgld_table1"].step("reSGHMC P4 / mlp") == "step decay"
    assert tables.TABLES["icsgld_table1"].step("cycSWAG T4 / resnet20") == "cyclical"


def _run(root, name, *, sampler, seed, error, nll, update_rule="sgld"):
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    config = {"sampler": {"name": sampler, "update_rule": update_rule, "chains": 1, "cycles": 1},
              "data": {"name": "mnist5k"}, "model": {"name": "mlp"}, "seed": seed, "trainer": {"epochs": 80}}
    OmegaConf.save(OmegaConf.create(config), run / ".hydra" / "config.yaml")
    metrics = {"ensemble": {"test_error_pct": error, "nll": nll, "top5_error_pct": 1.0}, "schedule": "constant",
               "chains": 1, "epochs": 80, "cycles": 1, "seed": seed}
    (run / "metrics.json").write_text(json.dumps(metrics))


def _table1_runs(root, seeds=(0, 1, 2), skip=()):
    """Runs of the 10 methods of Table 1; cSGLD 1.4 to 1.2 points below constant-step SGLD on the 3 seeds."""
    for number, name in enumerate(tables.LABELS):
        if name in skip:
            continue
        for seed in seeds:
            error = 6.0 + seed + (0.1 * number) + (-1.0 + 0.1 * seed if name == "csgld" else 0.0)
            _run(root / f"sweep0", f"{number}_{name}_seed{seed}", sampler=name, seed=seed, error=error,
                 nll=0.2 + 0.01 * number + 0.001 * seed)


def test_table1_says_which_baseline_each_row_is_and_compares_the_cycles_with_constant_steps(tmp_path):
    _table1_runs(tmp_path / "runs")
    table, missing = table_report.report("table1", tmp_path / "runs", tmp_path / "out", "smoke", epochs=80)
    assert missing == []
    steps = table.drop_duplicates("method").set_index("method").step
    assert steps["SGLD"] == "decreasing" and steps["SGLD (constant step)"] == "constant"
    assert steps["cSGLD"] == "cyclical" and steps["Snapshot-SGDM"] == "cyclical"
    text = (tmp_path / "out" / "table1.md").read_text()
    assert "| method | step size | test error %, ours |" in text
    assert "| SGLD | decreasing | " in text and "| SGHMC (constant step) | constant | " in text
    assert "Step size (which baseline each row is): decreasing: " in text and "constant: half the recipe's lr0 " in text
    verdicts = pd.read_csv(tmp_path / "out" / "table1_comparisons.csv").set_index(["method", "baseline", "metric"])
    assert len(verdicts) == 12  # the paper's 4 claims and the 2 against the constant steps, in 2 metrics
    assert verdicts.loc[("cSGLD", "SGLD (constant step)", "test_error_pct"), "difference"] == pytest.approx(-1.2)  # -1.3 + 0.1 x mean seed
    assert verdicts.loc[("cSGLD", "SGLD (constant step)", "test_error_pct"), "verdict"] == "helps"
    # a constant-step row has no paper value: the paper has no such baseline
    constant = table[(table.method == "SGLD (constant step)") & (table.metric == "test_error_pct")]
    assert constant.paper.isna().all()


def test_a_tables_report_regenerates_from_its_per_run_record_alone(tmp_path):
    """The report from <table>_runs.csv equals the report from the runs: table, comparisons and per-run rows; the
    Markdown differs only in where it says the runs are. A record of another table or scale is one line."""
    _table1_runs(tmp_path / "runs", skip=("sghmc_constant",))
    first, missing = table_report.report("table1", tmp_path / "runs", tmp_path / "a", "smoke", epochs=80)
    again, missing_again = table_report.report("table1", tmp_path / "a" / "table1_runs.csv", tmp_path / "b", "smoke",
                                               epochs=80)
    pd.testing.assert_frame_equal(first.reset_index(drop=True), again.reset_index(drop=True))
    assert missing == missing_again and len(missing) == 3  # the constant-step SGHMC's 3 seeds, found by label
    for name in ("table1.csv", "table1_comparisons.csv", "table1_runs.csv"):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text(), name
    a, b = ((tmp_path / d / "table1.md").read_text().splitlines() for d in "ab")
    differ = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    assert len(a) == len(b) and len(differ) == 1 and "Runs: `" in b[differ[0]]
    assert "the per-run record of the runs in" in b[differ[0]] and str(tmp_path / "runs") in b[differ[0]]
    assert "`make table1-report SCALE=smoke RUNS=results/csgmcmc/smoke/table1_runs.csv`" in b[differ[0]]
    record = pd.read_csv(tmp_path / "a" / "table1_runs.csv")
    for column, value, says in (("table", "table3", "rows are of table table3"), ("scale", "full", "of scale full")):
        record.assign(**{column: value}).to_csv(tmp_path / "other.csv", index=False)
        with pytest.raises(ConfigError, match=says) as refused:
            table_report.report("table1", tmp_path / "other.csv", tmp_path / "c", "smoke", epochs=80)
        assert refused.value.key == "--runs" and "\n" not in str(refused.value)
    record.drop(columns="test_nll").to_csv(tmp_path / "other.csv", index=False)
    with pytest.raises(ConfigError, match="columns test_nll are missing"):
        table_report.report("table1", tmp_path / "other.csv", tmp_path / "c", "smoke", epochs=80)
    assert not (tmp_path / "c").exists()


def test_report_only_on_a_fresh_clone_reads_the_committed_record(tmp_path, monkeypatch):
    """No multirun/ folder: `make table1-report SCALE=smoke` rebuilds the committed table from its committed
    table1_runs.csv; another record may not replace the committed table (--out may take it)."""
    committed = tmp_path / "results"
    _table1_runs(tmp_path / "runs")
    table_report.report("table1", tmp_path / "runs", committed, "smoke", epochs=80)
    before = (committed / "table1.csv").read_text()
    (committed / "table1.md").unlink()
    monkeypatch.setattr(registry, "default_out", lambda target, scale: committed)
    monkeypatch.chdir(tmp_path / "runs")  # no multirun/ here
    job = Job(target="table1", out=committed, scale="smoke", report_only=True)
    TARGETS["table1"].check(job)
    lines = TARGETS["table1"].make(job)
    assert lines == [f"table1: wrote {committed / 'table1.md'} from {committed / 'table1_runs.csv'}"]
    assert (committed / "table1.csv").read_text() == before and "Not this table's protocol" not in \
        (committed / "table1.md").read_text()
    copy = tmp_path / "copy_runs.csv"
    copy.write_text((committed / "table1_runs.csv").read_text())
    with pytest.raises(ConfigError, match="a per-run record other than the committed table's") as refused:
        TARGETS["table1"].make(Job(target="table1", out=committed, scale="smoke", report_only=True, runs=copy))
    assert refused.value.key == "--runs"
    elsewhere = tmp_path / "elsewhere"
    TARGETS["table1"].make(Job(target="table1", out=elsewhere, out_given=True, scale="smoke", report_only=True,
                               runs=copy))
    assert "> **Not this table's protocol**" in (elsewhere / "table1.md").read_text()
