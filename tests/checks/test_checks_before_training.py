"""Every check before training, on every job of a sweep and every item of the data (issue 43).

A refused command trains nothing: no sample, no epochs.csv row, exit status 2, no run directory left. Each
test names the case of the issue it covers.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from csg.errors import ConfigError
from tests.conftest import ROOT, assert_one_line, train

CONFIGS = ROOT / "configs"
DATA = ["data=custom", "data._target_=tests.own_components.blobs", "data.batch_size=20", "data.eval_batch_size=30"]
MODEL = ["model=custom", "model._target_=tests.own_components.tiny_net"]
SHORT = ["trainer.epochs=6", "sampler.cycles=2", "sampler.samples_per_cycle=1", "logger=none", "trainer.progress=false",
         "trainer.device=cpu"]
SMALL = ["model.hidden=[16]", "trainer.epochs=4", "sampler.cycles=2", "sampler.explore=0.5",
         "sampler.samples_per_cycle=1", "trainer.device=cpu"]


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _refused(tmp_path, *overrides: str) -> ConfigError:
    """``run`` of the config is refused before training: nothing of the run directory is made."""
    from csg.launch.run import run

    with pytest.raises(ConfigError) as refused:
        run(_cfg(*overrides), tmp_path / "run")
    assert "\n" not in str(refused.value) and refused.value.exit_code == 2
    assert not (tmp_path / "run").exists()
    return refused.value


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "WANDB_"))}
    return {**env, **extra}


# -- a sweep checks every job's data-dependent checks before it trains any ----------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_sweep_whose_later_job_does_not_fit_its_data_trains_no_job(tmp_path):
    sweep = tmp_path / "sweep"
    process = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", *SMALL, "sampler.samples_per_cycle=1,5",
                              f"hydra.sweep.dir={sweep}"], cwd=tmp_path, capture_output=True, text=True, env=_env(),
                             timeout=170)
    assert_one_line(process, 2, "sampler.samples_per_cycle=5 is not allowed: 1..1", "job 1 of the sweep")
    assert not sweep.exists()  # job 0 did not train: no samples, no epochs.csv


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sweep, fragments", [
    (["sampler.samples_per_cycle=1,5"], ["sampler.samples_per_cycle=5 is not allowed: 1..1", "job 1 of the sweep"]),
    (["sampler.cycles=2,100"], ["sampler.cycles=100 is not allowed: at most the run's 36 iterations", "job 1"]),
    (["data.batch_size=20,40", "trainer.epochs=2", "sampler.samples_per_cycle=1"], [
        "sampler.samples_per_cycle=1 is not allowed: none fit", "job 1"]),
    (["sampler.lr0=0.1,1e308"], ["sampler.lr0=1e+308 is not allowed", "float32", "job 1"]),
    (["sampler=sgld,resghmc", "sampler.chains=4"], ["sampler.chains=4 is not allowed: 1 without a launcher", "job 1"]),
])
def test_every_jobs_data_dependent_checks_run_before_hydra_starts(monkeypatch, sweep, fragments):
    import csg.data
    from csg.checks import check_command

    built = []
    real = csg.data.build_data
    monkeypatch.setattr(csg.data, "build_data", lambda *a, **k: built.append(k) or real(*a, **k))
    message = check_command(["-m", *DATA, *MODEL, *SHORT, *sweep], CONFIGS)
    assert message is not None and "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert len(built) == 1  # one data set: built once for the whole sweep (batch sizes and seeds aside)


@pytest.mark.timeout(120)
def test_a_sweep_of_good_jobs_passes_and_single_runs_build_no_data_before_hydra(monkeypatch):
    import csg.data
    from csg.checks import check_command

    built = []
    real = csg.data.build_data
    monkeypatch.setattr(csg.data, "build_data", lambda *a, **k: built.append(k) or real(*a, **k))
    assert check_command(["-m", *DATA, *MODEL, *SHORT, "seed=0,1,2", "sampler.lr0=0.05,0.1"], CONFIGS) is None
    assert len(built) == 1
    assert check_command([*DATA, *MODEL, *SHORT], CONFIGS) is None  # a single run checks itself before training
    assert len(built) == 1


# -- labels and shapes of every item, in one pass before training -------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("target, extra, fragment", [
    ("late_float_label", [], "items are (input tensor, integer label); train[5] is (Tensor, float)"),
    ("late_large_label", ["data.num_classes=3"], "data.num_classes=3 is not allowed: more than every label: the test "
                                                  "set has labels in [0, 5] (item 7)"),
    ("late_other_shape", [], "inputs all have one shape: train[3] is (5,), train[0] (4,)"),
    ("lying_length", [], "train[40] raised IndexError: list index out of range (its __len__ says 60 items)"),
    ("float_label_tensor", [], "labels are integers; the train set's label tensor holds float32"),
])
def test_every_item_is_checked_before_training(tmp_path, target, extra, fragment):
    error = _refused(tmp_path, *DATA, f"data._target_=tests.checks_components.{target}", *extra, *MODEL, *SHORT)
    assert fragment in str(error), str(error)


@pytest.mark.timeout(60)
def test_item_by_item_data_serve_integer_labels_and_check_items_as_served(tmp_path):
    from csg.data import build_data
    from csg.data.custom import ItemError

    data = build_data("custom", batch_size=8, _target_="tests.checks_components.int32_labels")
    x, y = next(iter(data.train))
    assert y.dtype == torch.int64 and x.shape == (8, 4)
    for workers in (0, 1):  # a DataLoader worker's error arrives as the same one line
        data = build_data("custom", batch_size=8, num_workers=workers, _target_="tests.checks_components.shape_shifter")
        with pytest.raises(ItemError) as changed:
            next(iter(data.train))
        assert "\n" not in str(changed.value), str(changed.value)
        assert str(changed.value).startswith("data._target_='tests.checks_components.shape_shifter' is not allowed: "
                                             "Datasets whose inputs all have one shape: train[")
        assert "is (5,) when served, (4,) when read before training" in str(changed.value)


def test_a_built_in_data_sets_labels_are_checked_from_its_tensors():
    from csg.engine.build import build_data_and_model, build_likelihood
    from csg.engine.settings import run_settings
    from csg.data import build_data

    data = build_data("custom", batch_size=20, _target_="tests.own_components.blobs")  # as a built-in set's bundle
    data.test.dataset.tensors[1][4] = 3  # 3 classes
    with pytest.raises(ConfigError, match=r"data.name='custom' is not allowed: a data set whose labels are 0..2: its "
                                          r"test set has labels in \[0, 3\]"):
        settings = run_settings(_cfg(*DATA, *MODEL))
        build_data_and_model(settings, torch.device("cpu"), data=data, likelihood=build_likelihood(settings.likelihood))


def test_reading_every_item_draws_no_random_number():
    from csg.data import build_data

    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    expected = torch.rand(1), np.random.rand(), random.random()
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    build_data("custom", batch_size=8, _target_="tests.checks_components.int32_labels")
    assert (torch.rand(1), np.random.rand(), random.random()) == expected


# -- values whose products overflow the step's dtype --------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("overrides, key, fragment", [
    (["sampler.lr0=1e308"], "sampler.lr0", "the largest step size fits the step's float32 (at most 3.4e+38); it is "
                                           "1e+308"),
    (["sampler.temperature=1e308"], "sampler.temperature", "the temperature fits"),
    (["sampler.lr0=1e30", "sampler.weight_decay=1e10"], "sampler.weight_decay", "lr0 x weight_decay fits"),
    (["sampler.lr0=3.395e38", "trainer.precision=bf16-mixed"], "sampler.lr0", "fits the step's bfloat16 (at most "
                                                                              "3.39e+38)"),
    (["sampler.schedule=step", "+sampler.lr_milestones=[0.3,0.6]", "+sampler.lr_factor=1e20", "sampler.lr0=1"],
     "sampler.lr0", "the largest step size (lr0 x lr_factor^milestones) fits"),
    (["sampler.schedule=decreasing", "+sampler.lr_final=0.01", "+sampler.gamma=0.001", "sampler.lr0=0.5"],
     "sampler.gamma", "(lr0 / lr_final)^(1 / gamma) is a finite number"),
])
def test_values_that_overflow_the_step_are_refused_before_training(tmp_path, overrides, key, fragment):
    error = _refused(tmp_path, *DATA, *MODEL, *SHORT, *overrides)
    assert error.key == key and fragment in str(error), str(error)


def test_the_noise_scale_is_checked_as_the_samplers_compute_it():
    from csg.engine.limits import check_step_values
    from csg.engine.settings import run_settings
    from tests.own_components import tiny_net

    net = tiny_net(3, (4,))
    check_step_values(run_settings(_cfg(*DATA, *MODEL, "sampler.lr0=3.4e38", "sampler.weight_decay=0",
                                        "sampler.temperature=0")), net, 120)  # the largest float32 step size: accepted
    near = ["sampler.lr0=3e38", "sampler.temperature=3e38", "sampler.weight_decay=0"]
    check_step_values(run_settings(_cfg(*DATA, *MODEL, "sampler=sgld", *near)), net, 120)  # sqrt(2 x 9e76 / 120) = 3.9e37
    with pytest.raises(ConfigError) as refused:
        check_step_values(run_settings(_cfg(*DATA, *MODEL, "sampler=sgld", *near)), net, 1)
    assert refused.value.key == "sampler.temperature" and str(refused.value).endswith(
        "the SGLD noise scale sqrt(2 lr0 T / N), N=1, fits the step's float32 (at most 3.4e+38); it is 4.24e+38")
    with pytest.raises(ConfigError, match=r"the SGHMC noise scale sqrt\(2 lr0 \(1 - momentum\) T / N\), N=1, fits"):
        check_step_values(run_settings(_cfg(*DATA, *MODEL, *near, "sampler.momentum=0")), net, 1)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_lr0_1e308_is_one_line_and_leaves_no_run_directory(tmp_path):
    process = train([*SMALL, "sampler.lr0=1e308"], tmp_path / "run", tmp_path, timeout=170)
    assert_one_line(process, 2, "error: sampler.lr0=1e+308 is not allowed", "float32")
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(120)
def test_a_run_refused_once_started_leaves_no_folder_hydra_made_for_it(tmp_path):
    # the data are checked as the run builds them, after Hydra made runs/<date>/<time>: all of it goes, and a
    # folder that was there before stays
    (tmp_path / "kept").mkdir()
    bad = ["data=custom", "data._target_=tests.own_components.flawed", "+data.flaw=int64", "trainer.epochs=1"]
    for run_dir in (tmp_path / "made" / "2026-11-27" / "10-00-00", tmp_path / "kept" / "2026-11-27" / "10-00-00"):
        process = train(bad, run_dir, tmp_path, timeout=110)
        assert_one_line(process, 2, "error: data._target_='tests.own_components.flawed' is not allowed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and not any((tmp_path / "kept").iterdir())


# -- models without trainable parameters, and logits that are not floating point -----------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("target, fragment", [
    ("frozen_net", "a model with trainable parameters (the sampler moves them): all its 67 parameters are frozen "
                   "(requires_grad=False)"),
    ("parameter_free", "a model with trainable parameters (the sampler moves them): it has none"),
    ("IntegerLogits", "a model whose outputs are floating-point logits: it gives torch.int64"),
])
def test_a_model_that_cannot_be_sampled_is_refused_before_training(tmp_path, target, fragment):
    error = _refused(tmp_path, *DATA, "model=custom", f"model._target_=tests.checks_components.{target}", *SHORT)
    assert error.key == "model._target_" and fragment in str(error), str(error)


# -- a last training batch of one meeting batch norm: refused, with a batch size that works -------------------------
@pytest.mark.timeout(60)
def test_a_last_batch_of_one_that_batch_norm_cannot_take_is_refused(tmp_path):
    error = _refused(tmp_path, *DATA, "data._target_=tests.checks_components.blobs_plus_one", "model=custom",
                     "model._target_=tests.checks_components.batchnorm_net", *SHORT)
    assert error.key == "data.batch_size" and error.value == 20
    assert "batch norm (1) sees one value per channel and example" in str(error)
    assert "41 training examples in batches of 20 leave a last batch of 1; e.g. data.batch_size=21" in str(error)


def test_batch_norm_is_checked_where_a_batch_of_one_would_reach_it():
    from csg.engine.job_checks import DataFacts
    from csg.engine.limits import check_model_fits, smallest_batch
    from csg.engine.settings import run_settings
    from tests.checks_components import batchnorm_net, conv_batchnorm_net

    cfg = run_settings(_cfg(*DATA, "model=custom", "model._target_=tests.checks_components.batchnorm_net"))
    check_model_fits(conv_batchnorm_net(3, (4,)), DataFacts("blobs", 41, 20, 3, (4,), 20), cfg)  # 4 values each
    check_model_fits(batchnorm_net(3, (4,)), DataFacts("blobs", 42, 20, 3, (4,), 20), cfg)  # a last batch of 2
    with pytest.raises(ConfigError, match="2 processes each taking a part of every batch"):
        check_model_fits(batchnorm_net(3, (4,)), DataFacts("blobs", 43, 20, 3, (4,), 20), cfg, processes=2)
    check_model_fits(batchnorm_net(3, (4,)), DataFacts("blobs", 43, 20, 3, (4,), 20), cfg, processes=2,
                     sync_batchnorm=True)  # statistics over both processes' parts
    assert [smallest_batch(n, 20, p) for n, p in ((41, 1), (40, 1), (43, 2), (44, 2), (5, 1))] == [1, 20, 1, 2, 5]


# -- memory: chains x (parameters + sampler state) against what the device has free ---------------------------------
@pytest.mark.timeout(60)
def test_chains_that_cannot_fit_are_refused_before_any_model_is_allocated(tmp_path, monkeypatch):
    import csg.engine.memory

    monkeypatch.setattr(csg.engine.memory, "available_bytes", lambda device: 10**9)  # 1 GB free, wherever
    error = _refused(tmp_path, *DATA, "model=mlp", *SHORT, "sampler.chains=100000")
    # mlp on 4 features: 82,003 parameters; SGHMC: parameters, gradients, momentum, 4 bytes each: 984 kB a chain
    assert error.key == "sampler.chains" and str(error) == (
        "sampler.chains=100000 is not allowed: at most 1016 on this machine: 100000 chains of a model of 82,003 "
        "parameters need at least 98.4 GB on cpu (parameters, gradients, sampler state), which has 1.0 GB free")


@pytest.mark.timeout(60)
def test_a_model_that_cannot_fit_is_refused_in_milliseconds(tmp_path):
    started = time.perf_counter()
    error = _refused(tmp_path, *DATA, "model=mlp", "model.hidden=[1000000,1000000]", *SHORT)
    assert error.key == "model.name" and "a model that fits in memory: 1 chain of a model of 1,000,009,000,003 " \
        "parameters needs at least 12.0 TB on cpu" in str(error)
    assert time.perf_counter() - started < 10  # counted on the meta device: nothing of 12 TB was allocated


def test_the_estimate_counts_the_trace_and_draws_no_random_number():
    from csg.engine.memory import chain_bytes, memory_problem, meta_model
    from tests.own_components import tiny_net

    torch.manual_seed(5), np.random.seed(5), random.seed(5)
    expected = torch.rand(1), np.random.rand(), random.random()
    torch.manual_seed(5), np.random.seed(5), random.seed(5)
    model = meta_model(lambda: tiny_net(3, (4,), hidden=8))
    assert (torch.rand(1), np.random.rand(), random.random()) == expected
    assert all(p.is_meta for p in model.parameters())
    assert chain_bytes(model, sampler_copies=1, trace_draws=10) == (67 * 4 * 3, 10 * 67 * 8)
    assert memory_problem(model, torch.device("cpu"), chains=2, sampler_copies=0,
                          available=lambda device: 1000) == (
        "2 chains of a model of 67 parameters need at least 1.1 kB on cpu (parameters, gradients), which has 1.0 kB "
        "free")
    assert memory_problem(model, torch.device("cpu"), chains=1, sampler_copies=0, trace_draws=100,
                          available=lambda device: 10_000) is not None  # the trace: 53.6 kB


# -- the collection plan in O(cycles) -------------------------------------------------------------------------------
def _brute_force(schedule, epochs: int, batches: int) -> dict[int, list[int]]:
    by_cycle: dict[int, list[int]] = {c: [] for c in range(schedule.cycles)}
    for epoch in range(epochs):
        last = (epoch + 1) * batches - 1
        if schedule.cycle(last) in by_cycle and schedule.sampling(last):
            by_cycle[schedule.cycle(last)].append(epoch)
    return by_cycle


def test_the_plan_is_the_per_epoch_rule_computed_per_cycle():
    from csg.schedules import eligible_epochs, first_sampling_iteration, sampling_iterations
    from csg.schedules import create_schedule

    rng = random.Random(0)
    for _ in range(400):
        kind = rng.choice(["cyclical", "cyclical", "decreasing", "constant", "step"])
        epochs, batches = rng.randint(2, 40), rng.randint(1, 7)
        total = epochs * batches
        cycles = rng.randint(1, total) if kind == "cyclical" else 1
        explore = rng.choice([0.0, 0.5, 0.8, 0.9, rng.random()])
        schedule = create_schedule(kind, lr0=0.5, total_steps=total, cycles=cycles, explore=explore, lr_final=0.01)
        plan = eligible_epochs(schedule, epochs, batches)
        assert {c: list(r) for c, r in plan.items()} == _brute_force(schedule, epochs, batches)
        burnin = rng.randint(0, total)
        assert sampling_iterations(schedule, burnin, total) == sum(map(schedule.sampling, range(burnin, total)))
        assert first_sampling_iteration(schedule, total) == next(
            (k for k in range(total) if schedule.sampling(k)), 0)


def test_a_plan_of_a_billion_epochs_takes_no_time_and_absurd_budgets_are_refused():
    from csg.engine.build import build_schedule, check_trace, plan_collection
    from csg.engine.settings import schedule_settings, trace_settings

    cfg = _cfg("trainer.epochs=1000000000", "trace.enabled=true")
    started = time.perf_counter()
    schedule = build_schedule(schedule_settings(cfg), 10**9 * 63)
    points = plan_collection(schedule_settings(cfg), schedule, 63)
    assert [p.epoch for p in points[:3]] == [249999997, 249999998, 249999999] and len(points) == 12
    assert check_trace(trace_settings(cfg), schedule, 10**9 * 63) == 4 * 63 * 10**9 // 4 // 5  # the last 20% of a cycle
    assert time.perf_counter() - started < 1
    with pytest.raises(ConfigError, match=r"trainer.epochs=10000000000000000 is not allowed: a budget of fewer "
                                          r"than 2\^53 iterations"):
        build_schedule(schedule_settings(_cfg("trainer.epochs=10000000000000000")), 10**16 * 63)


# -- hydra/launcher=slurm without SLURM ------------------------------------------------------------------------------
def test_the_slurm_launcher_needs_slurm_on_this_machine(tmp_path, monkeypatch):
    from csg.checks import check_command

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, no srun
    assert check_command(["-m", "hydra/launcher=slurm", "seed=0"], CONFIGS) == (
        "hydra/launcher=slurm is not allowed: a machine with SLURM's sbatch and srun on PATH (this one has none); "
        "leave hydra/launcher out to run the sweep's jobs here, one after another")
    assert check_command(["hydra/launcher=slurm", "seed=0"], CONFIGS) is None  # no -m: Hydra runs no launcher
    for client in ("sbatch", "srun"):
        (tmp_path / client).write_text("#!/bin/sh\n")
        (tmp_path / client).chmod(0o755)
    assert check_command(["-m", "hydra/launcher=slurm", "seed=0"], CONFIGS) is None
    scontrol = tmp_path / "scontrol"  # the controller's answer decides
    scontrol.write_text("#!/bin/sh\necho 'Slurmctld(primary) at head is DOWN'\nexit 1\n")
    scontrol.chmod(0o755)
    assert check_command(["-m", "hydra/launcher=slurm", "seed=0"], CONFIGS) == (
        "hydra/launcher=slurm is not allowed: a machine whose SLURM controller answers (scontrol ping: Slurmctld"
        "(primary) at head is DOWN); submit from a node of the cluster, or leave hydra/launcher out to run the "
        "sweep's jobs here")
    scontrol.write_text("#!/bin/sh\necho 'Slurmctld(primary) at head is UP'\n")
    assert check_command(["-m", "hydra/launcher=slurm", "seed=0"], CONFIGS) is None


@pytest.mark.parametrize("override, why", [
    ("sampler.lr0é=1", "Hydra's grammar stops at character 12, 'é'"),
    ("ключ=1", "Hydra's grammar stops at character 1, 'к'"),
    ("sampler.lr0=${oc.create:{a:1}}", "Hydra's grammar: extraneous input '}' expecting <EOF>"),
])
def test_an_override_hydras_grammar_cannot_read_is_one_line(override, why):
    from csg.checks import check_train_command

    assert check_train_command(["seed=1", override], CONFIGS) == (
        f"{override} is not allowed: an override in Hydra's grammar, key=value with a key of ASCII letters, digits "
        f"and _ . - / (a value Hydra cannot read goes in quotes: 'key=\"...\"'); {why}")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_slurm_launcher_without_slurm_is_one_line_before_hydra_starts(tmp_path):
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and not (Path(p) / "sbatch").exists())
    sweep = tmp_path / "sweep"
    process = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=slurm", *SMALL,
                              f"hydra.sweep.dir={sweep}"], cwd=tmp_path, capture_output=True, text=True,
                             env=_env(PATH=path), timeout=110)
    assert_one_line(process, 2, "error: hydra/launcher=slurm is not allowed: a machine with SLURM's sbatch")
    assert not sweep.exists()
