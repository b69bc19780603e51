"""Files out of a Debian package: apt-get download, dpkg-deb, the members written atomically; Fashion-MNIST from
its package where torchvision's mirrors cannot be reached."""

from __future__ import annotations

import gzip
import io
import os
import stat
import struct
import tarfile
from types import SimpleNamespace

import numpy as np
import torch

from csg.data.debian import extract_member

MEMBER = "usr/lib/R/site-library/cba/data/Mushroom.rda"


def _tool(directory, name, script):
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _fake_debian(tmp_path, monkeypatch, download_fails=False, members=None):
    """apt-get and dpkg-deb stand-ins on PATH: the package's file system is a tar of ``members`` (path: bytes;
    default one member)."""
    tools = tmp_path / "bin"
    tools.mkdir(parents=True)
    tree = io.BytesIO()
    with tarfile.open(fileobj=tree, mode="w") as archive:
        for member, content in (members or {MEMBER: b"RDX3\n\x00\x01"}).items():
            info = tarfile.TarInfo(f"./{member}")
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    (tmp_path / "fs.tar").write_bytes(tree.getvalue())
    _tool(tools, "apt-get", "exit 100\n" if download_fails else 'test "$1" = download && touch "$2_1.0_amd64.deb"\n')
    _tool(tools, "dpkg-deb", f'test "$1" = --fsys-tarfile && cat "{tmp_path / "fs.tar"}"\n')
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")


def test_the_member_is_unpacked_to_the_target(tmp_path, monkeypatch):
    _fake_debian(tmp_path, monkeypatch)
    target = tmp_path / "data" / "Mushroom.rda"
    assert extract_member("r-cran-cba", MEMBER, target)
    assert target.read_bytes() == b"RDX3\n\x00\x01" and not list(target.parent.glob("*.partial"))
    assert not list(target.parent.glob(".*.tmp"))  # the atomic write left no temporary file


def test_a_failed_download_or_a_missing_member_leaves_nothing_behind(tmp_path, monkeypatch):
    target = tmp_path / "data" / "Mushroom.rda"
    target.parent.mkdir()
    _fake_debian(tmp_path / "missing", monkeypatch)
    assert not extract_member("r-cran-cba", "usr/share/absent", target)
    _fake_debian(tmp_path, monkeypatch, download_fails=True)
    assert not extract_member("r-cran-cba", MEMBER, target)
    assert list(target.parent.iterdir()) == []


def _idx_gz(array: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def test_fashion_mnist_comes_out_of_its_debian_package_offline(tmp_path, monkeypatch):
    """torchvision's download fails (no network): the four idx files of dataset-fashion-mnist, from one download."""
    import csg._torchvision_compat as compat
    from csg.data import build_data

    rng = np.random.default_rng(0)
    images = {"train": rng.integers(0, 256, (12, 28, 28)), "t10k": rng.integers(0, 256, (6, 28, 28))}
    labels = {"train": np.arange(12) % 10, "t10k": np.arange(6)}
    inside = "usr/share/datasets/fashion-mnist"
    members = {f"{inside}/{split}-{kind}-idx{dims}-ubyte.gz": _idx_gz(array)
               for split in ("train", "t10k")
               for kind, dims, array in (("images", 3, images[split]), ("labels", 1, labels[split]))}
    _fake_debian(tmp_path / "pkg", monkeypatch, members=members)

    def offline(*_, **__):
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz")

    monkeypatch.setattr("csg.data.mnist.INSTALLED_ROOT", tmp_path / "nothing_installed")
    monkeypatch.setattr(compat, "ensure_torchvision", lambda: SimpleNamespace(datasets=SimpleNamespace(FashionMNIST=offline)))
    data = build_data("fashion_mnist", root=str(tmp_path / "data"), download=True, batch_size=4, eval_batch_size=6)
    assert (data.num_train, data.num_test) == (12, 6)
    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(name.rsplit("/", 1)[1] for name in members)
    assert torch.equal(torch.cat([y for _, y in data.test]), torch.arange(6))
