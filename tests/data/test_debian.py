"""One file out of a Debian package: apt-get download, dpkg-deb, the member written atomically."""

from __future__ import annotations

import io
import os
import stat
import tarfile

from csg.data.debian import extract_member

MEMBER = "usr/lib/R/site-library/cba/data/Mushroom.rda"


def _tool(directory, name, script):
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _fake_debian(tmp_path, monkeypatch, download_fails=False):
    """apt-get and dpkg-deb stand-ins on PATH: the package's file system is a tar with one member."""
    tools = tmp_path / "bin"
    tools.mkdir(parents=True)
    tree = io.BytesIO()
    with tarfile.open(fileobj=tree, mode="w") as archive:
        info = tarfile.TarInfo(f"./{MEMBER}")
        info.size = 7
        archive.addfile(info, io.BytesIO(b"RDX3\n\x00\x01"))
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
