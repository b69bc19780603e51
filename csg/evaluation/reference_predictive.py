r"""A reference posterior predictive, read as data, and a method's distance from it.

The field's yardstick for a Bayesian neural network's sampler (Izmailov et al. 2021, "What are Bayesian neural
network posteriors really like?", Section 6; the NeurIPS 2021 approximate-inference competition built on it) is
how close its predictive distribution :math:`\hat p(c \mid x)` comes to that of long full-batch HMC,
:math:`p^*(c \mid x)`, on the same inputs:

- top-1 agreement: :math:`\frac1n \sum_x 1[\arg\max_c \hat p(c \mid x) = \arg\max_c p^*(c \mid x)]`;
- total variation: :math:`\frac1n \sum_x \tfrac12 \sum_c |\hat p(c \mid x) - p^*(c \mid x)|`

(:mod:`csg.evaluation.posterior_distance`), on the test inputs and, where the reference has them, on
out-of-distribution inputs.

A reference file is a NumPy ``.npz`` archive (read with ``allow_pickle=False``: nothing in it is executed) of

- ``test_probs``: (n, classes) float probabilities, in the order of the run's test set;
- ``test_labels``: (n,) integers, that test set's labels, which must equal the run's (the check that the reference
  was made on the same inputs, in the same order);
- optionally ``ood_probs``: (m, classes), on the run's OOD set in its order.

``make reference-network`` writes one (:mod:`studies.benchmark.reference`); any file of that form (e.g. the
public HMC predictive of Izmailov et al. converted to it) serves.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from csg.errors import ConfigError
from csg.evaluation.posterior_distance import as_array, predictive_agreement, predictive_total_variation

__all__ = ["MAX_BYTES", "ReferencePredictive", "check_run_reference", "flat_scores", "load_reference",
           "score_predictive", "score_result"]

MAX_BYTES = 512 * 2**20   # a CIFAR-10 test set's probabilities in float64 are 0.8 MB; 512 MB is far beyond any
ROW_SUM_TOLERANCE = 1e-3  # float16 / float32 files: rows sum to 1 within this


@dataclass(frozen=True)
class ReferencePredictive:
    """A reference's probabilities (float64), the labels it was made for, and the file's SHA-256."""

    test_probs: np.ndarray
    test_labels: np.ndarray
    ood_probs: np.ndarray | None
    sha256: str
    path: str
    temperature: float | None = None  # what the file says it is a reference of, where it says (csg's own do)
    num_data: int | None = None

    def check_labels(self, labels: Any, key: str = "evaluation.reference") -> None:
        """Refuse (one line naming ``key``) unless ``labels`` are the reference's test labels, in its order."""
        labels = np.asarray(as_array(labels), dtype=np.int64)
        if labels.shape != self.test_labels.shape or not np.array_equal(labels, self.test_labels):
            mismatch = (f"its test set has {len(self.test_labels)} inputs, the run's {len(labels)}"
                        if labels.shape != self.test_labels.shape else
                        f"{int(np.sum(labels != self.test_labels))} of its {len(labels)} test labels differ from the run's")
            raise ConfigError(key, self.path, f"a reference made on the run's test set, in its order ({mismatch})")


def _checked(name: str, array: np.ndarray, path: str, key: str) -> np.ndarray:
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] < 2 or not np.issubdtype(array.dtype, np.floating):
        raise ConfigError(key, path, f"an .npz whose {name} is a float array (inputs, classes >= 2); it is "
                                     f"{array.dtype} {tuple(array.shape)}")
    probs = array.astype(np.float64)
    if not np.all(np.isfinite(probs)) or probs.min() < 0:
        raise ConfigError(key, path, f"an .npz whose {name} are finite and >= 0")
    worst = float(np.max(np.abs(probs.sum(1) - 1.0)))
    if worst > ROW_SUM_TOLERANCE:
        raise ConfigError(key, path, f"an .npz whose {name} rows sum to 1 (within {ROW_SUM_TOLERANCE}; one is off "
                                     f"by {worst:.3g})")
    return probs / probs.sum(1, keepdims=True)


