"""train.py end to end: the embedded default run, and every bad input stopped before training."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


# The embedded default's run, its files and metrics: tests/test_demo.py (the 200 epochs of `make demo`).


def _assert_one_line_error(process, *fragments):
    assert process.returncode != 0
    assert "Traceback" not in process.stderr + process.stdout
    lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, process.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


BAD_INPUTS = {
    "unknown sampler": (["sampler=nuts"], ["sampler=nuts", "csghmc", "csgld", "snapshot_sgd"]),
    "unknown data": (["data=svhn2"], ["data=svhn2", "mnist5k"]),
    "unknown model": (["model=vit"], ["model=vit", "mlp"]),
    "unknown sampler in a sweep": (["-m", "sampler=csgld,nuts"], ["sampler=nuts"]),
    "zero lr0": (["sampler.lr0=0"], ["sampler.lr0=0", "> 0"]),
    "negative lr0": (["sampler.lr0=-0.1"], ["sampler.lr0=-0.1", "> 0"]),
    "zero epochs": (["trainer.epochs=0"], ["trainer.epochs=0", "positive integer"]),
    "fractional epochs": (["trainer.epochs=2.5"], ["trainer.epochs=2.5", "positive integer"]),
    "zero batch size": (["data.batch_size=0"], ["data.batch_size=0", "positive integer"]),
    "augment not a boolean": (["data=cifar10", "data.augment=maybe"], ["data.augment='maybe'", "true or false"]),
    "zero cycles": (["sampler.cycles=0"], ["sampler.cycles=0", "positive integer"]),
    "holdout of the whole split": (["data.holdout=1"], ["data.holdout=1", "(0, 1)"]),
    "explore of 1": (["sampler.explore=1.0"], ["sampler.explore=1.0", "[0, 1)"]),
    "negative explore": (["sampler.explore=-0.2"], ["sampler.explore=-0.2", "[0, 1)"]),
    "negative temperature": (["sampler.temperature=-1"], ["sampler.temperature=-1", ">= 0"]),
    "too many samples per cycle": (
        ["trainer.epochs=20", "sampler.samples_per_cycle=2"],
        ["sampler.samples_per_cycle=2", "1..1"],
    ),
    "unknown precision": (["trainer.precision=fp8"], ["trainer.precision='fp8'", "bf16-mixed"]),
    "negative seed": (["seed=-1"], ["seed=-1", "integer >= 0"]),
    "seed past int64": (["seed=18446744073709551616"], ["seed=18446744073709551616", "2^63 - 1"]),
    "unset environment variable": (["sampler.lr0=${oc.env:CSG_TEST_UNSET}"],
                                   ["sampler.lr0='${oc.env:CSG_TEST_UNSET}'", "CSG_TEST_UNSET", "resolve"]),
    "unknown resolver": (["sampler.lr0=${eval:1+1}"], ["sampler.lr0='${eval:1+1}'", "eval"]),
    "a value referring to itself": (["sampler.lr0=${sampler.lr0}"], ["sampler.lr0='${sampler.lr0}'", "Recursive"]),
    "logistic regression on ten classes": (["model=logreg"], ["model.name='logreg'", "binary", "10 classes"]),
    "missing CIFAR-10": (["data=cifar10", "data.root=/nonexistent", "data.download=false"],
                         ["data.root='/nonexistent'", "/nonexistent/cifar-10-batches-py", "data.download=true"]),
    "missing OOD set": (["ood=svhn", "ood.root=/nonexistent"], ["ood.root='/nonexistent'", "test_32x32.mat"]),
    "unknown model name": (["model.name=no_such_net"], ["model.name='no_such_net'", "timm model name"]),
    "unknown resume mode": (["trainer.checkpoint.resume=maybe"], ["trainer.checkpoint.resume='maybe'", "always",
                                                                   "never"]),
    "zero threads": (["trainer.threads=0"], ["trainer.threads=0", "positive integer"]),
    "more threads than cores": (["trainer.threads=100000"], ["trainer.threads=100000", "at most 8 x the"]),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_stops_before_training_with_one_line(run_train, case):
    args, fragments = BAD_INPUTS[case]
    process, run_dir = run_train(*args)
    _assert_one_line_error(process, *fragments)
    assert not (run_dir / "samples").exists() and not (run_dir / "epochs.csv").exists()


def test_missing_data_set_names_the_path(run_train, tmp_path):
    empty = tmp_path / "nowhere"
    process, run_dir = run_train("data=mnist", f"data.root={empty}", "data.download=false")
    _assert_one_line_error(process, "data.root", str(empty / "MNIST" / "raw"), "data.download=true")
    assert not (run_dir / "samples").exists()


def test_divergence_is_one_line_and_non_zero(run_train):
    process, run_dir = run_train("trainer.epochs=4", "sampler.cycles=1", "sampler.lr0=1e6",
                                 "sampler.samples_per_cycle=1", "trainer.log_every_n_steps=5")
    _assert_one_line_error(process, "loss became", "no sample had been written yet")
    assert not (run_dir / "metrics.json").exists()
    recorded = json.loads((run_dir / "diverged.json").read_text())  # a sweep's outcome: said in the run's folder
    assert recorded["error"] in process.stderr and recorded["epoch"] >= 1 and recorded["lr"] > 1e4


def test_harmonic_cycle_weights_re_evaluate_a_finished_run(run_train):
    from csg.posterior.evaluate import evaluate_run

    process, run_dir = run_train("trainer.epochs=8", "sampler.cycles=2", "sampler.explore=0.5",
                                 "sampler.samples_per_cycle=2", "logger=none")
    assert process.returncode == 0, process.stderr
    equal = json.loads((run_dir / "metrics.json").read_text())
    harmonic = evaluate_run(run_dir, ["evaluation.cycle_weights=harmonic"])
    assert (run_dir / "evaluation_harmonic.json").exists()
    weights = [s["weight"] for s in harmonic["per_sample"]]
    assert sum(weights) == pytest.approx(1.0)
    assert weights[0] == pytest.approx(weights[1]) and weights[2] == pytest.approx(weights[3])
    # per-sample metrics do not depend on the weights; the samples are the same files
    for a, b in zip(equal["per_sample"], harmonic["per_sample"]):
        assert a["file"] == b["file"] and a["nll"] == pytest.approx(b["nll"])
    again = evaluate_run(run_dir, ["evaluation.cycle_weights=equal"])
    assert again["ensemble"]["nll"] == pytest.approx(equal["ensemble"]["nll"])


def test_wandb_logger_runs_offline_without_an_account(run_train):
    pytest.importorskip("wandb", reason="wandb is not installed here (make install installs it)")
    process, run_dir = run_train("logger=wandb", "trainer.epochs=5", "sampler.cycles=1", "sampler.samples_per_cycle=1")
    assert process.returncode == 0, process.stderr
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_group_choices_are_checked_with_hydras_parsers():
    from pathlib import Path

    from csg.checks import check_group_choices

    configs = Path(__file__).resolve().parents[2] / "configs"
    assert check_group_choices(["sampler=csgld", "data=mnist5k", "seed=3"], configs) is None
    assert check_group_choices(["-m", "sampler=csgld,csghmc", "hydra/launcher=basic"], configs) is None
    assert check_group_choices(["--cfg", "job", "model=mlp"], configs) is None
    message = check_group_choices(["-m", "sampler=choice(sgld,hmc)"], configs)
    assert message.startswith("sampler=hmc is not allowed: one of contour_sghmc, csghmc")
    assert "logger=tensorboard" in check_group_choices(["logger=tensorboard"], configs)


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["synthetic=table4", "synthetic.steps=0"], ["synthetic.steps=0", "positive integer"]),
        (["synthetic=wang_mixture1d", "synthetic.cycles=1001"], ["synthetic.cycles=1001", "multiple of synthetic.chains=100"]),
        (["synthetic=tabel4"], ["synthetic=tabel4", "table4"]),
    ],
)
def test_bad_synthetic_study_input_is_one_line(run_train, args, fragments):
    process, _ = run_train(*args)
    _assert_one_line_error(process, *fragments)


def test_one_epoch_of_resnet18_on_cifar_format_files(run_train, tmp_path):
    from tests.formats import write_cifar

    write_cifar(tmp_path / "data", train_per_batch=8, test=8)
    process, run_dir = run_train("data=cifar10", f"data.root={tmp_path / 'data'}", "data.download=false",
                                 "model=resnet18", "trainer.epochs=1", "sampler.cycles=1", "sampler.explore=0",
                                 "sampler.samples_per_cycle=1", "data.batch_size=20", "logger=none")
    assert process.returncode == 0, process.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["model"] == "resnet18" and metrics["data"] == "cifar10" and metrics["num_data"] == 40
    assert metrics["gradient_evaluations"] == 2 and metrics["ensemble"]["num_samples"] == 1
    assert "python-pickle" in metrics["data_source"]


def test_out_of_distribution_metrics_through_train_py(run_train, tmp_path):
    from csg.data.notmnist import render_letters

    render_letters(tmp_path / "letters", per_letter=20)
    process, run_dir = run_train("ood=notmnist", f"ood.root={tmp_path / 'letters'}", "trainer.epochs=8",
                                 "sampler.cycles=2", "sampler.samples_per_cycle=1", "logger=none")
    assert process.returncode == 0, process.stderr
    ood = json.loads((run_dir / "metrics.json").read_text())["ood"]
    assert ood["name"] == "notmnist" and len(ood["entropy_grid"]) == len(ood["ensemble"]["entropy_ecdf"]) == 101
    assert 0.5 < ood["ensemble"]["auroc"] <= 1.0 and len(ood["per_sample"]) == 2
    ecdf = ood["ensemble"]["entropy_ecdf"]
    assert all(a <= b for a, b in zip(ecdf, ecdf[1:])) and ecdf[-1] == 1.0
    # letters are more uncertain than digits: mean entropy on the OOD set above the in-distribution one
    assert ood["ensemble"]["entropy_mean"] > ood["ensemble"]["entropy_mean_in_distribution"]
    assert "OOD (notmnist)" in process.stdout


def test_cyclical_swag_evaluates_draws_from_each_cycles_gaussian(run_train):
    process, run_dir = run_train("sampler=cycswag", "trainer.epochs=8", "sampler.cycles=2", "sampler.explore=0.5",
                                 "sampler.samples_per_cycle=2", "sampler.swag.draws_per_cycle=3", "logger=none")
    assert process.returncode == 0, process.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["ensemble"]["num_samples"] == 6 and metrics["swag"]["snapshots"] == 4
    assert [s["file"] for s in metrics["per_sample"]][:2] == ["swag_chain00_cycle00_draw00", "swag_chain00_cycle00_draw01"]
    assert metrics["ensemble"]["test_error_pct"] < 20


def test_swag_needs_two_snapshots_per_cycle(run_train):
    process, _ = run_train("sampler=cycswag", "sampler.samples_per_cycle=1")
    assert process.returncode == 2 and process.stderr.strip().splitlines()[-1].startswith(
        "error: sampler.samples_per_cycle=1 is not allowed: >= 2 with sampler.swag")


def test_csg_extra_overrides_are_appended_to_every_command(tmp_path):
    # the docs' runnable blocks get small budgets this way (tests/launch/test_docs_run.py): the last value wins
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "HYDRA_"))}
    env["CSG_EXTRA_OVERRIDES"] = "trainer.epochs=0"
    process = subprocess.run([sys.executable, str(ROOT / "train.py"), "trainer.epochs=3"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    _assert_one_line_error(process, "trainer.epochs=0 is not allowed: a positive integer")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("value, fragments", [
    ("--multirun", ["CSG_EXTRA_OVERRIDES='--multirun'", "key=value overrides only"]),
    ("trainer.epochs='2", ["CSG_EXTRA_OVERRIDES=", "No closing quotation"]),
    ("trainer.epochs=2 seed", ["'seed' is not one"]),
])
def test_extra_overrides_in_the_environment_are_key_value_words_only(tmp_path, value, fragments):
    """CSG_EXTRA_OVERRIDES appends overrides to every command: a flag there would silently turn a run into a sweep,
    an unbalanced quote was a traceback (issue 74); both are one line, before anything is written."""
    env = {**os.environ, "CSG_EXTRA_OVERRIDES": value}
    process = subprocess.run([sys.executable, str(ROOT / "train.py"), "trainer.epochs=1",
                              f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)
    _assert_one_line_error(process, *fragments)
    assert process.returncode == 2 and list(tmp_path.iterdir()) == []
