"""SVHN (cropped digits, ``train_32x32.mat`` / ``test_32x32.mat``): an out-of-distribution set for CIFAR models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from csg.errors import DataNotFoundError

URL = "http://ufldl.stanford.edu/housenumbers/{}_32x32.mat"
MD5 = {"train": "e26dedcc434d2e4c54c9b2d4a06d8373", "test": "eb5a983be6a315427106f1b164d9cef3"}


def load_svhn(root: str, split: str = "test", download: bool = False) -> tuple[torch.Tensor, torch.Tensor, str]:
    """uint8 images (N, 3, 32, 32) and labels 0..9 (the file's label 10 is the digit 0)."""
    from scipy.io import loadmat

    path = Path(root).expanduser() / f"{split}_32x32.mat"
    if not path.exists() and download:
        from csg._torchvision_compat import ensure_torchvision

        try:
            ensure_torchvision().datasets.utils.download_url(URL.format(split), str(path.parent), path.name, MD5[split])
        except Exception:  # noqa: BLE001  (offline)
            pass
    if not path.exists():
        raise DataNotFoundError("ood.root", str(root), f"SVHN not found: expected {path}; set ood.download=true "
                                "where the network allows")
    mat = loadmat(path)
    images = torch.from_numpy(np.ascontiguousarray(mat["X"].transpose(3, 2, 0, 1), dtype=np.uint8))
    labels = torch.from_numpy(mat["y"].reshape(-1).astype(np.int64) % 10)
    return images, labels, f"SVHN {path}"
