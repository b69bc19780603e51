"""Comparing finished runs: one table of their metrics grouped by method, and the shared statistics' verdicts.

:func:`compare` (``csg.compare``; ``scripts/compare_runs.py``) reads the ``metrics.json`` of each run directory it
is given, or of every run below a folder it is given (a Hydra sweep, ``runs/``), as data (:mod:`csg.io.trust`:
no config is built, nothing is imported), and gives a :class:`Comparison`: per run its method (``sampler.name``),
seed, test error %, NLL, ECE, Brier, mean mutual information (nats), members and wall time; per method (of one
data set and model) the mean and standard error over its seeds; and, where two methods share seeds, the verdicts
of :func:`csg.evaluation.comparison.compare_paired` on each of error, NLL, ECE and Brier against a baseline method,
paired by seed, one Holm family across every comparison of the table (simultaneous intervals compatible with it).

Only runs of one setting are paired: the same data (where they are read from and how fast aside), model and
adapter, part sampled (``sampler.params``, ``sampler.rest``), evaluation, out-of-distribution set and budget
(epochs over all chains), read from each run's ``.hydra/config.yaml`` as data (unresolved) and its
``metrics.json``'s ``cost``.
Runs of one data set and model in different settings are refused in one line naming two of them and a key that
differs, unless the caller says they compare different settings (``different_settings=True``): then each setting
is tabulated and compared apart, labelled by the keys that differ.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from csg.errors import ConfigError, DamagedFileError, describe
from csg.evaluation.comparison import mean_se

__all__ = ["COMPARED", "Comparison", "TASK_COLUMNS", "TASK_COMPARED", "compare"]

# column -> (metrics.json's key under "ensemble", heading, digits)
COLUMNS = {"error": ("test_error_pct", "error %", 2), "nll": ("nll", "NLL", 4), "ece": ("ece", "ECE", 4),
           "brier": ("brier", "Brier", 4), "mi": ("mutual_information", "MI", 4), "rmse": ("rmse", "RMSE", 4),
           "test_ll": ("log_likelihood", "test LL", 4), "coverage": ("coverage_95", "95 % cover", 3)}
# a task's columns, and those compared (lower is better; the mutual information, test LL (= -NLL) and coverage are
# described, not judged)
TASK_COLUMNS = {"classification": ("error", "nll", "ece", "brier", "mi"),
                "regression": ("rmse", "test_ll", "nll", "coverage")}
TASK_COMPARED = {"classification": ("error", "nll", "ece", "brier"), "regression": ("rmse", "nll")}
COMPARED = tuple(dict.fromkeys(m for metrics in TASK_COMPARED.values() for m in metrics))
GROUP = ["data", "model", "setting", "method"]
MAX_METRICS_BYTES = 256 << 20
SETTING = ("data.", "model.", "adapter.", "likelihood.", "evaluation.", "ood.name", "sampler.params",
           "sampler.rest")  # what pairs must share
NOT_SETTING = ("data.num_workers", "data.eval_batch_size", "data.device_resident", "data.root", "data.download",
               "data.recipe.")  # how and from where the data are read, and the samplers' recipe (the method's)
BUDGET = "budget (epochs, all chains)"


@dataclass
class Comparison:
    """Runs side by side (see the module).

    ``runs``: one row per run, columns ``data``, ``model``, ``setting`` (the keys in which it differs from other
    runs of its data set and model, ``""`` where none do), ``method``, ``seed``, ``error``, ``nll``, ``ece``,
    ``brier``, ``mi`` (NaN for a run from before metrics.json recorded it), ``members``, ``time_s`` (the run's wall
    time) and ``run_dir``; ``verdicts``: one row per comparison, columns ``data``, ``model``, ``setting``, ``method``,
    ``baseline``, ``metric``, ``n`` (shared seeds), ``difference`` (method - baseline), ``low``, ``high`` (its
    simultaneous interval), ``verdict``, ``detectable``, ``p_holm``; ``skipped``: the runs left out, and why;
    ``margins``: the equivalence margins stated, by metric."""

    runs: pd.DataFrame
    verdicts: pd.DataFrame
    skipped: list[str] = field(default_factory=list)
    margins: dict[str, float] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        """The one table: each method's runs (by seed), then its ``mean`` and ``s.e.`` rows (the standard error
        sd / sqrt(n), NaN for one run), methods in the order they were found."""
        rows, shown = [], self.columns()
        for _, runs in self.runs.groupby(GROUP, sort=False):
            rows += runs.drop(columns=["run_dir", "task", *(c for c in COLUMNS if c not in shown)]).to_dict("records")
            first = runs.iloc[0]
            numbers = runs[[*shown, "members", "time_s"]]
            count = len(runs)
            rows.append({**{key: first[key] for key in GROUP}, "seed": "mean", **numbers.mean().to_dict()})
            spread = (numbers.std(ddof=1) / math.sqrt(count)) if count > 1 else numbers.mean() * math.nan
            rows.append({**{key: first[key] for key in GROUP}, "seed": "s.e.", **spread.to_dict()})
        return pd.DataFrame(rows, columns=[*GROUP, "seed", *shown, "members", "time_s"])

    def columns(self) -> list[str]:
        """The metric columns of the runs' tasks (:data:`TASK_COLUMNS`: classification's, then regression's)."""
        tasks = set(self.runs.task) if "task" in self.runs else {"classification"}
        return list(dict.fromkeys(c for task in TASK_COLUMNS if task in tasks for c in TASK_COLUMNS[task]))

    def format(self) -> str:
        """The table as text (``mean ± s.e.`` per method) and the verdicts, as ``scripts/compare_runs.py`` prints
        them."""
        from csg.evaluation.comparison import method_statement

        several = self.runs[["data", "model"]].drop_duplicates().shape[0] > 1
        shown = self.columns()
        lines = [f"{'method':<16}{'seed':>12}" + "".join(f"{COLUMNS[c][1]:>18}" for c in shown) +
                 f"{'members':>10}{'time (s)':>12}"]
        for (data, model, setting, method), runs in self.runs.groupby(GROUP, sort=False):
            label = (f"{method} ({data}, {model})" if several else method) + (f" [{setting}]" if setting else "")
            for _, run in runs.iterrows():
                lines.append(f"{label:<16}{run['seed']:>12}" + "".join(
                    f"{_number(run[c], COLUMNS[c][2]):>18}" for c in shown) + f"{run['members']:>10}"
                    f"{run['time_s']:>12.1f}")
            lines.append(f"{label:<16}{'mean ± s.e.':>12}" + "".join(
                f"{mean_se(runs[c], COLUMNS[c][2], '±'):>18}" for c in shown) +
                f"{runs['members'].mean():>10.1f}{mean_se(runs['time_s'], 1, '±'):>12}")
        if self.verdicts.empty:
            lines.append("No verdicts: no two methods of one data set and model share a seed.")
        else:
            stated = ", ".join(f"{COLUMNS[m][1]} ±{v:g}" for m, v in self.margins.items())
            lines += ["", method_statement(margin=stated)]
            for _, row in self.verdicts.iterrows():
                interval = (f"{row['difference']:+.4g} [{row['low']:+.4g}, {row['high']:+.4g}]" if row["n"] > 1
                            else f"{row['difference']:+.4g} (no interval)")
                detectable = f", detectable {row['detectable']:.3g}" if math.isfinite(row["detectable"]) else ""
                where = f" [{row['setting']}]" if row["setting"] else ""
                lines.append(f"{row['method']} vs {row['baseline']}{where}, {COLUMNS[row['metric']][1]}: {interval} "
                             f"(n = {row['n']}): {row['verdict']}{detectable}")
        lines += [f"skipped: {why}" for why in self.skipped]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def write(self, path: str | Path) -> list[Path]:
        """Write :meth:`table` to the CSV file ``path`` and, where there are verdicts, :attr:`verdicts` beside it
        (``<stem>_verdicts.csv``), atomically; returns the files written."""
        from csg.io.atomic import atomic_write_text

        path = Path(path)
        written = [path]
        atomic_write_text(path, self.table().to_csv(index=False))
        if not self.verdicts.empty:
            written.append(path.with_name(f"{path.stem}_verdicts.csv"))
            atomic_write_text(written[-1], self.verdicts.to_csv(index=False))
        return written


