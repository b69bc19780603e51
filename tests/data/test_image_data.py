"""Image data sets in their real formats: CIFAR pickles, MNIST idx(.gz), ImageFolder, notMNIST, SVHN;
augmentation semantics; out-of-distribution sets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from csg.data import build_data, build_ood
from csg.data.transforms import BatchAugment, Normalize
from csg.errors import ConfigError, DataNotFoundError
from tests.formats import write_cifar, write_image_folder, write_mnist


@pytest.mark.parametrize("resident", [True, False])
def test_cifar10_pickles_load_through_both_loader_paths(tmp_path, resident):
    write_cifar(tmp_path)
    data = build_data("cifar10", root=str(tmp_path), download=False, batch_size=32, eval_batch_size=8,
                      device_resident=resident, seed=0)
    assert (data.num_train, data.num_test, data.num_classes, data.input_shape) == (100, 16, 10, (3, 32, 32))
    assert len(data.train) == 4  # ceil(100 / 32)
    x, y = next(iter(data.train))
    assert x.shape == (32, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.long
    test_x = torch.cat([x for x, _ in data.test])
    assert test_x.shape == (16, 3, 32, 32)
    # evaluation images are only normalised: undo it and recover the stored pixels
    import pickle

    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "rb") as handle:
        raw = pickle.load(handle, encoding="bytes")[b"data"].reshape(-1, 3, 32, 32)
    mean, std = torch.tensor([0.4914, 0.4822, 0.4465]), torch.tensor([0.2023, 0.1994, 0.2010])
    recovered = (test_x * std[:, None, None] + mean[:, None, None]) * 255
    assert torch.allclose(recovered, torch.from_numpy(raw).float(), atol=1e-3)


@pytest.mark.parametrize("resident", [True, False])
def test_cifar_without_augmentation_trains_on_the_stored_images(tmp_path, resident):
    """data.augment=false (Izmailov et al.'s HMC posterior has none): a training batch is the stored images,
    normalised, on both loader paths; with augmentation some are cropped or flipped."""
    write_cifar(tmp_path)
    batches = {}
    for augment in (False, True):
        data = build_data("cifar10", root=str(tmp_path), download=False, batch_size=100, eval_batch_size=100,
                          device_resident=resident, seed=0, augment=augment)
        batches[augment] = next(iter(data.train))[0]
        plain = torch.cat([x for x, _ in data.train_eval])
    pixels = lambda x: {tuple(row.tolist()) for row in x.flatten(1).mul(1e3).round()}  # noqa: E731
    assert pixels(batches[False]) == pixels(plain)
    assert len(pixels(batches[True]) & pixels(plain)) < 50


def test_cifar100_reads_fine_labels(tmp_path):
    write_cifar(tmp_path, hundred=True, train_per_batch=30)
    data = build_data("cifar100", root=str(tmp_path), batch_size=10, device_resident=True)
    assert (data.num_train, data.num_classes) == (30, 100)


def test_missing_cifar_names_the_folder(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        build_data("cifar10", root=str(tmp_path), download=False, batch_size=8)
    message = str(error.value)
    assert str(tmp_path / "cifar-10-batches-py") in message and "data_batch_1" in message and "\n" not in message


def test_batch_augment_is_torchvision_crop_and_flip():
    from torchvision.transforms.v2 import functional  # csg's import guard is armed by conftest's imports

    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    identity = Normalize([0.0, 0.0, 0.0], [1 / 255] * 3)  # leaves pixel values as floats
    out = BatchAugment(identity, padding=4)(images, torch.Generator().manual_seed(0))
    padded = functional.pad(images, [4, 4, 4, 4])
    offsets, flips = [], 0
    for i in range(64):  # each output is some crop of the zero-padded image, maybe flipped
        match = None
        for dy in range(9):
            for dx in range(9):
                crop = padded[i, :, dy : dy + 32, dx : dx + 32].float()
                if torch.allclose(out[i], crop, atol=1e-3):
                    match = (dy, dx, False)
                elif torch.allclose(out[i], functional.horizontal_flip(crop), atol=1e-3):
                    match = (dy, dx, True)
            if match:
                break
        assert match is not None
        offsets.append(match[:2])
        flips += match[2]
    assert 16 <= flips <= 48 and len(set(offsets)) > 20


def test_mnist_idx_plain_and_gzipped(tmp_path):
    arrays = write_mnist(tmp_path / "MNIST" / "raw", gz=True)
    data = build_data("mnist", root=str(tmp_path), download=False, batch_size=8, eval_batch_size=4)
    x = torch.cat([x for x, _ in data.test])
    expected = (torch.from_numpy(arrays["t10k-images-idx3-ubyte"]).float() / 255 - 0.1307) / 0.3081
    assert torch.allclose(x[:, 0], expected, atol=1e-5)
    plain = tmp_path / "flat"
    write_mnist(plain, gz=False)  # files directly under root, like Debian's fashion-mnist package
    assert build_data("fashion_mnist", root=str(plain), batch_size=8).num_train == 20


def test_imagenet_folder_tree(tmp_path):
    write_image_folder(tmp_path)
    data = build_data("imagenet", root=str(tmp_path), size=32, resize=36, batch_size=4, eval_batch_size=4,
                      seed=0)
    assert (data.num_train, data.num_test, data.num_classes) == (6, 6, 2)
    x, y = next(iter(data.train))
    assert x.shape == (4, 3, 32, 32) and set(y.tolist()) <= {0, 1}
    with pytest.raises(DataNotFoundError, match="ImageFolder"):
        build_data("imagenet", root=str(tmp_path / "none"), batch_size=4)


def test_notmnist_tree_skips_unreadable_files(tmp_path):
    from csg.data.notmnist import load_notmnist, render_letters

    render_letters(tmp_path, per_letter=3)
    (tmp_path / "C" / "broken.png").write_bytes(b"not a png")
    images, labels, source = load_notmnist(str(tmp_path))
    assert images.shape == (30, 1, 28, 28) and images.dtype == torch.uint8
    assert torch.bincount(labels).tolist() == [3] * 10 and "1 unreadable skipped" in source
    assert images.float().mean() > 5  # letters were drawn


def test_svhn_mat_files(tmp_path):
    from scipy.io import savemat

    from csg.data.svhn import load_svhn

    x = np.random.default_rng(0).integers(0, 256, (32, 32, 3, 5), dtype=np.uint8)
    savemat(tmp_path / "test_32x32.mat", {"X": x, "y": np.array([[1], [10], [3], [10], [9]])})
    images, labels, _ = load_svhn(str(tmp_path))
    assert images.shape == (5, 3, 32, 32) and labels.tolist() == [1, 0, 3, 0, 9]
    assert torch.equal(images[2].permute(1, 2, 0), torch.from_numpy(x[..., 2]))


def test_ood_sets_are_served_like_the_in_distribution_data(tmp_path):
    from csg.data.notmnist import render_letters

    render_letters(tmp_path / "letters", per_letter=2)
    mnist = build_data("mnist5k", batch_size=64)
    loader, source = build_ood("notmnist", like=mnist, root=str(tmp_path / "letters"), batch_size=7)
    x = torch.cat([x for x, _ in loader])
    assert x.shape == (20, 1, 28, 28) and x.min() < -0.4  # MNIST-normalised: background (0) -> -0.42
    write_cifar(tmp_path / "c")
    cifar = build_data("cifar10", root=str(tmp_path / "c"), batch_size=8)
    with pytest.raises(ConfigError, match="shaped like data=cifar10"):
        build_ood("notmnist", like=cifar, root=str(tmp_path / "letters"))
    assert build_ood("none", like=mnist) is None
