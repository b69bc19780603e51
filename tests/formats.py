"""Writers of small data sets in their real on-disk formats, for the loader tests."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np


def write_cifar(root: Path, *, hundred: bool = False, train_per_batch: int = 20, test: int = 16, seed: int = 0) -> Path:
    """cifar-10-batches-py/data_batch_1..5 + test_batch, or cifar-100-python/train + test, as pickled dicts."""
    rng = np.random.default_rng(seed)
    classes, label_key = (100, b"fine_labels") if hundred else (10, b"labels")
    folder = root / ("cifar-100-python" if hundred else "cifar-10-batches-py")
    folder.mkdir(parents=True, exist_ok=True)
    names = ["train"] if hundred else [f"data_batch_{i}" for i in range(1, 6)]
    for name, count in [(n, train_per_batch) for n in names] + [("test" if hundred else "test_batch", test)]:
        batch = {
            b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8),
            label_key: rng.integers(0, classes, count).tolist(),
            b"filenames": [f"img{i}.png".encode() for i in range(count)],
        }
        if hundred:
            batch[b"coarse_labels"] = rng.integers(0, 20, count).tolist()
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle)
    return folder


def write_idx(path: Path, array: np.ndarray) -> None:
    """An idx file (gzipped if the name ends in .gz)."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    data = header + array.astype(np.uint8).tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as handle:
        handle.write(data)


def write_mnist(folder: Path, *, train: int = 20, test: int = 10, gz: bool = False, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (train, 28, 28)),
        "train-labels-idx1-ubyte": np.arange(train) % 10,
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (test, 28, 28)),
        "t10k-labels-idx1-ubyte": np.arange(test) % 10,
    }
    for name, array in arrays.items():
        write_idx(folder / (name + (".gz" if gz else "")), array)
    return arrays


def write_image_folder(root: Path, classes=("n01440764", "n01443537"), per_class: int = 3, size: int = 40) -> Path:
    """An ImageFolder tree of small JPEGs: root/train/<class>/*.JPEG and root/val/<class>/*.JPEG."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for label in classes:
            (root / split / label).mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, (size, size + 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / label / f"{label}_{i}.JPEG", quality=90)
    return root


def write_stand_ins(root: Path) -> Path:
    """Small stand-ins, in their real formats, for every data set the docs' runnable blocks read from ``$CSG_DATA``
    (which cannot be downloaded here): CIFAR-10 and CIFAR-100 pickles, MNIST idx files, a notMNIST PNG tree and an
    ImageNet ImageFolder tree. Random pixels: the blocks check that the commands run, not what they learn."""
    from csg.data.notmnist import render_letters

    write_cifar(root, train_per_batch=4, test=8)  # a few images: the CIFAR ResNet-18 takes ~55 ms per image on a core
    write_cifar(root, hundred=True, train_per_batch=4, test=4)
    write_mnist(root / "MNIST" / "raw", train=100, test=20)
    render_letters(root / "notMNIST_small", per_letter=3)
    write_image_folder(root / "imagenet", per_class=1)
    return root