def compare(paths: str | Path | Iterable[str | Path], *, baseline: str | None = None,
            margins: dict[str, float] | None = None, different_settings: bool = False) -> Comparison:
    """The :class:`Comparison` of the finished runs in ``paths``: run directories of train.py, and folders holding
    them at any depth (a sweep's ``multirun/<date>/<time>/``, ``runs/``; runs that a restart moved into a run's
    ``earlier/`` folder are not taken).

    Runs are grouped by data set, model and method (metrics.json's ``method``: the ``sampler.name`` label, which
    a user's own sampler sets); in each data set and model, every method is compared with ``baseline`` (default:
    the first method found) on the seeds the two share. ``margins``: the equivalence margin of a metric
    (``{"nll": 0.01}``) in its units; without one nothing is called equivalent. ``different_settings``: runs of one
    data set and model whose settings differ (see the module) are tabulated and compared each setting apart, not
    refused. One-line :class:`~csg.errors.ConfigError` for: a path that does not exist; a run directory given that
    has not finished; a metrics.json whose values are not numbers; runs of different settings (without
    ``different_settings``); two runs of one method, setting and seed (which one would be paired?); nothing
    finished at all. A run below a folder that has not finished is left out and listed in ``skipped``."""
    given = [paths] if isinstance(paths, (str, Path)) else list(paths)
    margins = dict(margins or {})
    unknown = sorted(set(margins) - set(COMPARED))
    if unknown:
        raise ConfigError("margins", unknown[0], f"one of {', '.join(COMPARED)}")
    rows, skipped = [], []
    for path in map(Path, given):
        for run_dir, explicit in _run_dirs(path):
            metrics, why = _finished(run_dir)
            if metrics is None:
                if explicit:
                    raise ConfigError("run_dir", str(run_dir), f"a finished run directory of train.py: {why}")
                skipped.append(f"{run_dir}: {why}")
                continue
            rows.append(_row(run_dir, metrics))
    if not rows:
        raise ConfigError("runs", ", ".join(map(str, given)), "run directories of train.py, or folders holding them: "
                          f"none has finished{f' ({len(skipped)} have not)' if skipped else ''}")
    _label_settings(rows, different_settings)
    runs = pd.DataFrame(rows)
    duplicated = runs[runs.duplicated([*GROUP, "seed"], keep=False)]
    if not duplicated.empty:
        first = duplicated.iloc[0]
        twins = duplicated[(duplicated[[*GROUP, "seed"]] == first[[*GROUP, "seed"]]).all(axis=1)].run_dir
        raise ConfigError("runs", ", ".join(twins), f"one run per method, setting and seed: these are all "
                          f"{first['method']} on {first['data']} with seed {first['seed']}"
                          f"{f' ({first.setting})' if first.setting else ''}; pass the run directories to compare")
    keys = list(zip(runs.data, runs.model, runs.setting, runs.method))
    order = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    runs = runs.assign(_order=[order[key] for key in keys])
    runs = runs.sort_values(["_order", "seed"], kind="stable").drop(columns="_order").reset_index(drop=True)
    return Comparison(runs=runs, verdicts=_verdicts(runs, baseline, margins), skipped=skipped, margins=margins)


