"""A paper table from the runs under a directory: paper-vs-reproduced, in CSV and Markdown.

:func:`report` aggregates the runs of a :class:`~studies.experiments.sweeps.TableSpec` with pandas: mean,
standard error and number of seeds per (data set, method, metric), the paper's value and the difference, the
preset, the paper's comparisons; every run of the sweeps that is absent or unfinished is listed, never silently
dropped. A method added with ``--add`` (:mod:`studies.experiments.added`) is one more row, after the paper's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from csg.reporting import markdown_table, write_text
from studies.experiments import comparisons
from studies.experiments.added import added_label, added_protocol, added_runs, read_added
from studies.experiments.aggregate import TUNING_STAGE, mean_and_stderr, refuse_runs, runs_to_report
from studies.experiments.sweeps import Metric, TableSpec, expand, expected_runs, missing_runs
from studies.experiments.tables import STEP_NOTES, TABLES
from studies.experiments.tuning_stage import TUNED_CSV, read_picks, section
from studies.paper import paper_tables


def _paper_values(spec: TableSpec) -> pd.DataFrame:
    frame = paper_tables()
    return frame[(frame.paper == spec.paper) & (frame.table == spec.name.removeprefix("icsgld_"))]


def labelled(spec: TableSpec, runs: pd.DataFrame, budget: int, added=()) -> tuple[pd.DataFrame, list[str]]:
    """The finished runs that are rows of ``spec`` (a ``method`` column: their row label), and the run
    directories of the other finished runs (a method the table does not have, a key its label needs missing).

    A run of a method the driver added (its ``sampler.name`` in ``added``) is a row: :func:`added_label`."""
    done = runs[runs.status == "done"].copy() if not runs.empty else pd.DataFrame()
    labels = []
    for _, run in done.iterrows():
        name = run.get("sampler.name")
        if isinstance(name, str) and name in added:
            labels.append(added_label(name))
            continue
        try:
            labels.append(spec.label(run, budget))
        except (KeyError, ValueError, TypeError):
            labels.append(None)
    if done.empty:
        return done, []
    done["method"] = labels
    return done[done.method.notna()].copy(), sorted(done[done.method.isna()].run_dir)


def _read(metric: Metric, done: pd.DataFrame) -> pd.Series:
    """A metric of each run; NaN where the runs did not record it (an OOD metric of runs without an OOD set)."""
    try:
        return metric.read(done)
    except KeyError:
        return pd.Series(float("nan"), index=done.index)


def per_run(spec: TableSpec, runs: pd.DataFrame, scale: str, budget: int, added=()) -> pd.DataFrame:
    """One row per finished run that is a row of ``spec``: table, scale, data, model, method, seed, num_test, one
    column per metric (its ``paper_name``) and run_dir, ordered by data, method and seed (``<table>_runs.csv``:
    what the table's means and its comparisons are computed from)."""
    done, _ = labelled(spec, runs, budget, added)
    if done.empty:
        return pd.DataFrame()
    frame = pd.DataFrame({"table": spec.name, "scale": scale, "data": done["data.name"],
                          "model": done.get("model.name", pd.Series("", index=done.index)), "method": done.method,
                          "seed": done.seed.astype(int),
                          "num_test": done.get("metrics.num_test", pd.Series(float("nan"), index=done.index))})
    for metric in spec.metrics:
        frame[metric.paper_name] = _read(metric, done)
    frame["run_dir"] = done.run_dir
    return frame.sort_values(["data", "method", "seed"], kind="stable").reset_index(drop=True)


def compare_methods(spec: TableSpec, frame: pd.DataFrame) -> pd.DataFrame:
    """The comparisons section's rows (:func:`studies.experiments.comparisons.compare`): the paper's claims of
    ``spec`` on the runs of :func:`per_run`, one Holm family for the whole table."""
    if frame.empty or not spec.claims:
        return pd.DataFrame()
    return comparisons.compare(frame, spec.claims, spec.metrics)


def aggregate(spec: TableSpec, runs: pd.DataFrame, scale: str, budget: int, preset: str, added=()) -> pd.DataFrame:
    """One row per (data set, method, metric): ours (mean, stderr, seeds) beside the paper's value.

    Finished runs that are not rows of the table (see :func:`labelled`) are left out. The methods in ``added``
    (names) follow the table's own, in their order, and have no paper value."""
    added_labels = list(dict.fromkeys(added_label(name) for name in added))
    return summarise(spec, per_run(spec, runs, scale, budget, added), scale, preset, added_labels)


def summarise(spec: TableSpec, frame: pd.DataFrame, scale: str, preset: str, added_labels=()) -> pd.DataFrame:
    """:func:`aggregate` from the per-run rows of :func:`per_run` (or a ``<table>_runs.csv`` a report wrote:
    :func:`read_per_run`): one row per (data set, method, metric), with the row's step size (``spec.step``)."""
    added_labels = list(added_labels)
    paper = _paper_values(spec)
    if frame.empty:
        return pd.DataFrame()
    done = frame.copy()
    rows = []
    for metric in spec.metrics:
        done["value"] = done[metric.paper_name]
        summary = mean_and_stderr(done, ["data", "method"], "value")
        for row in summary.itertuples():
            same = done[(done["data"] == row[1]) & (done.method == row[2])]
            seeds = sorted(int(s) for s in same.seed)
            paper_method, note = spec.paper_method(row[2])
            paper_rows = paper[(paper.method == paper_method) & (paper.metric == metric.paper_name)]
            if note is not None:
                paper_rows = paper_rows[paper_rows.note.str.contains(note, regex=False)]
            if spec.paper_model is not None:
                model = spec.paper_model if scale == "smoke" else str(same["model"].iloc[0])
                paper_rows = paper_rows[paper_rows.model == model]
            if row[2] in added_labels:
                paper_rows = paper_rows.iloc[0:0]  # not the paper's method, whatever its name
            for paper_data in (spec.paper_data if scale == "smoke" else (row[1],)):
                match = paper_rows[paper_rows.dataset == (metric.paper_dataset or paper_data)]
                value = float(match.value.iloc[0]) if len(match) else float("nan")
                rows.append({
                    "table": spec.name, "scale": scale, "preset": preset, "data": row[1], "paper_data": paper_data,
                    "method": row[2], "step": spec.step(row[2]), "metric": metric.paper_name, "mean": row.mean, "stderr": row.stderr,
                    "seeds": int(row.n), "seed_list": " ".join(map(str, seeds)), "paper": value,
                    # a difference only where the setting is the paper's (full scale, same data set)
                    "difference": row.mean - value if scale == "full" else float("nan"),
                })
    # the paper's row order; methods it does not have follow, in the order their runs were made; then the added ones
    paper_order = list(dict.fromkeys(paper.method))
    seen = {label: i for i, label in enumerate(dict.fromkeys(done.sort_values("run_dir").method))}

    def position(method: str) -> tuple[int, int, str]:
        if method in added_labels:
            return (2, added_labels.index(method), method)
        base = spec.paper_method(method)[0]
        return (0, paper_order.index(base), method) if base in paper_order else (1, seen[method], method)

    table = pd.DataFrame(rows)
    table["_order"] = table.method.map(position)
    return table.sort_values(["data", "paper_data", "metric", "_order"], kind="stable").drop(columns="_order")


RUNS_CSV = "_runs.csv"  # <table>_runs.csv: the per-run record a report writes, and a report-only input


def is_runs_csv(path: str | Path) -> bool:
    """Whether ``--runs`` names a per-run record (``<table>_runs.csv``) rather than a folder of runs."""
    return str(path).endswith(".csv")


def read_per_run(path: str | Path, spec: TableSpec, scale: str) -> pd.DataFrame:
    """The per-run rows of a ``<table>_runs.csv`` that a report of ``spec`` at ``scale`` wrote (:func:`per_run`'s
    columns), read as data; anything else (no such file, another table or scale, a column missing, no row) is a
    one-line :class:`~csg.errors.ConfigError` on ``--runs``, before anything is written."""
    from csg.errors import ConfigError

    path = Path(path)
    what = f"a {spec.name}{RUNS_CSV} that a report of {spec.name} wrote"
    if not path.is_file():
        raise ConfigError("--runs", str(path), f"{what}: it does not exist")
    try:
        frame = pd.read_csv(path)
    except Exception as error:  # noqa: BLE001 - pandas' parser errors, a binary file
        raise ConfigError("--runs", str(path), f"{what}: it cannot be read as CSV ({type(error).__name__})") from None
    needed = ["table", "scale", "data", "model", "method", "seed", "num_test",
              *(m.paper_name for m in spec.metrics), "run_dir"]
    absent = [column for column in needed if column not in frame]
    if absent:
        raise ConfigError("--runs", str(path), f"{what}: columns {', '.join(absent)} are missing")
    if frame.empty:
        raise ConfigError("--runs", str(path), f"{what}: it has no row")
    for column, wanted in (("table", spec.name), ("scale", scale)):
        others = sorted(set(frame[column].astype(str)) - {wanted})
        if others:
            raise ConfigError("--runs", str(path), f"{what}: its rows are of {column} {', '.join(others)}, not "
                              f"{wanted}")
    frame = frame[needed].copy()
    frame["seed"] = frame.seed.astype(int)
    frame["model"] = frame.model.fillna("")
    return frame.sort_values(["data", "method", "seed"], kind="stable").reset_index(drop=True)


def missing_rows(spec: TableSpec, frame: pd.DataFrame, expected: list[dict[str, str]],
                 budget: int) -> tuple[list[dict[str, str]], int]:
    """The runs of the sweeps that a per-run record lacks, found by their row label, data set and seed; and how
    many runs of the sweeps could not be checked (their label needs the run's own metrics, as Table 2's)."""
    missing, unchecked = [], 0
    have = set(zip(frame.data.astype(str), frame.method.astype(str), frame.seed.astype(int)))
    for point in expected:
        run = pd.Series({f"{key}.name" if key in ("sampler", "data", "model") else key: value
                         for key, value in point.items()})
        try:
            label = spec.label(run, budget)
        except (KeyError, ValueError, TypeError):
            unchecked += 1
            continue
        if (point.get("data", ""), label, int(point["seed"])) not in have:
            missing.append(point)
    return missing, unchecked


def report(name: str, runs_dir: str | Path, out_dir: str | Path, scale: str, *, epochs: int,
           seeds: str | None = None, preset: str | None = None) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """Write ``out_dir/<name>.csv`` and ``.md`` from the runs under ``runs_dir``; returns (table, missing runs).

    ``runs_dir`` may instead be a ``<name>_runs.csv`` a report wrote (:func:`read_per_run`): the table is then
    rebuilt from its rows alone (the committed ``results/.../<name>_runs.csv`` on a fresh clone, whose runs are gone).
    A folder that does not exist, or holds no finished run of the table, is a :class:`~csg.errors.ConfigError`
    (``--runs``) and nothing is written."""
    if is_runs_csv(runs_dir):
        return _report_from_record(name, Path(runs_dir), Path(out_dir), scale, epochs=epochs, seeds=seeds,
                                   preset=preset)
    spec = TABLES[name]
    runs = runs_to_report(runs_dir, name)
    added = read_added(runs_dir, name) if spec.add_sweep is not None else {}
    preset = preset or spec.presets[scale]
    tuning = _tuning(spec, Path(runs_dir) / TUNING_STAGE / TUNED_CSV)
    tuned = read_picks(tuning) if tuning is not None else None  # a run at another step than its pick is missing
    expected = expected_runs(expand(spec, scale, epochs, seeds, tuned)) + added_runs(spec, scale, epochs, seeds, added)
    missing = missing_runs(runs, expected)
    table = aggregate(spec, runs, scale, epochs, preset, added)
    _, others = labelled(spec, runs, epochs, added)
    if table.empty:
        finished = int((runs.status == "done").sum())
        raise refuse_runs(runs_dir, name, f"none of its {finished} finished runs is a run of {name}'s methods")
    unfinished = sorted(runs[runs.status != "done"].run_dir)
    out_dir = Path(out_dir)
    protocol = " ".join(added_protocol(spec, scale, epochs, seeds)) if added else ""
    frame = per_run(spec, runs, scale, epochs, added)
    verdicts = compare_methods(spec, frame)
    text = markdown(spec, table, scale, preset, runs_dir, missing, unfinished, others, added, protocol, verdicts)
    _write(out_dir, name, spec, table, frame, verdicts, text, tuning)
    return table, missing


def _tuning(spec: TableSpec, path: Path) -> pd.DataFrame | None:
    """The tuning stage's picks (:mod:`studies.experiments.tuning_stage`) of a table that has one, if written."""
    return pd.read_csv(path) if spec.tuning is not None and path.is_file() else None


def _write(out_dir: Path, name: str, spec, table: pd.DataFrame, frame: pd.DataFrame, verdicts: pd.DataFrame,
           text: str, tuning: pd.DataFrame | None = None) -> None:
    """The table's files, each written atomically: <name>.csv, _runs.csv, _comparisons.csv (with claims),
    _tuning.csv (with a tuning stage's picks), .md."""
    write_text(out_dir / f"{name}.csv", table.to_csv(index=False))
    write_text(out_dir / f"{name}_runs.csv", frame.to_csv(index=False))
    if spec.claims:
        write_text(out_dir / f"{name}_comparisons.csv", verdicts.to_csv(index=False))
    if tuning is not None:
        write_text(out_dir / f"{name}_tuning.csv", tuning.to_csv(index=False))
        text = text.rstrip("\n") + "\n" + "\n".join(section(tuning, spec)) + "\n"
    write_text(out_dir / f"{name}.md", text)


def _report_from_record(name: str, record: Path, out_dir: Path, scale: str, *, epochs: int, seeds: str | None,
                        preset: str | None) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """:func:`report` from a per-run record (``--runs <name>_runs.csv``): the same table, comparisons and Markdown,
    the missing runs found by label (:func:`missing_rows`); the runs' folders named as the record gives them."""
    spec = TABLES[name]
    frame = read_per_run(record, spec, scale)
    preset = preset or spec.presets[scale]
    expected = expected_runs(expand(spec, scale, epochs, seeds))
    missing, unchecked = missing_rows(spec, frame, expected, epochs)
    known = {spec.label(pd.Series({"sampler.name": n, "model.name": m}), epochs) for n, m in _names(spec, expected)}
    added = [label for label in dict.fromkeys(frame.method) if known and label not in known]
    table = summarise(spec, frame, scale, preset, added)
    verdicts = compare_methods(spec, frame)
    folders = list(dict.fromkeys(str(Path(d).parent.parent) for d in frame.run_dir))
    source = (f"`{_shown(record)}`, the per-run record of the runs in " + ", ".join(f"`{f}`" for f in folders)
              + (f"; rows not of the table's sweeps (added with `--add`): {', '.join(added)}" if added else "")
              + (f"; {unchecked} runs of the sweeps not checked for being missing (their row label needs the run)"
                 if unchecked else ""))
    text = markdown(spec, table, scale, preset, source, missing, [], (), None, "", verdicts, from_record=True)
    _write(out_dir, name, spec, table, frame, verdicts, text, _tuning(spec, record.parent / f"{name}_tuning.csv"))
    return table, missing


def _shown(path: Path) -> str:
    """A path as the report names it: relative to the working folder (the repository) where it lies inside."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _names(spec: TableSpec, expected: list[dict[str, str]]) -> list[tuple[str, str]]:
    """(sampler, model) of the sweeps' runs whose label needs nothing else (Table 2's needs the run: none)."""
    out = []
    for point in expected:
        try:
            spec.label(pd.Series({"sampler.name": point.get("sampler"), "model.name": point.get("model")}), 1)
        except (KeyError, ValueError, TypeError):
            continue
        out.append((point.get("sampler"), point.get("model")))
    return list(dict.fromkeys(out))


def _cell(mean: float, stderr: float, digits: int) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f}" + (f" +- {stderr:.{digits}f}" if not math.isnan(stderr) else "")


def markdown(spec: TableSpec, table: pd.DataFrame, scale: str, preset: str, runs_dir, missing, unfinished,
             others=(), added=None, protocol: str = "", verdicts: pd.DataFrame | None = None, *,
             from_record: bool = False) -> str:
    command = f"make {spec.name.replace('_', '-')}" + (" SCALE=smoke" if scale == "smoke" else "")
    folder = {"icsgld": "icsgld", "izmailov": "benchmark"}.get(spec.paper.split("-")[0], "csgmcmc")
    out = f"results/{folder}" + ("/smoke" if scale == "smoke" else "")
    again = (f"`{command.replace(spec.name.replace('_', '-'), spec.name.replace('_', '-') + '-report')} "
             f"RUNS={out}/{spec.name}{RUNS_CSV}`")
    runs_text = (f"Runs: {runs_dir}." if from_record else f"Runs: `{runs_dir}`.")
    lines = [f"# {spec.title}" + (" (SMOKE SCALE)" if scale == "smoke" else ""), ""]
    if scale == "smoke":
        lines.append(
            f"Scale: **smoke**: the paper's methods, schedules and sweep on data these CPU machines hold (the 5000 "
            f"shipped MNIST digits, MLP 784-200-200-200-10, preset `experiment={preset}`), not the paper's data and "
            "model: our numbers prove the pipeline and compare the methods with each other; beside them stands the "
            "paper's number on each of its data sets, for reading the ranking, not for a difference.")
    else:
        lines.append(f"Scale: **full** (preset `experiment={preset}`): "
                     + (spec.full_scale or "the paper's data, model and budget."))
    seeds = sorted({s for cell in table.get("seed_list", pd.Series(dtype=str)) for s in cell.split()}, key=int)
    lines += ["", f"Seeds: {', '.join(seeds) or 'none'}; mean +- standard error over seeds (one seed: no error), the "
              "number of seeds in brackets; the paper's columns appear for the metrics it publishes. "
              f"{runs_text} Command: `{command}`; the report alone, from the per-run record: {again}."
              + (f" {spec.note}" if spec.note else ""), ""]
    steps = [word for word in STEP_NOTES if not table.empty and word in set(table.get("step", []))]
    if steps:
        lines += ["Step size (which baseline each row is): " + "; ".join(STEP_NOTES[word] for word in steps) + ".",
                  ""]
    if added:
        lines += ["Added methods (`--add`; not the paper's, no paper value), each run with the table's preset, budget "
                  f"and `{protocol}`: "
                  + "; ".join(f"{added_label(name)}: `{' '.join(overrides)}`" for name, overrides in added.items()), ""]
    if table.empty:
        lines.append("No finished runs.")
    for data, block in (table.groupby("data", sort=False) if not table.empty else []):
        paper_sets = list(dict.fromkeys(block.paper_data))
        published = {m.paper_name: bool(block[block.metric == m.paper_name].paper.notna().any()) for m in spec.metrics}
        header = ["method", "step size"]
        for metric in spec.metrics:
            header.append(f"{metric.label}, ours")
            if published[metric.paper_name]:  # the paper's columns only where it published the metric
                header += [f"{metric.label}, paper ({metric.paper_dataset or p})" for p in paper_sets]
                if scale == "full":
                    header.append(f"{metric.label}, difference")
        body = []
        for method in dict.fromkeys(block.method):
            cells = [method, spec.step(method)]
            for metric in spec.metrics:
                rows = block[(block.method == method) & (block.metric == metric.paper_name)]
                first = rows.iloc[0]
                cells.append(_cell(first["mean"], first["stderr"], metric.digits) + f" ({int(first.seeds)})")
                if not published[metric.paper_name]:
                    continue
                cells += [_cell(rows[rows.paper_data == p]["paper"].iloc[0], float("nan"), metric.digits)
                          if (rows.paper_data == p).any() else "-" for p in paper_sets]
                if scale == "full":
                    cells.append(_cell(first["difference"], float("nan"), metric.digits))
            body.append(cells)
        lines += [f"## {data}", "", *markdown_table(header, body, align="ll" + "r" * (len(header) - 2)), ""]
    if spec.claims and not table.empty:
        lines += comparisons.markdown(verdicts if verdicts is not None else pd.DataFrame(), spec.metrics,
                                      spec.claims_text + f" Per run: `{spec.name}_runs.csv`; the comparisons: "
                                      f"`{spec.name}_comparisons.csv`.")
    if missing:
        lines += [f"Missing runs ({len(missing)} of the sweep have no metrics.json):", ""]
        lines += ["- " + " ".join(f"{k}={v}" for k, v in run.items()) for run in missing]
        lines.append("")
    if unfinished:
        lines += ["Unfinished run directories (no metrics.json): " + ", ".join(f"`{d}`" for d in unfinished), ""]
    if others:
        lines += ["Finished runs left out (not of this table's methods): " + ", ".join(f"`{d}`" for d in others), ""]
    return "\n".join(lines).rstrip() + "\n"
