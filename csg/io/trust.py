"""What loading a run directory trusts: its files are data, never code, unless the caller opts in.

A run directory lives on a shared file system and is passed around as a "posterior": loading one
(:meth:`csg.Posterior.load`, :meth:`csg.Posterior.evaluate`, ``scripts/evaluate_run.py``, a resume) must be as
safe as ``torch.load(weights_only=True)``. So, by default:

- A file is opened only when it is a regular file (:func:`not_a_regular_file`, ``os.stat`` first): a FIFO, a
  device or a socket planted in place of ``config.yaml``, ``metrics.json``, a sample or ``checkpoint.pt`` is
  refused without being opened (opening a FIFO would wait for a writer forever).
- The saved config is YAML within limits (:func:`csg.reporting.read_yaml`): at most :data:`MAX_YAML_BYTES`, and at most
  :data:`MAX_YAML_NODES` nodes once its aliases are expanded, counted from the parser's events before anything
  is built (a 1 KB "billion laughs" is refused at once, not expanded for minutes).
- The config builds only csg's own components, chosen by name (``data.name``, ``model.name``,
  ``sampler.update_rule``): a ``_target_`` anywhere in it, or an interpolation of a resolver that is not
  OmegaConf's, Hydra's or csg's own, is refused in one line naming the key
  (:func:`csg.checks.saved.check_no_code`), before anything is imported or called. The current folder is never put
  on ``sys.path`` for a run's targets (:func:`csg.components.run_directory_targets`).
- The run's data are read from outside the run directory, and only in formats that cannot run code
  (:func:`csg.checks.saved.check_run_data`): CIFAR's python-pickle batches are unpickled, so a CIFAR data set is
  read only from a root the caller names (``evaluate_run.py RUN data.root=...``).

``trust_code=True`` (:meth:`csg.Posterior.load`) or ``--trust-code`` (``scripts/evaluate_run.py``) lifts the last
two, as Hugging Face's ``trust_remote_code`` does: the run's ``_target_`` objects are then imported and called
through Hydra's ``get_object`` / ``instantiate``, from the installed packages and the process's ``sys.path``
(still never the current folder added by csg). The file and YAML limits hold always.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

MAX_YAML_BYTES = 1 << 20  # 1 MiB: a saved train.py config is a few KB
MAX_YAML_NODES = 100_000  # scalars, sequences and mappings once every alias is expanded; a config has a few hundred
OPT_IN = "pass trust_code=True / --trust-code if you trust this run directory"
# Resolvers a saved config may interpolate: OmegaConf's, Hydra's and csg's own (csg/__init__.py); none runs code.
SAFE_RESOLVERS = frozenset({"oc.env", "oc.select", "oc.decode", "oc.create", "oc.deprecated", "oc.dict.keys",
                            "oc.dict.values", "now", "hydra", "csg_log_file", "csg_rank0", "csg_pending", "csg_times",
                            "csg_run_stamp", "csg_label", "csg_per_chain"})
# Data sets whose files on disk are read with pickle (which can run code): what reading them unpickles.
UNPICKLING = {"cifar10": "CIFAR-10's python-pickle batches", "cifar100": "CIFAR-100's python-pickle files"}


class UntrustedFile(ValueError):
    """A run directory's file that is refused before it is read: ``reason`` says why, in words."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


def not_a_regular_file(path: str | Path) -> str | None:
    """Why ``path`` cannot be read as a file (``it is a FIFO (named pipe), not a regular file``, ``it does not
    exist``), or None for a regular file. Only ``os.stat`` is called: the file is never opened."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "it does not exist"
    except PermissionError:
        return "it cannot be read (permission denied)"
    except OSError as error:
        return f"it cannot be read ({error.strerror or error})"
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    kind = next((name for test, name in kinds if test(mode)), "a special file")
    return f"it is {kind}, not a regular file (it was not opened)"


def read_bytes(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; :class:`UntrustedFile` for a special file
    (refused without blocking: opened non-blocking and checked with ``fstat``) or a larger one."""
    reason = not_a_regular_file(path)
    if reason is not None:
        raise UntrustedFile(reason)
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # swapped for a FIFO since the stat
            raise UntrustedFile("it is not a regular file (it was not read)")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UntrustedFile(f"it is larger than the {limit / 2**20:g} MiB csg reads of such a file")
    return data


def check_yaml_limits(path: str | Path) -> None:
    """:class:`UntrustedFile` for a YAML file beyond :func:`csg.reporting.read_yaml`'s limits (a special file, more
    than :data:`MAX_YAML_BYTES`, more than :data:`MAX_YAML_NODES` nodes through its aliases); nothing is built, and a
    file that is not YAML passes (whoever reads it reports that)."""
    import yaml

    text = read_bytes(path, MAX_YAML_BYTES).decode("utf-8", errors="replace")
    try:
        nodes = expanded_nodes(text)
    except yaml.YAMLError:
        return
    if nodes > MAX_YAML_NODES:
        raise UntrustedFile(f"it expands to more than {MAX_YAML_NODES} YAML nodes through its aliases (*name): a "
                            "config has a few hundred")


def check_yaml_text(text: str) -> str:
    """``text`` once it is YAML within :func:`csg.reporting.read_yaml`'s limits (at most :data:`MAX_YAML_BYTES`, and
    at most :data:`MAX_YAML_NODES` nodes with its aliases expanded), else :class:`UntrustedFile`; nothing is built."""
    if len(text.encode("utf-8")) > MAX_YAML_BYTES:
        raise UntrustedFile(f"it is larger than the {MAX_YAML_BYTES / 2**20:g} MiB csg reads of a config")
    nodes = expanded_nodes(text)
    if nodes > MAX_YAML_NODES:
        raise UntrustedFile(f"it expands to more than {MAX_YAML_NODES} YAML nodes through its aliases (*name): a "
                            "run's config has a few hundred")
    return text


def expanded_nodes(text: str, stop: int = MAX_YAML_NODES) -> int:
    """The number of YAML nodes in ``text`` with every alias expanded, counted from the parser's events (nothing is
    built, an alias costs the size its anchor recorded); counting ends once it passes ``stop``."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    sizes: dict[str, int] = {}  # anchor -> nodes of its node, expanded
    open_nodes: list[list[Any]] = [[0, None]]  # [nodes so far, anchor] of each open collection
    total = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            count = sizes.get(event.anchor, 1)
        elif isinstance(event, yaml.ScalarEvent):
            count = 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            open_nodes.append([1, event.anchor])
            total += 1
            continue
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            count, anchor = open_nodes.pop()
            if anchor:
                sizes[anchor] = count
            open_nodes[-1][0] += count
            continue
        else:
            continue
        open_nodes[-1][0] += count
        total += count
        if total > stop:
            break
    return total


