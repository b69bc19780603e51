"""The full-scale posterior benchmark's pieces: Izmailov et al.'s ResNet-20-FRN and their public CIFAR-10 HMC
predictive converted to csg's reference format (studies/benchmark/izmailov.py), on files in their real formats."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from csg.errors import ConfigError
from csg.evaluation.reference_predictive import load_reference
from csg.models import create_model
from studies.benchmark.izmailov import convert, match_images
from tests.conftest import ROOT
from tests.formats import write_cifar


def test_resnet20_frn_is_the_reference_network_and_each_output_depends_on_its_input_alone():
    model = create_model("resnet20_frn", 10, input_shape=(3, 32, 32))
    assert sum(p.numel() for p in model.parameters()) == 274_042
    assert isinstance(model.stem[1], torch.nn.SiLU)  # swish, the reference's
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    model.train()   # no batch statistics: the same output in training mode, alone or in a batch
    assert torch.allclose(model(x)[:1], model(x[:1]), atol=1e-5)
    relu = create_model("resnet20_frn", 100, input_shape=(3, 32, 32), activation="relu")
    assert isinstance(relu.stem[1], torch.nn.ReLU) and relu(x).shape == (4, 100)
    with pytest.raises(ValueError, match="activation"):
        create_model("resnet20_frn", 10, input_shape=(3, 32, 32), activation="gelu")


def _their_files(tmp_path, images, labels, rng, shuffle=True, delimiter=" "):
    """The starter kit's files for ``images`` (N, 3, 32, 32 uint8): in another order, normalised per channel,
    channels last, as np.savetxt writes them; probs.csv comma-separated."""
    order = rng.permutation(len(images)) if shuffle else np.arange(len(images))
    x = images[order].astype(np.float32) / 255.0
    x = (x - np.array([0.49, 0.48, 0.45])[None, :, None, None]) / np.array([0.25, 0.24, 0.26])[None, :, None, None]
    np.savetxt(tmp_path / "cifar10_test_x.csv", x.transpose(0, 2, 3, 1).reshape(len(x), -1))
    np.savetxt(tmp_path / "cifar10_test_y.csv", labels[order])
    probs = rng.dirichlet(np.ones(10), len(images))
    np.savetxt(tmp_path / "probs.csv", probs, delimiter=delimiter)   # the kit's file: spaces
    return order, probs


def test_their_predictive_is_put_in_the_test_sets_order_and_read_as_a_reference(tmp_path):
    from csg.data.cifar import read_batches

    folder = write_cifar(tmp_path / "data", test=40)
    images, labels = (t.numpy() for t in read_batches([folder / "test_batch"], b"labels"))
    order, probs = _their_files(tmp_path, images, labels, np.random.default_rng(1), delimiter=",")
    out = tmp_path / "out" / "ref.npz"
    facts = convert(tmp_path / "probs.csv", tmp_path / "cifar10_test_x.csv", tmp_path / "cifar10_test_y.csv",
                    tmp_path / "data", out)
    reference = load_reference(out)
    assert np.allclose(reference.test_probs[order], probs, atol=1e-6)   # their row i is test image order[i]
    assert np.array_equal(reference.test_labels, labels) and reference.temperature == 1.0
    assert facts["images"] == 40 and facts["reordered"] > 30
    assert np.array_equal(match_images(images[order], images), order)


def test_a_label_or_an_image_that_does_not_match_is_one_line_and_nothing_is_written(tmp_path):
    from csg.data.cifar import read_batches

    folder = write_cifar(tmp_path / "data", test=30)
    images, labels = (t.numpy() for t in read_batches([folder / "test_batch"], b"labels"))
    rng = np.random.default_rng(2)
    _their_files(tmp_path, images, labels, rng)
    y = np.loadtxt(tmp_path / "cifar10_test_y.csv")
    y[3] = (y[3] + 1) % 10
    np.savetxt(tmp_path / "cifar10_test_y.csv", y)
    files = (tmp_path / "probs.csv", tmp_path / "cifar10_test_x.csv", tmp_path / "cifar10_test_y.csv")
    with pytest.raises(ConfigError, match="1 differ"):
        convert(*files, tmp_path / "data", tmp_path / "out.npz")
    other = images.copy()
    other[5] = rng.integers(0, 256, other[5].shape)   # their image 5 is not in the test set
    _their_files(tmp_path, other, labels, rng, shuffle=False)
    with pytest.raises(ConfigError, match="matches none") as refused:
        convert(*files, tmp_path / "data", tmp_path / "out.npz")
    assert "\n" not in str(refused.value) and not (tmp_path / "out.npz").exists()


def test_the_target_refuses_a_missing_file_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce.py"), "reference-cifar10", "--out",
                           str(tmp_path / "out"), "probs=nope.csv"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert done.returncode == 2 and len(errors) == 1 and "test_x" in errors[0], done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def _stand_in(tmp_path, seed: int):
    """CIFAR files (100 training images, 30 test images) in tmp_path/data and the starter kit's files for them,
    converted into a reference (tmp_path/ref.npz) whose num_data is the stand-in's 100, not their posterior's 50,000."""
    from csg.data.cifar import read_batches

    folder = write_cifar(tmp_path / "data", train_per_batch=20, test=30)
    images, labels = (t.numpy() for t in read_batches([folder / "test_batch"], b"labels"))
    _their_files(tmp_path, images, labels, np.random.default_rng(seed))
    reference = tmp_path / "ref.npz"
    convert(tmp_path / "probs.csv", tmp_path / "cifar10_test_x.csv", tmp_path / "cifar10_test_y.csv",
            tmp_path / "data", reference)
    with np.load(reference) as data:
        np.savez(reference, **{**{k: data[k] for k in data.files}, "num_data": np.int64(100)})
    return reference


@pytest.mark.slow
def test_train_py_samples_resnet20_frn_on_cifar_files_and_scores_it_against_a_converted_reference(run_train,
                                                                                               tmp_path):
    import json

    out = _stand_in(tmp_path, 3)
    process, run_dir = run_train("data=cifar10", f"data.root={tmp_path / 'data'}", "data.download=false",
                                 "model=resnet20_frn", "sampler=csghmc", "trainer.epochs=2", "sampler.cycles=1",
                                 "sampler.explore=0.5", "sampler.samples_per_cycle=1", "data.batch_size=50",
                                 "logger=none", "ood=none", f"evaluation.reference={out}")
    assert process.returncode == 0, process.stderr[-2000:]
    scores = json.loads((run_dir / "metrics.json").read_text())["reference"]["test"]
    assert 0 <= scores["agreement"] <= 1 and 0 < scores["total_variation"] < 1


@pytest.mark.slow
def test_the_full_scale_target_runs_every_contender_and_writes_the_table_with_the_papers_numbers(tmp_path):
    """make posterior-benchmark-cifar10 on CIFAR files and a converted starter-kit predictive in their real
    formats (100 training images, 30 test images, a few epochs: --out, so the header says it is not the protocol):
    every contender's row with agreement and TV, Izmailov et al.'s numbers beside ours, cSGHMC's verdicts."""
    reference = _stand_in(tmp_path, 4)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce.py"), "posterior-benchmark-cifar10",
                           "--out", str(out), "--runs", str(tmp_path / "runs"), "--seeds", "0,1", "--tune-factors", "1",
                           "--tune-seeds", "100",
                           f"data.root={tmp_path / 'data'}",
                           "data.download=false", f"evaluation.reference={reference}", "trainer.epochs=20",
                           "sampler.samples_per_cycle=1", "data.batch_size=50", "data.num_workers=0", "logger=none",
                           "model=mlp", "model.hidden=[8]"],   # ResNet-20-FRN's own run: the test above
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    import pandas as pd

    runs = pd.read_csv(out / "posterior_benchmark_cifar10_runs.csv")
    assert set(runs.method) == {"cSGHMC", "cSGLD", "SGHMC (constant step)", "SGLD (constant step)",
                                "cSGHMC, noise off (Snapshot-SGDM)", "cSGHMC x4", "Deep ensemble (4)"}
    assert len(runs) == 14 and runs.agreement.between(0, 1).all() and runs.total_variation.between(0, 1).all()
    text = (out / "posterior_benchmark_cifar10.md").read_text()
    assert "Not this table's protocol" in text
    assert "cSGHMC | Deep ensemble (4)" in text and "Missing runs" not in text
    assert "agreement, paper" not in text   # Izmailov et al.'s numbers are for their ResNet-20-FRN, not beside an MLP
    tuning = pd.read_csv(out / "posterior_benchmark_cifar10_tuning.csv")  # the stage ran first, on held-out images
    assert set(tuning.method) == {"csghmc", "csgld", "sghmc_constant", "sgld_constant", "csghmc_x4", "ensemble_x4"}
    assert tuning.picked.all() and tuning.edge.all() and "## The tuning stage" in text and "seeds 100 " in text
    assert len(list((tmp_path / "runs" / "tuning_stage").glob("*/*/*/metrics.json"))) == 6
    runs.assign(model="resnet20_frn").to_csv(tmp_path / "record.csv", index=False)   # as the real model's runs
    again = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce.py"), "posterior-benchmark-cifar10",
                            "--report-only", "--runs", str(tmp_path / "record.csv"), "--out", str(tmp_path / "again")],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    text = (tmp_path / "again" / "posterior_benchmark_cifar10.md").read_text()
    assert "agreement, paper" in text and "| 0.9152 |" in text   # their deep ensemble's agreement beside ours


