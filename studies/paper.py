"""The papers' published numbers, shipped with the package (``csg/resources/paper_tables.csv``).

Columns: paper, table, dataset, model, method, metric, value, stderr, note.
"""

from __future__ import annotations

from functools import lru_cache

import pandas as pd

from csg.paths import PAPER_TABLES  # noqa: E402


@lru_cache(maxsize=1)
def paper_tables() -> pd.DataFrame:
    return pd.read_csv(PAPER_TABLES)


def paper_value(paper: str, table: str, method: str, metric: str, dataset: str | None = None) -> tuple[float, float]:
    """(value, stderr) of one published number; stderr is NaN where the paper gives none.

    Raises ``KeyError`` if the paper has no such entry.
    """
    frame = paper_tables()
    rows = frame[(frame.paper == paper) & (frame.table == table) & (frame.method == method) & (frame.metric == metric)]
    if dataset is not None:
        rows = rows[rows.dataset == dataset]
    if len(rows) != 1:
        raise KeyError(f"{len(rows)} paper entries for {paper} {table} {dataset} {method} {metric}")
    row = rows.iloc[0]
    return float(row.value), float(row.stderr)
