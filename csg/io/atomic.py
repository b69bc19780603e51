"""Atomic writes: a temporary file in the target directory, flushed, then renamed over the target.

A reader (or a crash, or a preemption) never sees a half-written sample,
checkpoint or results file: the file is either the old one or the new one.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator


@contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a temporary binary file beside ``path``; on success it replaces ``path``.

    A failed write leaves ``path`` as it was and no temporary file. An ``OSError`` (a full disk, a read-only
    file system, a parent that is a file) is raised naming ``path``, not the temporary file; so is a write
    failure that ``torch.save``'s zip writer reports as a ``RuntimeError`` (``write_failure``)."""
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
        failure = write_failure(error, path.parent)
        if failure is not None:
            raise OSError(failure.errno, failure.strerror, str(path)) from error
        raise


_ZIP_WRITER_FAILURES = ("PytorchStreamWriter failed", "inline_container", "file write failed", "unexpected pos",
                        "iostream error")


def write_failure(error: BaseException, folder: Path) -> OSError | None:
    """The file-system error behind ``error``, raised while a file in ``folder`` was written, or None.

    An ``OSError`` with an errno is its own answer. ``torch.save`` reports a failed write (a full disk, a quota)
    as a ``RuntimeError`` of its zip writer ("unexpected pos ...", "PytorchStreamWriter failed writing file
    ...") raised while handling the ``OSError`` of the write: that ``OSError``; where none is chained, the
    writer's message as an ``OSError`` (ENOSPC when ``folder``'s file system has less than 1 MiB free, else EIO)."""
    if isinstance(error, OSError) and error.errno is not None:
        return error
    if not isinstance(error, RuntimeError):
        return None
    cause = error.__cause__ or error.__context__
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno is not None:
            return cause
        cause = cause.__cause__ or cause.__context__
    message = str(error).strip()
    if not any(words in message for words in _ZIP_WRITER_FAILURES):
        return None
    try:
        full = shutil.disk_usage(folder).free < 1 << 20
    except OSError:
        full = False
    if full:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    first = message.splitlines()[0] if message else "RuntimeError"
    return OSError(errno.EIO, f"writing failed (torch.save: {first})")


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
    import torch  # here: the commands' checks import this module, and need no torch

    with atomic_open(path) as handle:
        torch.save(obj, handle)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path) as handle:
        handle.write(text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
