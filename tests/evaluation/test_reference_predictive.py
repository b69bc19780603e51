"""A reference posterior predictive: agreement and total variation on constructed predictives, the file read as data
(every bad file one line naming the key), and a run scored against one: by train.py, scripts/evaluate_run.py
--reference and csg.Posterior.evaluate(reference=...), a reference of other inputs refused before training."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from csg.errors import ConfigError
from csg.evaluation.reference_predictive import load_reference, score_predictive
from tests.conftest import ROOT, assert_one_line, train


def _write(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


def _random_probs(rng, rows: int, classes: int) -> np.ndarray:
    p = rng.gamma(0.5, size=(rows, classes))
    return p / p.sum(1, keepdims=True)


def test_agreement_and_total_variation_on_constructed_predictives(tmp_path):
    rng = np.random.default_rng(0)
    reference_probs = _random_probs(rng, 200, 5)
    labels = rng.integers(0, 5, 200)
    reference = load_reference(_write(tmp_path / "r.npz", test_probs=reference_probs, test_labels=labels))
    assert reference.test_probs.dtype == np.float64 and reference.ood_probs is None
    same = score_predictive(reference_probs, reference)["test"]
    assert same["agreement"] == 1.0 and same["total_variation"] < 1e-12
    # each row's mass moved to another class: TV is 1 - the mass they share, and no arg-max agrees
    one_hot = np.eye(5)[reference_probs.argmax(1)]
    moved = np.roll(one_hot, 1, axis=1)
    expected_tv = np.mean(1.0 - np.minimum(moved, reference_probs).sum(1))
    scores = score_predictive(moved, reference)["test"]
    assert scores["agreement"] == 0.0 and scores["total_variation"] == pytest.approx(expected_tv, abs=1e-12)
    # a mixture (1 - e) p* + e q: TV is exactly e TV(p*, q); the first 50 rows flipped to another class
    q = _random_probs(rng, 200, 5)
    mixed = 0.7 * reference_probs + 0.3 * q
    expected = 0.3 * np.mean(0.5 * np.abs(reference_probs - q).sum(1))
    assert score_predictive(mixed, reference)["test"]["total_variation"] == pytest.approx(expected, abs=1e-12)
    flipped = reference_probs.copy()
    flipped[:50] = moved[:50]
    assert score_predictive(flipped, reference)["test"]["agreement"] == pytest.approx(150 / 200)
    # torch tensors are read like arrays; OOD scored only where both sides have it
    with_ood = load_reference(_write(tmp_path / "o.npz", test_probs=reference_probs, test_labels=labels,
                                     ood_probs=q.astype(np.float32)))
    both = score_predictive(torch.from_numpy(reference_probs), with_ood, torch.from_numpy(q))
    assert both["ood"]["agreement"] == 1.0 and both["ood"]["total_variation"] < 1e-6
    assert "ood" not in score_predictive(reference_probs, with_ood)


@pytest.mark.parametrize("arrays, fragment", [
    ({"test_probs": np.full((4, 3), 1 / 3)}, "it lacks test_labels"),
    ({"test_probs": np.full((4, 3), 1 / 3), "test_labels": np.zeros(3, int)}, "4 integers"),
    ({"test_probs": np.full((4, 3), 0.5), "test_labels": np.zeros(4, int)}, "rows sum to 1"),
    ({"test_probs": np.full((4, 3), np.nan), "test_labels": np.zeros(4, int)}, "finite and >= 0"),
    ({"test_probs": np.zeros((4, 3), int), "test_labels": np.zeros(4, int)}, "a float array"),
    ({"test_probs": np.full((4, 3), 1 / 3), "test_labels": np.full(4, 3)}, "lie in [0, 2]"),
    ({"test_probs": np.full((4, 3), 1 / 3), "test_labels": np.zeros(4, int), "ood_probs": np.full((2, 2), 0.5)},
     "test_probs' 3 classes"),
])
def test_bad_reference_files_are_one_line_refusals(tmp_path, arrays, fragment):
    path = _write(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ConfigError) as refused:
        load_reference(path)
    assert "evaluation.reference" in str(refused.value) and fragment in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_pickled_reference_is_refused_unread(tmp_path):
    """An object array needs pickle to load: refused, and the pickle never runs."""
    marker = tmp_path / "ran"

    class Planted:
        def __reduce__(self):
            return (Path.touch, (marker,))

    path = tmp_path / "planted.npz"
    np.savez(path, test_probs=np.array([Planted()], dtype=object), test_labels=np.zeros(1, int))
    with pytest.raises(ConfigError, match="without pickled objects"):
        load_reference(path)
    with pytest.raises(ConfigError, match="an existing .npz"):
        load_reference(tmp_path / "missing.npz")
    assert not marker.exists()


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory):
    """A tiny run on 7 x 7 digits (model.pool=4, 20 per class) and a reference of its own predictive."""
    root = tmp_path_factory.mktemp("reference")
    args = ["trainer.epochs=4", "sampler.cycles=2", "sampler.explore=0.5", "sampler.samples_per_cycle=1",
            "model.hidden=[8]", "model.pool=4", "data.train_per_class=20", "logger=none", "trainer.device=cpu"]
    process = train(args, root / "run", root)
    assert process.returncode == 0, process.stderr
    from csg.posterior import Posterior

    posterior = Posterior.load(root / "run", device="cpu")
    assert posterior.data.num_train == 200 and isinstance(posterior.model[0], torch.nn.AvgPool2d)
    assert posterior.model[2].in_features == 49  # 28 x 28 averaged over 4 x 4 blocks
    probs = posterior.predict_loader(posterior.data.test).numpy()
    labels = torch.cat([y for _, y in posterior.data.test]).numpy()
    return root, args, posterior, probs, labels


def test_a_run_is_scored_by_train_evaluate_and_the_posterior(scored_run, tmp_path):
    root, args, posterior, probs, labels = scored_run
    own = _write(tmp_path / "own.npz", test_probs=probs, test_labels=labels)
    uniform = _write(tmp_path / "uniform.npz", test_probs=np.full_like(probs, 0.1), test_labels=labels)
    metrics = posterior.evaluate(reference=own)
    assert metrics["reference_agreement"] == 1.0 and metrics["reference_tv"] < 1e-6
    expected = np.mean(0.5 * np.abs(probs - 0.1).sum(1))
    assert posterior.evaluate(reference=uniform)["reference_tv"] == pytest.approx(expected, rel=1e-5)
    # the same run trained with the key: metrics.json holds the scores and the file's hash
    process = train([*args, f"evaluation.reference={own}"], tmp_path / "again", tmp_path)
    assert process.returncode == 0, process.stderr
    saved = json.loads((tmp_path / "again" / "metrics.json").read_text())["reference"]
    assert saved["test"]["agreement"] == 1.0 and len(saved["sha256"]) == 64
    # evaluate_run --reference writes it into the evaluation file and prints it
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "evaluate_run.py"), str(root / "run"),
                           "--reference", str(uniform)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "against the reference uniform.npz: test agreement" in done.stdout
    written = json.loads((root / "run" / "evaluation_equal.json").read_text())["reference"]["test"]
    assert written["total_variation"] == pytest.approx(expected, rel=1e-5)


def test_a_reference_of_other_inputs_is_refused_before_training(scored_run, tmp_path):
    root, args, _, probs, labels = scored_run
    shuffled = _write(tmp_path / "shuffled.npz", test_probs=probs, test_labels=np.roll(labels, 1))
    process = train([*args, f"evaluation.reference={shuffled}"], tmp_path / "refused", tmp_path)
    assert_one_line(process, 2, "evaluation.reference", "test labels differ from the run's")
    assert not (tmp_path / "refused" / "samples").exists() and not (tmp_path / "refused" / "metrics.json").exists()
    short = _write(tmp_path / "short.npz", test_probs=probs[:10], test_labels=labels[:10])
    process = train([*args, f"evaluation.reference={short}"], tmp_path / "refused2", tmp_path)
    assert_one_line(process, 2, "evaluation.reference", "has 10 inputs, the run's 1000")
    missing = train([*args, f"evaluation.reference={tmp_path / 'nope.npz'}"], tmp_path / "refused3", tmp_path)
    assert_one_line(missing, 2, "evaluation.reference", "an existing .npz")
    assert not (tmp_path / "refused3").exists()
