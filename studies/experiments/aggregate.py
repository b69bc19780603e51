"""Collect the runs under a directory (a Hydra sweep, or several) into one DataFrame."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from csg.errors import ConfigError, DamagedFileError
from csg.reporting import flat_keys


TUNING_STAGE = "tuning_stage"  # a table's tuning runs, below its runs folder (studies.experiments.tuning_stage)


def load_runs(root: str | Path) -> pd.DataFrame:
    """One row per run directory (a folder holding ``.hydra/config.yaml``) below ``root``, but not the earlier
    runs that ``trainer.checkpoint.resume=false`` moved into a run's ``earlier/`` folder, nor a tuning stage's
    (``tuning_stage/``: :mod:`studies.experiments.tuning_stage` reads them).

    Columns: ``run_dir``, ``status`` ("done" with a metrics.json, else "missing metrics"),
    the run's config flattened (``sampler.name``, ``data.name``, ``seed``, ...) and its metrics
    flattened under ``metrics.`` (``metrics.ensemble.nll``, ``metrics.ess.median``, ...).
    A run directory whose config or metrics.json cannot be read is a :class:`ConfigError` naming it. Both are read
    as data (:mod:`csg.reporting`): regular files only (a FIFO is refused, never opened), the config as YAML within the
    size and alias limits, metrics.json up to :data:`METRICS_BYTES`.
    """
    from csg.reporting import EARLIER
    from csg.reporting import read_yaml

    rows = []
    for config_path in sorted(Path(root).glob("**/.hydra/config.yaml")):
        run_dir = config_path.parent.parent
        if {EARLIER, TUNING_STAGE} & set(run_dir.relative_to(root).parts[:-1]):
            continue  # a run started over with resume=false moved here, or a tuning stage's: not the sweep's runs
        row: dict[str, Any] = {"run_dir": str(run_dir)}
        try:
            config = read_yaml(config_path)
        except Exception as error:  # beyond csg.io.trust's limits, yaml's errors, a binary file, an unreadable one
            raise _damaged(run_dir, ".hydra/config.yaml", "cannot be read as YAML", error) from None
        if not isinstance(config, DictConfig):
            raise ConfigError("run_dir", str(run_dir), "a run directory of train.py: its .hydra/config.yaml is not "
                              "a config (a mapping)")
        row.update(flat_keys(OmegaConf.to_container(config, resolve=False), lists=False))
        metrics_path = run_dir / "metrics.json"
        if metrics_path.exists() or metrics_path.is_symlink():
            row.update(flat_keys(read_metrics(run_dir), lists=False, prefix="metrics"))
            row["status"] = "done"
        else:
            row["status"] = "missing metrics"
        rows.append(row)
    return pd.DataFrame(rows)


METRICS_BYTES = 256 << 20  # a metrics.json lists every sample's metrics: a few MB at most


def read_metrics(run_dir: str | Path) -> dict[str, Any]:
    """A run's metrics.json, read as data (a regular file of at most :data:`METRICS_BYTES`, a JSON object); else a
    :class:`ConfigError` naming the run."""
    from csg.reporting import read_bytes

    run_dir = Path(run_dir)
    try:
        metrics = json.loads(read_bytes(run_dir / "metrics.json", METRICS_BYTES))
    except Exception as error:  # a special or too large file, not JSON, not text, unreadable
        raise _damaged(run_dir, "metrics.json", "cannot be read as JSON", error) from None
    if not isinstance(metrics, dict):
        raise ConfigError("run_dir", str(run_dir), "a run directory of train.py: its metrics.json is not a JSON object")
    return metrics


def _damaged(run_dir: Path, name: str, what: str, error: Exception) -> DamagedFileError:
    from csg.reporting import UntrustedFile

    if isinstance(error, UntrustedFile):
        return DamagedFileError("run_dir", str(run_dir), f"a run directory of train.py: its {name} is refused: "
                                f"{error.reason}", path=Path(run_dir) / name)
    lines = str(error).strip().splitlines()
    detail = f"{type(error).__name__}: {lines[0][:120]}" if lines else type(error).__name__
    return DamagedFileError("run_dir", str(run_dir), f"a run directory of train.py: its {name} {what} ({detail})",
                            path=Path(run_dir) / name)


def runs_to_report(root: str | Path, target: str) -> pd.DataFrame:
    """:func:`load_runs` of the folder a report reads, refused (a :class:`ConfigError` on ``--runs``, before the
    report writes anything) when it does not exist or holds no finished run (a run directory with metrics.json)."""
    root = Path(root)
    if not root.exists():
        raise refuse_runs(root, target, "it does not exist")
    if not root.is_dir():
        raise refuse_runs(root, target, "it is a file, not a folder")
    runs = load_runs(root)
    if runs.empty:
        raise refuse_runs(root, target, "it holds no run directory (.hydra/config.yaml)")
    if not (runs.status == "done").any():
        raise refuse_runs(root, target, f"none of its {len(runs)} run directories has finished (no metrics.json)")
    return runs


def refuse_runs(root: str | Path, target: str, why: str) -> ConfigError:
    """The one-line error of a report whose ``--runs`` folder gives it nothing to report."""
    return ConfigError("--runs", str(root), f"a folder holding finished runs of {target}: {why}")


def mean_and_stderr(frame: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """Mean, standard error (sample s.d. / sqrt(n); NaN for one run) and count of ``value`` per group."""

    def summarise(values: pd.Series) -> pd.Series:
        values = values.dropna()
        n = len(values)
        stderr = values.std(ddof=1) / math.sqrt(n) if n > 1 else float("nan")
        return pd.Series({"mean": values.mean(), "stderr": stderr, "n": n})

    return frame.groupby(by, sort=False)[value].apply(summarise).unstack().reset_index()