def _run_dirs(path: Path) -> list[tuple[Path, bool]]:
    """(run directory, given by name) of ``path``: itself if it is a run directory, else every run directory below."""
    from csg.reporting import EARLIER

    if not path.exists():
        raise ConfigError("runs", str(path), "a run directory of train.py or a folder holding them: it does not exist")
    if not path.is_dir():
        raise ConfigError("runs", str(path), "a run directory of train.py or a folder holding them: it is a file")
    if (path / ".hydra" / "config.yaml").exists() or (path / "metrics.json").exists():
        return [(path, True)]
    found = sorted(config.parent.parent for config in path.glob("**/.hydra/config.yaml"))
    return [(run, False) for run in found if EARLIER not in run.relative_to(path).parts[:-1]]


def _finished(run_dir: Path) -> tuple[dict | None, str]:
    """(metrics.json of a finished run of train.py, "") or (None, why it is not one)."""
    from csg.io.trust import UntrustedFile, not_a_regular_file, read_bytes

    special = not_a_regular_file(run_dir / "metrics.json")
    if special == "it does not exist":
        return None, "not finished (no metrics.json)"
    try:
        metrics = json.loads(read_bytes(run_dir / "metrics.json", MAX_METRICS_BYTES))
    except (UntrustedFile, OSError, ValueError) as error:
        raise DamagedFileError("run_dir", str(run_dir), f"a run directory of train.py: its metrics.json cannot be "
                               f"read ({describe(error, limit=120)})", path=run_dir / "metrics.json") from None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("ensemble"), dict):
        return None, "its metrics.json has no ensemble (a study on analytic targets, or not train.py's)"
    return metrics, ""


