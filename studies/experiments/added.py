"""A user's method beside the paper's (``scripts/reproduce.py table1 --add "sampler=... sampler.name=mine"``).

It runs as the table's ``add_sweep`` with that sweep's ``sampler=`` choice replaced by the added overrides (same
preset, data, seeds and budget), the driver records it in the runs folder (:data:`ADDED`), and the report makes it
one more row, after the paper's, labelled by its ``sampler.name``, with no paper value.
"""

from __future__ import annotations

import json
from pathlib import Path

from csg.errors import DamagedFileError, describe
from csg.reporting import write_text
from studies.experiments.sweeps import TableSpec, expand, expected_runs
from studies.experiments.tables import LABELS


ADDED = "added_methods.json"  # in a runs folder: {table: {name: its --add overrides}}, written by the driver


def added_protocol(spec: TableSpec, scale: str, epochs: int, seeds: str | None = None) -> list[str]:
    """The overrides every added method of ``spec`` runs with: its ``add_sweep`` without the ``sampler=`` choice
    (the data sets, the seeds, and the sweep's own settings such as Table 3's cycles)."""
    sweep = expand(spec, scale, epochs, seeds)[spec.add_sweep]
    return [override for override in sweep if override.split("=", 1)[0] != "sampler"]


def added_runs(spec: TableSpec, scale: str, epochs: int, seeds: str | None, names) -> list[dict[str, str]]:
    """Every run the added methods ``names`` make: their ``sampler.name`` and the protocol's keys."""
    if not names or spec.add_sweep is None:
        return []
    protocol = added_protocol(spec, scale, epochs, seeds)
    return expected_runs([[f"sampler.name={name}", *protocol] for name in names])


def added_label(name: str) -> str:
    """An added method's row: the paper's label of a built-in sampler's name, else the name itself."""
    return LABELS.get(name, name)


def _record(runs_dir: str | Path) -> dict[str, dict[str, list[str]]]:
    """The driver's record of the methods --add added in ``runs_dir`` (empty without one); a damaged one is a
    one-line :class:`~csg.errors.ConfigError` (``--runs``)."""
    from csg.reporting import read_bytes

    path = Path(runs_dir) / ADDED
    if not (path.exists() or path.is_symlink()):
        return {}
    try:
        record = json.loads(read_bytes(path, 1 << 20))  # data: a regular file (never a FIFO's wait), at most 1 MiB
        if not (isinstance(record, dict) and all(isinstance(methods, dict) and
                                                 all(isinstance(o, list) for o in methods.values())
                                                 for methods in record.values())):
            raise ValueError("not {table: {name: [overrides]}}")
    except Exception as error:  # not JSON, not the record's layout, unreadable
        raise DamagedFileError("--runs", str(runs_dir), f"a folder whose {ADDED} is the driver's record of the "
                               f"methods --add added: it cannot be read ({describe(error, 120)})", path=path) from None
    return record


def read_added(runs_dir: str | Path, table: str) -> dict[str, list[str]]:
    """The methods the driver added to ``table`` in ``runs_dir`` (name -> overrides; none without a record)."""
    return {str(name): [str(o) for o in overrides] for name, overrides in _record(runs_dir).get(table, {}).items()}


def record_added(runs_dir: str | Path, table: str, methods: dict[str, list[str]]) -> None:
    """Add ``methods`` (name -> overrides) to ``table``'s record in ``runs_dir``, keeping the methods already there."""
    record = _record(runs_dir)
    record.setdefault(table, {}).update(methods)
    write_text(Path(runs_dir) / ADDED, json.dumps(record, indent=2) + "\n")
