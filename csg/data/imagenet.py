"""ImageNet (ILSVRC-2012) in the ImageFolder layout: ``root/train/<wnid>/*.JPEG`` and ``root/val/<wnid>/*.JPEG``.

The standard ResNet-50 transforms: RandomResizedCrop(224) and a horizontal flip
for training; Resize(256) and CenterCrop(224) for evaluation; the ImageNet
mean and standard deviation. There is no download: the data set needs an
account; a missing tree is a one-line error naming the path.
"""

from __future__ import annotations

from pathlib import Path

from csg.data.bundle import register_dataset
from csg.data.splits import Splits
from csg.errors import DataNotFoundError

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def transforms(train: bool, size: int = 224, resize: int = 256):
    from csg._torchvision_compat import ensure_torchvision

    T = ensure_torchvision().transforms
    steps = [T.RandomResizedCrop(size), T.RandomHorizontalFlip()] if train else [T.Resize(resize), T.CenterCrop(size)]
    return T.Compose(steps + [T.ToTensor(), T.Normalize(MEAN, STD)])


@register_dataset("imagenet")
def imagenet(root: str = "data/imagenet", size: int = 224, resize: int = 256, **_: object) -> Splits:
    from csg._torchvision_compat import ensure_torchvision

    folder = ensure_torchvision().datasets.ImageFolder
    base = Path(root).expanduser()
    for split in ("train", "val"):
        if not (base / split).is_dir():
            raise DataNotFoundError(
                "data.root", str(root),
                f"ImageNet not found: expected the ImageFolder tree {base / split}/<class>/<image>.JPEG "
                "(the data set cannot be downloaded without an account)",
            )
    train = folder(str(base / "train"), transform=transforms(True, size, resize))
    return Splits(
        train=train,
        test=folder(str(base / "val"), transform=transforms(False, size, resize)),
        train_eval=folder(str(base / "train"), transform=transforms(False, size, resize)),
        num_classes=len(train.classes),
        input_shape=(3, size, size),
        source=f"ImageFolder tree {base}",
    )
