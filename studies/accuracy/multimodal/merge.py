r"""Adding methods to a finished study without running the others again (``make accuracy-multimodal
ARGS="methods=reSGLD,CSGLD,ICSGLDx4 merge=true"``).

The named methods' tuning and evaluation rows replace theirs in the previous study's tables (from the CSVs in
``--out``), every other row is kept as it was, in its place; the barriers, the burn-in and the exact floor are the
previous study's (the new run computes the same: they depend on the targets, seeds and budgets only). Every
method's runs see the noise and start points of its (target, seed, chain) streams whatever else runs with it
(:mod:`.chains`), so the rows a full rerun would give the other methods are those kept. The targets table records
which methods were added and how long their run took (``added_methods``, ``added_seconds``).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from studies.accuracy.multimodal import study, tuning


def replaced(previous: pd.DataFrame, new: pd.DataFrame, methods: tuple[str, ...]) -> pd.DataFrame:
    """``previous`` without the rows of ``methods``, then ``new``'s rows of ``methods`` (previous's columns)."""
    kept = previous[~previous.method.isin(methods)]
    added = new[new.method.isin(methods)]
    columns = list(previous.columns) + [c for c in added.columns if c not in previous.columns]
    return pd.concat([kept, added.reindex(columns=columns)], ignore_index=True)[columns]


def merged(previous: study.Study, added: study.Study, methods: tuple[str, ...]) -> study.Study:
    """The previous study with ``methods``' rows from ``added`` (module docstring)."""
    tables = dict(previous.tables)
    for key in ("runs", "tuning"):
        tables[key] = replaced(previous.tables[key], added.tables[key], methods)
    tables["chosen"] = tuning.choose(tables["tuning"], previous.protocol.grids)
    names = ", ".join(m for m in added.protocol.methods if m in methods)
    tables["targets"] = previous.tables["targets"].assign(added_methods=names, added_seconds=added.seconds)
    order = [m for m in added.protocol.methods if m in previous.protocol.methods or m in methods]
    in_runs = set(tables["runs"].method)
    protocol = replace(previous.protocol, methods=tuple(m for m in dict.fromkeys(
        [*previous.protocol.methods, *order]) if m in in_runs))
    return study.Study(protocol, tables, previous.seconds, previous.load)
