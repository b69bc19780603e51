"""What loading a run directory trusts: its files are data, never code, unless the caller opts in.

A run directory lives on a shared file system and is passed around as a "posterior": loading one
(:meth:`csg.Posterior.load`, :meth:`csg.Posterior.evaluate`, ``scripts/evaluate_run.py``, a resume) must be as
safe as ``torch.load(weights_only=True)``. So, by default:

- A file is opened only when it is a regular file (:func:`not_a_regular_file`, ``os.stat`` first): a FIFO, a
  device or a socket planted in place of ``config.yaml``, ``metrics.json``, a sample or ``checkpoint.pt`` is
  refused without being opened (opening a FIFO would wait for a writer forever).
- The saved config is YAML within limits (:func:`read_yaml`): at most :data:`MAX_YAML_BYTES`, and at most
  :data:`MAX_YAML_NODES` nodes once its aliases are expanded, counted from the parser's events before anything
  is built (a 1 KB "billion laughs" is refused at once, not expanded for minutes).
- The config builds only csg's own components, chosen by name (``data.name``, ``model.name``,
  ``sampler.update_rule``): a ``_target_`` anywhere in it, or an interpolation of a resolver that is not
  OmegaConf's, Hydra's or csg's own, is refused in one line naming the key (:func:`check_no_code`), before
  anything is imported or called. The current folder is never put on ``sys.path`` for a run's targets
  (:func:`csg.components.run_directory_targets`).
- The run's data are read from outside the run directory, and only in formats that cannot run code
  (:func:`check_run_data`): CIFAR's python-pickle batches are unpickled, so a CIFAR data set is read only from a
  root the caller names (``evaluate_run.py RUN data.root=...``).

``trust_code=True`` (:meth:`csg.Posterior.load`) or ``--trust-code`` (``scripts/evaluate_run.py``) lifts the last
two, as Hugging Face's ``trust_remote_code`` does: the run's ``_target_`` objects are then imported and called
through Hydra's ``get_object`` / ``instantiate``, from the installed packages and the process's ``sys.path``
(still never the current folder added by csg). The file and YAML limits hold always.
"""

from __future__ import annotations

import io
import os
import re
import stat
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from csg.components import has_target
from csg.errors import ConfigError

MAX_YAML_BYTES = 1 << 20  # 1 MiB: a saved train.py config is a few KB
MAX_YAML_NODES = 100_000  # scalars, sequences and mappings once every alias is expanded; a config has a few hundred
OPT_IN = "pass trust_code=True / --trust-code if you trust this run directory"
# Resolvers a saved config may interpolate: OmegaConf's, Hydra's and csg's own (csg/__init__.py); none runs code.
SAFE_RESOLVERS = frozenset({"oc.env", "oc.select", "oc.decode", "oc.create", "oc.deprecated", "oc.dict.keys",
                            "oc.dict.values", "now", "hydra", "csg_log_file", "csg_rank0", "csg_pending", "csg_times",
                            "csg_run_stamp", "csg_label", "csg_per_chain"})
# Data sets whose files on disk are read with pickle (which can run code): what reading them unpickles.
UNPICKLING = {"cifar10": "CIFAR-10's python-pickle batches", "cifar100": "CIFAR-100's python-pickle files"}
_RESOLVER = re.compile(r"\$\{\s*([A-Za-z_][\w.-]*)\s*:")


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


def read_yaml(path: str | Path) -> Any:
    """A run's YAML file as OmegaConf reads it (``OmegaConf.load``), within limits: a regular file of at most
    ``MAX_YAML_BYTES`` (1 MiB) whose nodes, aliases expanded, number at most ``MAX_YAML_NODES`` (100,000).

    Raises :class:`UntrustedFile` for a file beyond the limits, and what ``OmegaConf.load`` raises (a
    ``yaml.YAMLError``, ``UnicodeDecodeError``) for one that is not YAML."""
    return parse_yaml(read_bytes(path, MAX_YAML_BYTES).decode("utf-8"))


