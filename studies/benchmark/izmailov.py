r"""The public HMC reference of Izmailov et al. (2021) for CIFAR-10, as a reference predictive csg reads.

Their starter kit (github.com/izmailovpavel/neurips_bdl_starter_kit, the NeurIPS 2021 approximate-inference
competition) releases ``data/cifar10/probs.csv``: the class probabilities (N x C, space-separated as ``np.savetxt``
writes them; commas are read too) of full-batch HMC on ResNet-20-FRN with swish activations (csg:
``model=resnet20_frn``) trained on all 50,000 CIFAR-10 training images at T = 1 without data augmentation, for the
10,000 test images in the order of their files ``cifar10_test_x.csv`` (one image a row: 32 x 32 x 3 floats,
channels last, normalised per channel; space-separated, as ``np.savetxt`` writes) and ``cifar10_test_y.csv`` (the
labels), both downloaded from their bucket as their README says.

csg evaluates CIFAR-10's python-pickle ``test_batch`` in its own order, which need not be theirs. :func:`convert`
matches each of their test images to csg's by content, each image and channel standardised (so that the
normalisation they applied does not matter), checks that the match is one-to-one, close to float precision and
that the labels agree, and writes the ``.npz`` that ``evaluation.reference=`` reads: ``test_probs`` in csg's order,
``test_labels``, ``temperature`` 1 and ``num_data`` 50,000 (the posterior their chains sampled). Any mismatch is a
one-line error naming the file, and nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from csg.errors import ConfigError

__all__ = ["MATCH_TOLERANCE", "convert", "match_images", "read_probs", "standardise"]

MATCH_TOLERANCE = 1e-3      # largest difference of two matched standardised images (float32 rounding is ~1e-5)
TEMPERATURE, NUM_DATA = 1.0, 50_000


def read_probs(path: Path) -> np.ndarray:
    """probs.csv: N x C probabilities, rows summing to 1, separated by spaces (as ``np.savetxt`` writes them, the
    starter kit's file) or commas."""
    import pandas as pd

    with open(path) as handle:
        comma = "," in handle.readline()
    probs = pd.read_csv(path, header=None, sep="," if comma else r"\s+", dtype=np.float64).to_numpy()
    if probs.ndim != 2 or not np.isfinite(probs).all() or not np.allclose(probs.sum(1), 1.0, atol=1e-3):
        raise ConfigError("probs", str(path), "an N x C table of class probabilities, rows summing to 1")
    return probs / probs.sum(1, keepdims=True)


def _read_table(path: Path, key: str) -> np.ndarray:
    import pandas as pd

    try:
        return pd.read_csv(path, header=None, sep=r"\s+", dtype=np.float64).to_numpy()
    except (OSError, ValueError) as error:
        raise ConfigError(key, str(path), f"a whitespace-separated numeric table ({error})") from None


def standardise(images: np.ndarray) -> np.ndarray:
    """(N, 3, H, W) images -> (N, 3 H W), each image's every channel shifted and scaled to mean 0 and sd 1."""
    flat = images.reshape(len(images), images.shape[1], -1).astype(np.float64)
    flat = flat - flat.mean(-1, keepdims=True)
    sd = flat.std(-1, keepdims=True)
    return (flat / np.where(sd > 0, sd, 1.0)).reshape(len(images), -1)


def match_images(theirs: np.ndarray, ours: np.ndarray, tolerance: float = MATCH_TOLERANCE) -> np.ndarray:
    """For each of ``theirs`` (N, 3, H, W), the index of the same image among ``ours`` (any normalisation of
    either): a permutation, or ``ValueError`` saying which image has no match or which images share one."""
    from scipy.spatial import cKDTree

    a, b = standardise(theirs), standardise(ours)
    projection = np.random.default_rng(0).standard_normal((a.shape[1], 24)) / np.sqrt(a.shape[1])
    _, index = cKDTree(b @ projection).query(a @ projection)
    distance = np.abs(a - b[index]).max(1)
    if (distance > tolerance).any():
        worst = int(distance.argmax())
        raise ValueError(f"their image {worst} matches none of the test set's (closest differs by "
                         f"{distance[worst]:.3g} after standardising)")
    if len(set(index.tolist())) != len(index):
        raise ValueError("two of their images match the same test image: the sets differ")
    return index


def convert(probs_csv: Path, test_x_csv: Path, test_y_csv: Path, data_root: Path, out: Path) -> dict:
    """Their probs.csv and test files -> ``out`` (.npz) in the order of CIFAR-10's test_batch under ``data_root``
    (module docstring); returns what was checked."""
    from csg.data.cifar import SETS, read_batches
    from csg.reporting import atomic_open

    probs = read_probs(probs_csv)
    x = _read_table(test_x_csv, "test_x")
    y = _read_table(test_y_csv, "test_y").reshape(-1).astype(np.int64)
    if len(x) != len(probs) or len(y) != len(probs) or x.shape[1] != 32 * 32 * 3:
        raise ConfigError("test_x", str(test_x_csv), f"{len(probs)} rows of 3072 values (32 x 32 x 3, channels last) "
                          f"and as many labels, one per row of probs.csv; got {x.shape} and {len(y)} labels")
    spec = SETS["cifar10"]
    folder = Path(data_root) / spec["folder"]
    if not (folder / spec["test"][0]).is_file():
        raise ConfigError("data.root", str(data_root), f"CIFAR-10's python-pickle batches ({folder / spec['test'][0]})")
    images, labels = read_batches([folder / spec["test"][0]], spec["label_key"])
    images, labels = images.numpy(), labels.numpy()
    if len(images) != len(probs):
        raise ConfigError("probs", str(probs_csv), f"one row per test image ({len(images)}); it has {len(probs)}")
    try:
        index = match_images(x.reshape(-1, 32, 32, 3).transpose(0, 3, 1, 2), images)
    except ValueError as error:
        raise ConfigError("test_x", str(test_x_csv), f"the CIFAR-10 test images of {folder}: {error}") from None
    if not np.array_equal(labels[index], y):
        wrong = int((labels[index] != y).sum())
        raise ConfigError("test_y", str(test_y_csv), f"the labels of the matched test images ({wrong} differ)")
    ordered = np.empty_like(probs)
    ordered[index] = probs
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(out) as handle:
        np.savez_compressed(handle, test_probs=ordered.astype(np.float32), test_labels=labels,
                            temperature=np.float64(TEMPERATURE), num_data=np.int64(NUM_DATA))
    return {"images": len(index), "reordered": int((index != np.arange(len(index))).sum()),
            "error_pct": float(100 * (ordered.argmax(1) != labels).mean())}