def test_the_full_scale_target_refuses_a_missing_reference_in_one_line_before_any_run(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce.py"), "posterior-benchmark-cifar10",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(errors) == 1 and "evaluation.reference" in errors[0], done.stderr
    assert "make reference-cifar10" in errors[0] and not (tmp_path / "out").exists()
    assert not (tmp_path / "multirun").exists()


def test_on_slurm_each_run_of_the_full_scale_target_takes_one_gpu_and_its_quarter_budget_stays(monkeypatch, tmp_path):
    from studies.experiments import launch, sweeps, tables

    calls = []
    monkeypatch.setattr(launch, "_call", lambda command, what, runs: calls.append(command))
    spec = tables.TABLES["posterior_benchmark_cifar10"]
    launch.run_sweeps(spec.presets["full"], sweeps.expand(spec, "full", 200), tmp_path, "slurm", ["trainer.epochs=200"],
                      spec.processes, gpus_per_run=spec.gpus_per_run)
    assert len(calls) == 7   # one multirun a method: each its own tuned step
    for command in calls:
        assert "hydra.launcher.gpus_per_node=1" in command and "hydra.launcher.tasks_per_node=1" in command
    assert "trainer.epochs=50" in calls[5] and "trainer.epochs=200" not in calls[5]   # the 4 chains' quarter
    assert "trainer.epochs=200" in calls[0]


def test_a_budget_the_four_chain_rows_cannot_share_is_refused_in_one_line(tmp_path, monkeypatch):
    from studies.experiments.job import Job
    from studies.experiments.registry import TARGETS

    monkeypatch.chdir(tmp_path)
    reference = tmp_path / "ref.npz"
    reference.write_bytes(b"")
    job = Job(target="posterior-benchmark-cifar10", out=tmp_path / "out", out_given=True, scale="full",
              launcher="local", seeds=None, report_only=False, runs=None, preset=None,
              overrides=(f"evaluation.reference={reference}", "trainer.epochs=10"), add=(), stamp="now")
    with pytest.raises(ConfigError, match="a multiple of 4") as refused:
        TARGETS["posterior-benchmark-cifar10"].make(job)
    assert "trainer.epochs" in str(refused.value) and not (tmp_path / "out").exists()
