"""A table's tuning stage (studies.experiments.tuning_stage): each method's step picked on held-out training data
before the table's runs, a diverged point scored as an outcome, the picks filling the table's sweeps, and the
CIFAR-10 benchmark's stage as its spec states it."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from csg.errors import ConfigError
from csg.launch.run import DIVERGED
from csg.paths import CONFIGS
from studies.experiments import protocol, tables
from studies.experiments import tuning_stage as stage
from studies.experiments.sweeps import TableSpec, Tuning, expand, expected_runs
from tests.conftest import ROOT

SPEC = TableSpec(name="tuned_toy", title="a toy", presets={"full": "posterior_benchmark"}, data={"full": ""},
                 paper_data=(), seeds={"full": "0"}, label=lambda run, budget: "cSGHMC", metrics=(),
                 sweeps=(("sampler=csghmc", "sampler.lr0={csghmc}", "seed={seeds}"),
                         ("sampler=snapshot_sgdm", "sampler.lr0={csghmc}", "seed={seeds}")),
                 tuning=Tuning(methods={"csghmc": ("sampler=csghmc",)}, factors=(1.0, 1e31), seeds="7",
                               holdout=0.2))
TINY = ["trainer.epochs=6", "sampler.cycles=1", "sampler.explore=0.5", "sampler.samples_per_cycle=2",
        "trainer.threads=1", "logger=none", "trainer.progress=false"]


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    here = tmp_path_factory.mktemp("stage")
    import os

    cwd = os.getcwd()
    os.chdir(ROOT)  # train.py as the driver runs it, from the repository
    try:
        picks = stage.run_stage(SPEC, "full", 6, "posterior_benchmark", here / "runs", "local", TINY, CONFIGS)
    finally:
        os.chdir(cwd)
    return here / "runs", picks


def test_the_stage_runs_every_point_on_held_out_data_and_a_diverged_point_loses(staged):
    runs, picks = staged
    record = pd.read_csv(stage.stage_folder(runs) / stage.TUNED_CSV)
    recipe = record.value.min()  # factor 1
    assert list(record.factor) == [1.0, 1e31] and record.value.max() == pytest.approx(1e31 * recipe)  # lr 1e30: NaN
    assert picks == {"csghmc": pytest.approx(recipe)}
    diverged = list(stage.stage_folder(runs).glob(f"csghmc/*/*/{DIVERGED}"))
    assert len(diverged) == 1 and math.isinf(record.heldout_nll.max())
    assert math.isfinite(record.heldout_nll.min()) and bool(record.edge[record.picked].iloc[0])  # 2 points: an edge
    from csg.reporting import read_yaml

    config = read_yaml(next(stage.stage_folder(runs).glob("csghmc/*/*/.hydra/config.yaml")))
    assert config.data.holdout == 0.2 and config.evaluation.reference is None and config.seed == 7
    lines = stage.section(record, SPEC)
    assert any("**at the edge**" in line for line in lines) and "seeds 7 (not the table's)" in " ".join(lines)


def test_a_second_command_reads_the_stage_instead_of_running_it(staged):
    runs, picks = staged
    before = sorted(p.stat().st_mtime_ns for p in stage.stage_folder(runs).rglob("*") if p.is_file())
    again = stage.run_stage(SPEC, "full", 6, "posterior_benchmark", runs, "local", TINY, CONFIGS)
    assert again == picks
    after = sorted(p.stat().st_mtime_ns for p in stage.stage_folder(runs).rglob("*") if p.is_file()
                   if p.name != stage.TUNED_CSV)
    assert len(after) == len(before) - 1 and set(after) <= set(before)


def test_the_picks_fill_the_sweeps_and_the_protocol_leaves_the_tuned_key_to_them(staged):
    _, picks = staged
    sweeps = expand(SPEC, "full", 6, tuned=picks)
    assert [s[1] for s in sweeps] == [f"sampler.lr0={picks['csghmc']}"] * 2  # the noise-off control: cSGHMC's step
    assert all("sampler.lr0" not in " ".join(s) for s in expand(SPEC, "full", 6))  # unpicked: the presets' steps
    run, preset = {"sampler.lr0": 0.3, "seed": 0}, {"sampler.lr0": 0.1, "seed": 0}
    assert protocol.compare(run, preset) == {"sampler.lr0": (0.3, 0.1)}
    assert protocol.compare(run, preset, protocol.tuned_keys(SPEC)) == {}


def test_an_unfinished_stage_names_its_missing_points_and_a_set_step_is_refused(tmp_path):
    with pytest.raises(stage.StageIncomplete, match=r"csghmc sampler.lr0=0.1 seed=7"):
        stage.pick_steps(tmp_path / "tuning_stage", SPEC, {"csghmc": 0.1})
    with pytest.raises(ConfigError, match=r"tuning stage='csghmc: sampler=csghmc sampler.lr0=1e\+30 seed=7 data.holdout=0.2 .*"
                                          r"sampler.temperature=-1 is not allowed"):
        stage.run_stage(SPEC, "full", 6, "posterior_benchmark", tmp_path / "runs", "local",
                        [*TINY, "sampler.temperature=-1"], CONFIGS)
    assert not (tmp_path / "runs").exists()  # refused before any run: nothing written
    with pytest.raises(ConfigError, match="left to the target's tuning stage"):
        stage.check_command(SPEC, ["trainer.epochs=4", "sampler.lr0=0.3"])
    stage.check_command(SPEC, ["trainer.epochs=4"])


def test_the_cifar10_benchmark_tunes_every_method_on_other_seeds_before_its_runs():
    spec = tables.TABLES["posterior_benchmark_cifar10"]
    assert spec.tuning is not None and not set(spec.tuning.seeds.split(",")) & set(spec.seeds["full"].split(","))
    steps = stage.recipe_steps(spec, "full", 200, spec.presets["full"], [], CONFIGS)
    assert set(steps) == set(spec.tuning.methods) and steps["csghmc"] == 0.5
    sweeps = expand(spec, "full", 200, tuned={name: 0.01 * (i + 1) for i, name in enumerate(steps)})
    lr0 = {(run["sampler"], run.get("sampler.chains", "1")): run["sampler.lr0"] for run in expected_runs(sweeps)}
    assert lr0[("snapshot_sgdm", "1")] == lr0[("csghmc", "1")]  # the paired noise-off control
    assert len(set(lr0.values())) == len(steps)  # every other row its own pick
    from csg.checks import check_train_command

    for name, sweep in stage.stage_sweeps(spec, "full", 200, steps).items():
        first = {k: v.split(",")[0] for k, v in (o.split("=", 1) for o in sweep)}
        assert "data.holdout" in first and first["evaluation.reference"] == "null", name
        command = [f"experiment={spec.presets['full']}", *(f"{k}={v}" for k, v in first.items())]
        assert check_train_command(command, CONFIGS) is None, name


@pytest.mark.parametrize(("flags", "committed", "key", "fragment"), [
    ({"tune_factors": "0,1"}, False, "--tune-factors", "distinct numbers > 0"),
    ({"tune_factors": "1,1"}, False, "--tune-factors", "distinct numbers > 0"),
    ({"tune_seeds": "100,x"}, False, "--tune-seeds", "whole numbers"),
    ({"tune_seeds": "3,100"}, False, "--tune-seeds", "not tuned on the seeds it is scored on"),
    ({"tune_factors": "0.5,1"}, True, "--tune-factors", "pass --out DIR"),
])
def test_a_bad_or_uncommitted_tuning_grid_is_one_line_naming_the_flag(flags, committed, key, fragment):
    from studies.experiments.job import Job

    spec = tables.TABLES["posterior_benchmark_cifar10"]
    with pytest.raises(ConfigError, match=fragment) as refused:
        stage.with_flags(spec, Job("posterior-benchmark-cifar10", ROOT / "out", **flags), committed)
    assert refused.value.key == key
    mine = stage.with_flags(spec, Job("posterior-benchmark-cifar10", ROOT / "out", tune_factors="2,0.5",
                                      tune_seeds="100"), False)
    assert (mine.tuning.factors, mine.tuning.seeds) == ((0.5, 2.0), "100")


def test_a_target_without_a_tuning_stage_refuses_its_flags():
    from studies.experiments.job import Job
    from studies.experiments.registry import TARGETS

    with pytest.raises(ConfigError, match="not used by table1; the targets that take it: posterior-benchmark-cifar10"):
        TARGETS["table1"].check(Job("table1", ROOT / "out", tune_factors="1"))


def test_on_slurm_the_stage_is_one_multirun_a_method_on_the_tables_gpus(monkeypatch, tmp_path):
    from studies.experiments import launch

    calls = []
    monkeypatch.setattr(launch, "_call", lambda command, what, runs: calls.append(command))
    spec = tables.TABLES["posterior_benchmark_cifar10"]
    with pytest.raises(stage.StageIncomplete):  # nothing ran: every point is named as missing, nothing picked
        stage.run_stage(spec, "full", 200, spec.presets["full"], tmp_path, "slurm",
                        ["hydra.launcher.partition=gpu", "evaluation.reference=mine.npz"], CONFIGS, spec.gpus_per_run)
    assert len(calls) == len(spec.tuning.methods)
    for command in calls:
        assert "hydra/launcher=slurm" in command and "hydra.launcher.gpus_per_node=1" in command
        assert "hydra.launcher.partition=gpu" in command and "evaluation.reference=mine.npz" not in command
        assert "seed=100,101" in command and "data.holdout=0.1" in command