def _row(run_dir: Path, metrics: dict) -> dict:
    """The run's row of the table, its values checked (a metrics.json edited into strings: one line), and its
    setting (:func:`_setting`) under ``_setting`` until :func:`_label_settings` labels it."""
    ensemble = metrics["ensemble"]
    wall = metrics.get("wall_time_s")

    def number(where: dict, key: str, name: str, default: float = math.nan) -> float:
        value = where.get(key, default)
        if value is None:
            return math.nan
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise DamagedFileError("run_dir", str(run_dir), f"a run directory of train.py: its metrics.json's {name} "
                                   f"is {json.dumps(value)[:40]}, not a number", path=run_dir / "metrics.json")
        return float(value)

    seed = number(metrics, "seed", "seed", 0)
    if not float(seed).is_integer():
        raise DamagedFileError("run_dir", str(run_dir), f"a run directory of train.py: its metrics.json's seed is "
                               f"{seed}, not an integer", path=run_dir / "metrics.json")
    task = str(metrics.get("task", "classification"))
    return {"data": str(metrics.get("data", "?")), "model": str(metrics.get("model", "?")),
            "method": str(metrics.get("method", "?")), "seed": int(seed), "task": task,
            **{column: number(ensemble, key, f"ensemble.{key}") for column, (key, _, _) in COLUMNS.items()},
            "members": int(number(ensemble, "num_samples", "ensemble.num_samples", 0)),
            "time_s": number(wall, "total", "wall_time_s.total") if isinstance(wall, dict) else math.nan,
            "run_dir": str(run_dir), "_setting": _setting(run_dir, metrics)}


def _setting(run_dir: Path, metrics: dict) -> dict[str, str]:
    """The run's setting (see the module): ``{key: value as text}`` of its saved config's :data:`SETTING` keys (not
    :data:`NOT_SETTING`), read as data and unresolved, and its budget from metrics.json's ``cost``."""
    from collections.abc import Mapping

    from csg.checks.saved import flat_leaves
    from csg.reporting import read_yaml

    setting: dict[str, str] = {}
    path = run_dir / ".hydra" / "config.yaml"
    if path.is_file():
        try:
            cfg = read_yaml(path)
        except Exception as error:  # noqa: BLE001 - yaml's errors, a file beyond the limits (UntrustedFile)
            raise DamagedFileError("run_dir", str(run_dir), f"a run directory of train.py: its .hydra/config.yaml "
                                   f"cannot be read ({describe(error, limit=120)})", path=path) from None
        if isinstance(cfg, Mapping):
            for key, value in flat_leaves(cfg).items():
                if key.startswith(SETTING) and not (key + ".").startswith(NOT_SETTING):
                    setting[key] = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    cost = metrics.get("cost")
    if isinstance(cost, dict) and "epochs_all_chains" in cost:
        setting[BUDGET] = str(cost["epochs_all_chains"])
    return setting


