"""The sampling study's report cells, shared by its sections (:mod:`.report`, :mod:`.cost_report`)."""

from __future__ import annotations

import functools

import pandas as pd

from csg.evaluation.comparison import mean_se

__all__ = ["cell", "expected_tv"]


@functools.lru_cache(maxsize=1)
def _reference_facts() -> dict:
    import json

    from csg.paths import ROOT

    return json.loads((ROOT / "results" / "benchmark" / "reference" / "reference_network.json").read_text())


def expected_tv(temperature: float, members) -> str:
    """The expected TV to the reference of the average of ``members`` independent exact draws (the reference's own
    sizes; results/benchmark/reference/reference_network.json, read once), where listed; "-" otherwise."""
    if members is None or pd.isna(members):
        return "-"
    sizes = _reference_facts().get(f"{temperature:g}", {}).get("checks", {}).get("floors_test", {})
    row = sizes.get(str(int(members)))
    return f"{row['total_variation']:.4f}" if row else "-"


def cell(values: pd.Series, digits: int) -> str:
    """The mean and standard error of ``values``' non-missing entries (:func:`~csg.evaluation.comparison.mean_se`),
    "-" where none is."""
    values = values.dropna()
    if values.empty:
        return "-"
    return mean_se(values.tolist(), digits)