def check_yaml_limits(path: str | Path) -> None:
    """:class:`UntrustedFile` for a YAML file beyond :func:`read_yaml`'s limits (a special file, more than
    :data:`MAX_YAML_BYTES`, more than :data:`MAX_YAML_NODES` nodes through its aliases); nothing is built, and a
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


def parse_yaml(text: str) -> Any:
    """YAML text (a run's config carried in a posterior file) as :func:`read_yaml` reads a file: at most
    :data:`MAX_YAML_BYTES` and :data:`MAX_YAML_NODES` nodes with its aliases expanded, else :class:`UntrustedFile`."""
    if len(text.encode("utf-8")) > MAX_YAML_BYTES:
        raise UntrustedFile(f"it is larger than the {MAX_YAML_BYTES / 2**20:g} MiB csg reads of a config")
    nodes = expanded_nodes(text)
    if nodes > MAX_YAML_NODES:
        raise UntrustedFile(f"it expands to more than {MAX_YAML_NODES} YAML nodes through its aliases (*name): a "
                            "run's config has a few hundred")
    return OmegaConf.load(io.StringIO(text))


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


def check_no_code(cfg: DictConfig, trust_code: bool) -> None:
    """Refuse a run's config that would import or call anything: a ``_target_`` anywhere (data, model, sampler,
    ood, any nested node), or an interpolation of a resolver outside :data:`SAFE_RESOLVERS`; a one-line
    :class:`~csg.errors.ConfigError` naming the key and its value. Nothing when ``trust_code``."""
    if trust_code:
        return
    for key, value in _walk("", OmegaConf.to_container(cfg, resolve=False)):
        if key == "_target_" or key.endswith("._target_"):
            raise ConfigError(key, value, "a run directory's config is read as data: csg builds only its own "
                              "components, by name (data.name, model.name, sampler.update_rule), and imports or calls "
                              f"no _target_ a run names; {OPT_IN}")
        for resolver in _RESOLVER.findall(value) if isinstance(value, str) else ():
            if resolver not in SAFE_RESOLVERS:
                raise ConfigError(key, value, f"a run directory's config is read as data: interpolations of "
                                  f"OmegaConf's, Hydra's and csg's own resolvers only, not {resolver}; {OPT_IN}")


def check_run_data(cfg: DictConfig, run_dir: Path, *, trust_code: bool, given: tuple[str, ...] = (),
                   ood: bool = False) -> None:
    """Before a run's data set (and, with ``ood``, its out-of-distribution set) is read: refuse a root inside the
    run directory, and a data set whose files are unpickled (:data:`UNPICKLING`) from a root the run's config names
    (``given``: the keys the caller set, e.g. ``data.root`` on evaluate_run.py's command line). One line naming the
    key; nothing when ``trust_code``."""
    if trust_code:
        return
    sections = ["data", "ood"] if ood and str(OmegaConf.select(cfg, "ood.name", default="none")) != "none" else ["data"]
    inside = Path(run_dir).resolve()
    for section in sections:
        root = _root(cfg, section)
        if root is not None and (root == inside or inside in root.parents):
            raise ConfigError(f"{section}.root", str(OmegaConf.select(cfg, f"{section}.root")),
                              f"a data root outside the run directory being loaded: it is {root}, inside {inside}, "
                              f"whose files come with the run; name your own copy ({section}.root=...), or {OPT_IN}")
    name = str(OmegaConf.select(cfg, "data.name", default=""))
    if name in UNPICKLING and not has_target(cfg.data) and "data.root" not in given:
        raise ConfigError("data.name", name, f"a data set read without unpickling: reading it unpickles "
                          f"{UNPICKLING[name]} (pickle can run code) from data.root={_root(cfg, 'data')}, a root the "
                          f"run's config names; name your own copy (evaluate_run.py RUN data.root=...), or {OPT_IN}")


def _root(cfg: DictConfig, section: str) -> Path | None:
    """``<section>.root`` as the data set reads it (resolved, ``~`` expanded, from the current folder), or None."""
    try:
        root = OmegaConf.select(cfg, f"{section}.root", default=None)
    except Exception:  # noqa: BLE001 - an interpolation to nothing: the data set's reader says so later
        return None
    if not isinstance(root, str) or not root.strip():
        return None
    return Path(os.path.abspath(Path(root).expanduser())).resolve()


def _walk(prefix: str, node: Any):
    """(dotted key, value) of every key and leaf of a plain container, a mapping's keys included."""
    if isinstance(node, dict):
        for name, item in node.items():
            key = f"{prefix}.{name}" if prefix else str(name)
            if isinstance(item, (dict, list)):
                if str(name) == "_target_":
                    yield key, item
                yield from _walk(key, item)
            else:
                yield key, item
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _walk(f"{prefix}.{index}", item) if isinstance(item, (dict, list)) else [(f"{prefix}.{index}",
                                                                                                   item)]
