"""What a study or a report writes and reads, as csg writes and reads its own runs: the public helpers of
research code built on csg (the studies in the repository's ``studies/`` folder use these, not csg's internals).

- :func:`write_text`, :func:`write_json`, :func:`atomic_open`: atomic writes (a temporary file beside the target,
  flushed, then renamed over it: a reader or a crash sees the old file or the new one, never half of one);
- :func:`markdown_table`: the lines of a Markdown table;
- :func:`flat_keys`: a nested mapping as ``{dotted key: value}`` (the one flattener: run configs, metrics);
- :func:`read_yaml`, :func:`parse_yaml`, :func:`read_bytes`, :class:`UntrustedFile`: a run directory's files read as
  data (regular files within size limits, YAML without Python tags, as OmegaConf reads it), as :class:`csg.Posterior`
  reads them;
- :data:`DIVERGED`, :data:`EARLIER`: the names of what a run folder holds when its chain diverged, and where
  ``trainer.checkpoint.resume=false`` moved the earlier runs of a folder.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from csg.io.atomic import atomic_open, atomic_write_json as write_json, atomic_write_text as write_text
from csg.io.trust import MAX_YAML_BYTES, SAFE_RESOLVERS, UntrustedFile, check_yaml_text, read_bytes

DIVERGED = "diverged.json"  # a run stopped by a divergence writes it in its folder (csg.launch.run)
EARLIER = "earlier"  # a run folder's earlier runs, moved aside by trainer.checkpoint.resume=false, one folder each

__all__ = ["DIVERGED", "EARLIER", "SAFE_RESOLVERS", "UntrustedFile", "atomic_open", "flat_keys", "markdown_table",
           "parse_yaml", "read_bytes", "read_yaml", "write_json", "write_text"]

_ALIGN = {"l": "---", "r": "---:", "c": ":---:"}


def markdown_table(header: Sequence[Any], rows: Iterable[Sequence[Any]], align: str | None = None) -> list[str]:
    """The lines of a Markdown table: ``| a | b |``, its rule, then one line per row (each cell ``str()``-ed).

    ``align``: one letter per column, ``l`` (``---``), ``r`` (``---:``) or ``c`` (``:---:``); default every
    column ``l``. A row of another width than the header, or an ``align`` of another length or letter, is a
    ``ValueError`` naming it."""
    header = [str(cell) for cell in header]
    align = align if align is not None else "l" * len(header)
    if len(align) != len(header) or set(align) - set(_ALIGN):
        raise ValueError(f"align={align!r}: one of l, r, c per column ({len(header)} columns)")
    lines = [_line(header), "|" + "|".join(_ALIGN[a] for a in align) + "|"]
    for row in rows:
        cells = [str(cell) for cell in row]
        if len(cells) != len(header):
            raise ValueError(f"row {cells!r}: {len(cells)} cells, the header has {len(header)}")
        lines.append(_line(cells))
    return lines


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def flat_keys(value: Any, *, lists: bool = True, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: value}`` of every leaf of the nested mapping ``value`` (``{"a": {"b": 1}}`` gives
    ``{"a.b": 1}``). ``lists``: a list is one value (True), or is left out (False: a table's columns hold
    scalars). ``prefix``: put before every key (``metrics`` gives ``metrics.a.b``)."""
    flat: dict[str, Any] = {}

    def walk(key: str, node: Any) -> None:
        if isinstance(node, Mapping):
            for name, item in node.items():
                walk(f"{key}.{name}" if key else str(name), item)
        elif lists or not isinstance(node, list):
            flat[key] = node

    walk(prefix, value)
    return flat


def read_yaml(path: str | Path) -> Any:
    """A run's YAML file as OmegaConf reads it (``OmegaConf.load``: a ``DictConfig``, interpolations unresolved),
    within limits: a regular file of at most 1 MiB whose nodes, aliases expanded, number at most 100,000
    (:mod:`csg.io.trust`). Raises :class:`UntrustedFile` for a file beyond the limits, and what ``OmegaConf.load``
    raises (a ``yaml.YAMLError``, ``UnicodeDecodeError``) for one that is not YAML."""
    return parse_yaml(read_bytes(path, MAX_YAML_BYTES).decode("utf-8"))


def parse_yaml(text: str) -> Any:
    """YAML text (a run's config carried in a posterior file) as :func:`read_yaml` reads a file, within its limits."""
    from omegaconf import OmegaConf

    return OmegaConf.load(io.StringIO(check_yaml_text(text)))
