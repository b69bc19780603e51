"""CIFAR-10 and CIFAR-100 from the standard python-pickle batches, read by the project's own reader.

Layout under ``root``: ``cifar-10-batches-py/data_batch_1..5`` and ``test_batch``;
``cifar-100-python/train`` and ``test`` (each a pickled dict with ``data``,
N x 3072 uint8 in channel-major order, and ``labels`` / ``fine_labels``). Any
well-formed copy loads: the MD5 sums are checked after a download (by
torchvision's ``download_and_extract_archive``), never on every load.
Training augmentation and normalisation as the authors' code: RandomCrop(32,
padding=4), RandomHorizontalFlip (``data.augment=false``: none), Normalize with the per-data-set mean and std.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from csg.data.bundle import register_dataset
from csg.data.splits import InMemoryDataset, Splits
from csg.data.transforms import Normalize
from csg.errors import DataNotFoundError

SETS = {
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "train": [f"data_batch_{i}" for i in range(1, 6)],
        "test": ["test_batch"],
        "label_key": b"labels",
        "classes": 10,
        "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "md5": "c58f30108f718f92721af3b95e74349a",
        "mean": (0.4914, 0.4822, 0.4465),
        "std": (0.2023, 0.1994, 0.2010),
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "train": ["train"],
        "test": ["test"],
        "label_key": b"fine_labels",
        "classes": 100,
        "url": "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        "md5": "eb9058c3a382ffc7106e4002c42a8d85",
        "mean": (0.5071, 0.4867, 0.4408),
        "std": (0.2675, 0.2565, 0.2761),
    },
}


def write_stand_in(root: str | Path, name: str = "cifar10", *, train: int = 50_000, test: int = 10_000,
                   seed: int = 0) -> Path:
    """Random uint8 images and labels as ``name``'s pickled batches under ``root`` (benchmarks, offline checks).

    The layout and format of the real files, so that the project's reader loads them as it loads CIFAR."""
    spec = SETS[name]
    folder = Path(root) / spec["folder"]
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    parts = [(f, n.size) for f, n in zip(spec["train"], np.array_split(np.arange(train), len(spec["train"])))]
    for file, count in parts + [(spec["test"][0], test)]:
        batch = {b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8),
                 spec["label_key"]: rng.integers(0, spec["classes"], count).tolist()}
        with open(folder / file, "wb") as handle:
            pickle.dump(batch, handle)
    return folder


def read_batches(paths: list[Path], label_key: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    """Pickled CIFAR batches -> uint8 images (N, 3, 32, 32) and int64 labels."""
    images, labels = [], []
    for path in paths:
        with open(path, "rb") as handle:
            batch = pickle.load(handle, encoding="bytes")
        images.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(batch[label_key], dtype=np.int64))
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def _load(name: str, root: str, download: bool, augment: bool = True) -> Splits:
    spec = SETS[name]
    folder = Path(root).expanduser() / spec["folder"]
    expected = [folder / f for f in spec["train"] + spec["test"]]
    if not all(path.exists() for path in expected) and download:
        from csg._torchvision_compat import ensure_torchvision

        try:
            ensure_torchvision().datasets.utils.download_and_extract_archive(
                spec["url"], str(folder.parent), md5=spec["md5"]
            )
        except Exception as error:  # noqa: BLE001  (offline, bad checksum)
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise DataNotFoundError("data.root", str(root), f"{name} download failed ({reason}); put the "
                                    f"python-pickle batches in {folder}") from None
    missing = [path.name for path in expected if not path.exists()]
    if missing:
        raise DataNotFoundError(
            "data.root", str(root),
            f"{name} not found: expected {', '.join(missing)} in {folder}; set data.download=true where the network allows",
        )
    train = read_batches([folder / f for f in spec["train"]], spec["label_key"])
    test = read_batches([folder / f for f in spec["test"]], spec["label_key"])
    return Splits(
        train=InMemoryDataset(*train),
        test=InMemoryDataset(*test),
        num_classes=spec["classes"],
        input_shape=(3, 32, 32),
        source=f"python-pickle batches in {folder}",
        normalize=Normalize(spec["mean"], spec["std"]),
        augment=bool(augment),
        padding=4,
    )


@register_dataset("cifar10")
def cifar10(root: str = "data", download: bool = False, augment: bool = True, **_: object) -> Splits:
    return _load("cifar10", root, download, augment)


@register_dataset("cifar100")
def cifar100(root: str = "data", download: bool = False, augment: bool = True, **_: object) -> Splits:
    return _load("cifar100", root, download, augment)
