"""Data sets: the embedded MNIST subset and full MNIST from idx files in torchvision's layout."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from csg.data import build_data, list_datasets
from csg.data.mnist import MNIST_MEAN, MNIST_STD, stratified_split
from csg.errors import ConfigError, DataNotFoundError


def test_mnist5k_is_a_fixed_stratified_split():
    data = build_data("mnist5k", batch_size=64, seed=0)
    assert (data.num_train, data.num_test, data.num_classes, data.input_shape) == (4000, 1000, 10, (1, 28, 28))
    assert len(data.train) == 63  # ceil(4000 / 64), the last batch partial as in the authors' code
    test_labels = torch.cat([y for _, y in data.test])
    assert torch.equal(torch.bincount(test_labels), torch.full((10,), 100))
    again = build_data("mnist5k", batch_size=64, seed=1)
    assert torch.equal(torch.cat([x for x, _ in data.test]), torch.cat([x for x, _ in again.test]))
    x, y = next(iter(data.train))
    assert x.shape == (64, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.long
    pixels = torch.cat([x for x, _ in data.train_eval])
    assert abs(pixels.mean().item()) < 0.1 and abs(pixels.std().item() - 1.0) < 0.1


def test_mnist5k_keeps_a_fixed_share_of_its_training_digits():
    """data.train_per_class: the first k training digits of every class, the same test set; bad values refused."""
    whole = build_data("mnist5k", batch_size=64)
    small = build_data("mnist5k", batch_size=64, train_per_class=20)
    labels = torch.cat([y for _, y in small.train_eval])
    assert small.num_train == 200 and torch.equal(torch.bincount(labels), torch.full((10,), 20))
    assert torch.equal(torch.cat([x for x, _ in small.test]), torch.cat([x for x, _ in whole.test]))
    images = {tuple(x.flatten().tolist()) for x, _ in ((x, None) for batch, _ in whole.train_eval for x in batch)}
    assert all(tuple(x.flatten().tolist()) in images for batch, _ in small.train_eval for x in batch)
    for bad in (0, 401, 2.5, True):
        with pytest.raises(ConfigError, match="data.train_per_class"):
            build_data("mnist5k", batch_size=64, train_per_class=bad)


def test_training_order_follows_the_seed():
    def first_labels(seed):
        data = build_data("mnist5k", batch_size=64, seed=seed)
        return next(iter(data.train))[1]

    assert torch.equal(first_labels(3), first_labels(3))
    assert not torch.equal(first_labels(3), first_labels(4))


def test_stratified_split_takes_the_same_count_from_every_class():
    labels = np.repeat(np.arange(3), 10)
    train, test = stratified_split(labels, test_per_class=4)
    assert np.bincount(labels[test]).tolist() == [4, 4, 4]
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(30))


def _write_idx(path, array):
    dims = array.shape
    code = 0x08  # unsigned byte
    with open(path, "wb") as handle:
        handle.write(struct.pack(">BBBB", 0, 0, code, len(dims)))
        handle.write(struct.pack(">" + "I" * len(dims), *dims))
        handle.write(array.astype(np.uint8).tobytes())


def test_full_mnist_reads_idx_files(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    images = {"train": rng.integers(0, 256, (20, 28, 28)), "t10k": rng.integers(0, 256, (10, 28, 28))}
    labels = {"train": np.arange(20) % 10, "t10k": np.arange(10)}
    for split in ("train", "t10k"):
        _write_idx(raw / f"{split}-images-idx3-ubyte", images[split])
        _write_idx(raw / f"{split}-labels-idx1-ubyte", labels[split])
    data = build_data("mnist", root=str(tmp_path), download=False, batch_size=8, eval_batch_size=4)
    assert (data.num_train, data.num_test, len(data.train), len(data.test)) == (20, 10, 3, 3)
    x = torch.cat([x for x, _ in data.test])
    y = torch.cat([y for _, y in data.test])
    expected = (torch.from_numpy(images["t10k"]).float() / 255 - MNIST_MEAN) / MNIST_STD
    assert torch.allclose(x[:, 0], expected) and y.tolist() == list(range(10))


def test_missing_mnist_names_the_expected_path(tmp_path):
    with pytest.raises(DataNotFoundError, match=str(tmp_path / "MNIST" / "raw")):
        build_data("mnist", root=str(tmp_path), download=False, batch_size=8)


def test_unknown_data_set():
    with pytest.raises(ConfigError, match="mnist5k"):
        build_data("cifar1000", batch_size=8)
    assert {"mnist", "mnist5k"} <= set(list_datasets())


def test_failed_download_is_a_one_line_data_error(tmp_path, monkeypatch):
    from csg._torchvision_compat import ensure_torchvision

    datasets = ensure_torchvision().datasets

    def offline(*args, **kwargs):
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz:\n<urlopen error>")

    monkeypatch.setattr(datasets, "MNIST", offline)
    with pytest.raises(DataNotFoundError) as error:
        build_data("mnist", root=str(tmp_path), download=True, batch_size=8)
    message = str(error.value)
    assert "\n" not in message and "download failed" in message and str(tmp_path / "MNIST" / "raw") in message


def test_epoch_batches_shard_and_skip_ahead():
    from csg.data.bundle import EpochBatches

    whole = EpochBatches(10, 4, shuffle=True, seed=3)
    shards = [EpochBatches(10, 4, shuffle=True, seed=3, rank=r, world_size=2) for r in (0, 1)]
    for (b, batch), (_, first), (_, second) in zip(whole.batches(5), shards[0].batches(5), shards[1].batches(5)):
        assert torch.equal(torch.cat([first, second]), batch) and whole.global_batch_size(b) == len(batch)
    assert [len(batch) for _, batch in whole.batches(5)] == [4, 4, 2]
    assert sorted(torch.cat([batch for _, batch in whole.batches(5)]).tolist()) == list(range(10))
    assert not torch.equal(whole.permutation(5), whole.permutation(6))  # a new order every epoch
    skipped = list(whole.batches(5, start_batch=1))
    assert [b for b, _ in skipped] == [1, 2] and torch.equal(skipped[0][1], list(whole.batches(5))[1][1])


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_unshuffled_batches_are_contiguous_slices_covering_every_example_once(world_size):
    from csg.data.bundle import EpochBatches

    shards = [EpochBatches(10, 4, shuffle=False, rank=r, world_size=world_size) for r in range(world_size)]
    covered = [list(range(10))[index] for shard in shards for _, index in shard.batches(0)]
    assert all(isinstance(index, slice) for shard in shards for _, index in shard.batches(0))
    by_batch = [sum((covered[r * 3 + b] for r in range(world_size)), []) for b in range(3)]
    assert by_batch == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_normalize_matches_the_textbook_formula():
    from csg.data.transforms import Normalize

    images = torch.randint(0, 256, (5, 3, 4, 4), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    expected = (images.float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    out = Normalize(mean, std)(images)
    assert out.dtype == torch.float32 and torch.allclose(out, expected, atol=1e-5)
    assert images.dtype == torch.uint8 and int(images.max()) > 1  # the input is left as it was


def test_augmented_batches_are_a_function_of_seed_epoch_and_batch(tmp_path):
    from tests.formats import write_cifar

    write_cifar(tmp_path, train_per_batch=10)
    data = build_data("cifar10", root=str(tmp_path), batch_size=16, device_resident=True, seed=7)
    data.train.set_epoch(2)
    from_start = [x for x, _ in data.train]
    data.train.set_epoch(2, start_batch=2)
    resumed = [x for x, _ in data.train]
    assert len(from_start) == 4 and len(resumed) == 2
    assert all(torch.equal(a, b) for a, b in zip(from_start[2:], resumed))
    data.train.set_epoch(3)
    assert not torch.equal(next(iter(data.train))[0], from_start[0])