def load_reference(path: str | Path, key: str = "evaluation.reference") -> ReferencePredictive:
    """Read and check a reference file; every problem is a one-line :class:`~csg.errors.ConfigError` naming ``key``."""
    path = Path(path)
    shown = str(path)
    if not path.is_file():
        raise ConfigError(key, shown, "an existing .npz file of reference probabilities (make reference-network "
                                      "writes one)")
    if path.stat().st_size > MAX_BYTES:
        raise ConfigError(key, shown, f"a reference file of at most {MAX_BYTES // 2**20} MB")
    content = path.read_bytes()
    try:
        import io

        with np.load(io.BytesIO(content), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError) as error:
        raise ConfigError(key, shown, f"a NumPy .npz archive without pickled objects ({error})") from None
    missing = [name for name in ("test_probs", "test_labels") if name not in arrays]
    if missing:
        raise ConfigError(key, shown, f"an .npz with test_probs and test_labels (it lacks {', '.join(missing)}; "
                                      f"it has {', '.join(sorted(arrays)) or 'nothing'})")
    test = _checked("test_probs", arrays["test_probs"], shown, key)
    labels = arrays["test_labels"]
    if labels.shape != (test.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ConfigError(key, shown, f"an .npz whose test_labels are {test.shape[0]} integers (one per row of "
                                      f"test_probs); they are {labels.dtype} {tuple(labels.shape)}")
    if labels.min() < 0 or labels.max() >= test.shape[1]:
        raise ConfigError(key, shown, f"an .npz whose test_labels lie in [0, {test.shape[1] - 1}]")
    ood = None
    if "ood_probs" in arrays:
        ood = _checked("ood_probs", arrays["ood_probs"], shown, key)
        if ood.shape[1] != test.shape[1]:
            raise ConfigError(key, shown, f"an .npz whose ood_probs have test_probs' {test.shape[1]} classes")
    facts = {}
    for name, kind in (("temperature", float), ("num_data", int)):
        if name in arrays:
            value = arrays[name]
            if value.shape != () or not np.issubdtype(value.dtype, np.number) or not np.isfinite(value):
                raise ConfigError(key, shown, f"an .npz whose {name}, where given, is one finite number")
            facts[name] = kind(value)
    return ReferencePredictive(test, labels.astype(np.int64), ood, hashlib.sha256(content).hexdigest(), shown, **facts)


def score_predictive(test_probs: Any, reference: ReferencePredictive, ood_probs: Any = None,
                     key: str = "evaluation.reference") -> dict[str, Any]:
    """Agreement and total variation of a predictive with the reference's, on the test inputs and (where both have
    them) the OOD inputs: ``{"test": {"agreement", "total_variation"}, "ood": {...}, "file", "sha256",
    "temperature"}``; a predictive of another shape is a one-line error naming ``key``."""
    test_probs = as_array(test_probs)
    if test_probs.shape != reference.test_probs.shape:
        raise ConfigError(key, reference.path,
                          f"a reference shaped like the run's test predictive {tuple(test_probs.shape)}; it is "
                          f"{tuple(reference.test_probs.shape)}")
    scores: dict[str, Any] = {"file": reference.path, "sha256": reference.sha256, "temperature": reference.temperature,
                              "test": {
        "agreement": predictive_agreement(test_probs, reference.test_probs),
        "total_variation": predictive_total_variation(test_probs, reference.test_probs)}}
    if ood_probs is not None and reference.ood_probs is not None:
        ood_probs = as_array(ood_probs)
        if ood_probs.shape != reference.ood_probs.shape:
            raise ConfigError(key, reference.path,
                              f"a reference whose ood_probs are shaped like the run's OOD predictive "
                              f"{tuple(ood_probs.shape)}; they are {tuple(reference.ood_probs.shape)}")
        scores["ood"] = {"agreement": predictive_agreement(ood_probs, reference.ood_probs),
                         "total_variation": predictive_total_variation(ood_probs, reference.ood_probs)}
    return scores


def check_run_reference(path: str | None, test_loader: Any, num_train: int | None = None) -> None:
    """Before training: a reference (``evaluation.reference``) made on this run's test set, in its order, and (where
    the file records its training-set size) for a posterior of as many training examples. The labels come from the
    loader's tensors where it holds them (csg's in-memory sets), else from one pass over it."""
    if path is None:
        return
    reference = load_reference(path)
    if reference.num_data is not None and num_train is not None and reference.num_data != num_train:
        raise ConfigError("evaluation.reference", reference.path, f"a reference of this run's posterior (it was made "
                          f"on {reference.num_data} training examples, the run has {num_train})")
    tensors = getattr(getattr(test_loader, "dataset", None), "tensors", None)
    if tensors is not None and len(tensors) == 2:
        labels = tensors[1]
    else:
        import torch

        labels = torch.cat([batch[1].reshape(-1).cpu() for batch in test_loader])
    reference.check_labels(labels)


def score_result(result: Any, reference: "str | Path | ReferencePredictive",
                 key: str = "evaluation.reference") -> dict[str, Any]:
    """:func:`score_predictive` of an :class:`~csg.evaluation.ensemble.EnsembleResult`: its averaged test and OOD
    probabilities, its labels checked against the reference's (a path is read first); errors name ``key``."""
    if not isinstance(reference, ReferencePredictive):
        reference = load_reference(reference, key=key)
    reference.check_labels(result.targets, key=key)
    return score_predictive(result.probs, reference, result.ood_probs, key=key)


def flat_scores(scores: dict[str, Any]) -> dict[str, float]:
    """:func:`score_predictive`'s scores as :meth:`csg.Posterior.evaluate` gives them: ``reference_agreement``,
    ``reference_tv`` and, with OOD inputs on both sides, ``ood_reference_agreement``, ``ood_reference_tv``."""
    flat = {"reference_agreement": scores["test"]["agreement"], "reference_tv": scores["test"]["total_variation"]}
    if "ood" in scores:
        flat.update(ood_reference_agreement=scores["ood"]["agreement"], ood_reference_tv=scores["ood"]["total_variation"])
    return flat