def _label_settings(rows: list[dict], different_settings: bool) -> None:
    """Each row's ``setting``: the keys in which its setting differs from another run's of its data set and model
    (``""`` where none do); runs of different settings refused in one line unless ``different_settings``."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["data"], row["model"]), []).append(row)
    for group in groups.values():
        settings = [row.pop("_setting") for row in group]
        keys = list(dict.fromkeys(key for setting in settings for key in setting))
        differing = [key for key in keys if len({setting.get(key) for setting in settings}) > 1]
        if differing and not different_settings:
            key = differing[0]
            first = next(i for i, s in enumerate(settings) if s.get(key) != settings[0].get(key))
            runs = (group[0]["run_dir"], group[first]["run_dir"])
            raise ConfigError("runs", ", ".join(runs), f"runs of one setting to pair (data, model, part sampled, "
                              f"evaluation and budget alike): {key} is {settings[0].get(key, 'absent')} in the first, "
                              f"{settings[first].get(key, 'absent')} in the second; pass different_settings=True "
                              "(--different-settings) to compare each setting apart")
        for row, setting in zip(group, settings):
            row["setting"] = ", ".join(f"{key}={setting.get(key, 'absent')}" for key in differing)


def _verdicts(runs: pd.DataFrame, baseline: str | None, margins: dict[str, float]) -> pd.DataFrame:
    """Every method against the baseline of its data set and model, on each metric of :data:`COMPARED`, paired by
    seed; one family for :func:`~csg.evaluation.comparison.compare_paired`."""
    from csg.evaluation.comparison import Paired, compare_paired

    labels, comparisons = [], []
    for (data, model, setting), group in runs.groupby(["data", "model", "setting"], sort=False):
        methods = list(dict.fromkeys(group.method))
        if baseline is not None and baseline not in methods and len(methods) > 1:
            raise ConfigError("baseline", baseline, f"a method of the runs on {data} ({model}"
                              f"{f', {setting}' if setting else ''}): {', '.join(methods)}")
        reference = baseline if baseline in methods else methods[0]
        base = group[group.method == reference].set_index("seed")
        for method in methods:
            if method == reference:
                continue
            other = group[group.method == method].set_index("seed")
            seeds = sorted(set(base.index) & set(other.index))
            if not seeds:
                continue
            for metric in TASK_COMPARED.get(str(group.task.iloc[0]), TASK_COMPARED["classification"]):
                labels.append({"data": data, "model": model, "setting": setting, "method": method,
                               "baseline": reference, "metric": metric})
                comparisons.append(Paired(other.loc[seeds, metric].tolist(), base.loc[seeds, metric].tolist(),
                                          margin=margins.get(metric, math.nan)))
    columns = ["data", "model", "setting", "method", "baseline", "metric", "n", "difference", "low", "high",
               "verdict", "detectable", "p_holm"]
    if not comparisons:
        return pd.DataFrame(columns=columns)
    verdicts = compare_paired(comparisons)
    return pd.DataFrame([{**label, **{key: getattr(v, key) for key in columns[6:]}}
                         for label, v in zip(labels, verdicts)], columns=columns)


def _number(value: float, digits: int) -> str:
    return "-" if not math.isfinite(value) else f"{value:.{digits}f}"
