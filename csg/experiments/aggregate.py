"""Collect the runs under a directory (a Hydra sweep, or several) into one DataFrame."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    elif not isinstance(value, list):
        out[prefix] = value


def load_runs(root: str | Path) -> pd.DataFrame:
    """One row per run directory (a folder holding ``.hydra/config.yaml``) below ``root``.

    Columns: ``run_dir``, ``status`` ("done" with a metrics.json, else "missing metrics"),
    the run's config flattened (``sampler.name``, ``data.name``, ``seed``, ...) and its metrics
    flattened under ``metrics.`` (``metrics.ensemble.nll``, ``metrics.ess.median``, ...).
    """
    rows = []
    for config_path in sorted(Path(root).glob("**/.hydra/config.yaml")):
        run_dir = config_path.parent.parent
        row: dict[str, Any] = {"run_dir": str(run_dir)}
        _flatten("", OmegaConf.to_container(OmegaConf.load(config_path), resolve=False), row)
        metrics_path = run_dir / "metrics.json"
        if metrics_path.exists():
            _flatten("metrics", json.loads(metrics_path.read_text()), row)
            row["status"] = "done"
        else:
            row["status"] = "missing metrics"
        rows.append(row)
    return pd.DataFrame(rows)


def mean_and_stderr(frame: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """Mean, standard error (sample s.d. / sqrt(n); NaN for one run) and count of ``value`` per group."""

    def summarise(values: pd.Series) -> pd.Series:
        values = values.dropna()
        n = len(values)
        stderr = values.std(ddof=1) / math.sqrt(n) if n > 1 else float("nan")
        return pd.Series({"mean": values.mean(), "stderr": stderr, "n": n})

    return frame.groupby(by, sort=False)[value].apply(summarise).unstack().reset_index()
