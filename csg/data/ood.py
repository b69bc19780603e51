"""Out-of-distribution test sets, served in the format of the in-distribution data.

``build_ood(name, like=bundle, ...)`` returns a loader of the OOD images,
normalised with the in-distribution data set's statistics (a model sees them
exactly as it sees its own test images): ``notmnist`` and ``fashion_mnist`` for
MNIST models, ``svhn`` for CIFAR models, ``none`` for no OOD evaluation.
"""

from __future__ import annotations

import torch

from csg.data.bundle import DataBundle, EpochBatches, InMemoryDataset, InMemoryLoader
from csg.errors import ConfigError

OOD_SETS = ("none", "notmnist", "fashion_mnist", "svhn")


def build_ood(name: str, *, like: DataBundle, root: str = "data", download: bool = False,
              batch_size: int = 1000, rank: int = 0, world_size: int = 1, **_: object) -> tuple[InMemoryLoader, str] | None:
    """The OOD loader and its source description, or None for ``none``."""
    if name == "none":
        return None
    if name == "notmnist":
        from csg.data.notmnist import load_notmnist

        images, labels, source = load_notmnist(root, download)
    elif name == "fashion_mnist":
        from csg.data.mnist import load_idx_split

        arrays, source = load_idx_split(root, "FashionMNIST", download, "FashionMNIST", "Fashion-MNIST")
        images = torch.from_numpy(arrays["test_images"].copy()).reshape(-1, 1, 28, 28)
        labels = torch.from_numpy(arrays["test_labels"].astype("int64"))
    elif name == "svhn":
        from csg.data.svhn import load_svhn

        images, labels, source = load_svhn(root, "test", download)
    else:
        raise ConfigError("ood.name", name, f"one of {', '.join(OOD_SETS)}")
    if like.normalize is None or tuple(images.shape[1:]) != tuple(like.input_shape):
        raise ConfigError(
            "ood", name,
            f"an image set shaped like data={like.name} {tuple(like.input_shape)}; {name} images are "
            f"{tuple(images.shape[1:])} (notmnist and fashion_mnist suit MNIST models, svhn CIFAR models)",
        )
    batches = EpochBatches(len(labels), batch_size, shuffle=False, rank=rank, world_size=world_size)
    return InMemoryLoader(InMemoryDataset(images, labels), batches, normalize=like.normalize), source
