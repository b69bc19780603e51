"""Atomic writes: a temporary file in the target directory, flushed, then renamed over the target.

A reader (or a crash, or a preemption) never sees a half-written sample,
checkpoint or results file: the file is either the old one or the new one.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import torch


@contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a temporary binary file beside ``path``; on success it replaces ``path``.

    An ``OSError`` (a full disk, a read-only file system, a parent that is a file) names ``path``, not the
    temporary file, and leaves ``path`` as it was."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, _mode_for(path))  # mkstemp makes 0600; the result gets the mode open() would give it
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(error, OSError) and error.errno is not None:
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise


def _mode_for(path: Path) -> int:
    """The mode a file written in place would have: an existing file's own, else 0666 less the umask."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)``, atomically."""
    with atomic_open(path) as handle:
        torch.save(obj, handle)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path) as handle:
        handle.write(text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
