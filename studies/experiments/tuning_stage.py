"""A table's tuning stage: each method's step picked on held-out training data before the table's runs.

The posterior benchmark tunes every contender's step on examples no method is scored on
(:mod:`studies.benchmark.tuning`); a table with a :class:`~studies.experiments.sweeps.Tuning` does the same
before its sweeps, as sweeps of its own, run where the table's runs run (locally or on SLURM). Each method runs at
``factors`` x its recipe's step (the preset composed with the method's overrides and the command's), at the tuning
seeds, on the training split less ``data.holdout``: the held-out examples are those runs' test split, and no
reference, test example or OOD set is read. :func:`csg.evaluation.tuning.pick` (``csg-tune``'s rule) chooses each
method's step: the least held-out NLL; within one standard error of it, the points whose end-of-run sampling check
passed at every seed, then the most effective members. A run that diverged (its folder's
:data:`csg.reporting.DIVERGED`) scores infinity. The picks, every point's scores and whether a pick lies at the
grid's edge go to :data:`TUNED_CSV` in the stage's folder (``<runs>/tuning_stage/``) and fill the table's
``{placeholders}``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from csg.errors import ConfigError
from csg.reporting import markdown_table, write_text
from studies.experiments.aggregate import TUNING_STAGE, load_runs
from studies.experiments.sweeps import TableSpec, placeholders

__all__ = ["StageIncomplete", "TUNED_CSV", "check_command", "run_stage", "with_flags", "grid", "pick_steps", "read_picks", "recipe_steps", "section", "stage_folder", "stage_sweeps"]

TUNED_CSV = "tuned.csv"


def _method_overrides(spec: TableSpec, scale: str, epochs: int) -> dict[str, list[str]]:
    values = placeholders(spec, scale, epochs)
    return {name: [o.format(**values) for o in overrides] for name, overrides in spec.tuning.methods.items()}


def recipe_steps(spec: TableSpec, scale: str, epochs: int, preset: str | None, overrides: list[str],
                 configs: Path) -> dict[str, float]:
    """Each method's step as the preset, its overrides and the command's ``overrides`` compose it."""
    from studies.experiments.protocol import Composer

    composer, base = Composer(configs), [f"experiment={preset}"] if preset else []
    key, steps = spec.tuning.key, {}
    for name, own in _method_overrides(spec, scale, epochs).items():
        leaves = composer.leaves([*base, *own, *overrides])
        value = leaves.get(key) if isinstance(leaves, dict) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ConfigError(key, value, f"a step > 0 for {name}'s tuning grid (the preset with "
                              f"{' '.join(own)} composes {leaves if isinstance(leaves, str) else value!r})")
        steps[name] = float(value)
    return steps


def grid(recipe: float, factors) -> list[str]:
    """The grid's values as overrides write them: ``factors`` x ``recipe``."""
    return [f"{recipe * factor:.6g}" for factor in factors]


def stage_sweeps(spec: TableSpec, scale: str, epochs: int, steps: dict[str, float]) -> dict[str, list[str]]:
    """Each method's tuning multirun (method -> its overrides): the grid, the tuning seeds, the hold-out, no
    reference and no OOD set."""
    tuning = spec.tuning
    return {name: [*own, f"{tuning.key}={','.join(grid(steps[name], tuning.factors))}", f"seed={tuning.seeds}",
                   f"data.holdout={tuning.holdout}", "evaluation.reference=null", "ood=none"]
            for name, own in _method_overrides(spec, scale, epochs).items()}


def _outcome(run: pd.Series) -> tuple[float, float, str] | None:
    """(held-out NLL, effective members, the sampling check's line) of a tuning run; None where it has neither
    metrics nor a record of its divergence (it failed otherwise, or never ran)."""
    from csg.reporting import DIVERGED

    if run.status == "done":
        members = run.get("metrics.spread.effective_members", math.nan)
        check = run.get("metrics.sampling_check")
        return (float(run["metrics.ensemble.nll"]), float(members) if members is not None else math.nan,
                "" if check is None or (isinstance(check, float) and math.isnan(check)) else str(check))
    diverged = Path(run.run_dir) / DIVERGED
    if diverged.is_file():
        return math.inf, math.nan, "diverged: " + str(json.loads(diverged.read_text()).get("error", ""))[:160]
    return None


class StageIncomplete(ConfigError):
    """Grid points of the tuning stage without an outcome (neither metrics nor a record of their divergence)."""


def _points(stage: Path, spec: TableSpec, name: str, recipe: float) -> tuple[list, list[str]]:
    """(the method's grid points with their outcomes, the points and seeds without one)."""
    from csg.evaluation.tuning import GridPoint

    tuning, absent, points = spec.tuning, [], []
    runs = load_runs(stage / name) if (stage / name).is_dir() else pd.DataFrame()
    for value in grid(recipe, tuning.factors):
        outcomes = []
        for seed in (int(s) for s in tuning.seeds.split(",")):
            mine = (runs[((runs[tuning.key].astype(float) - float(value)).abs() <= 1e-9 * float(value))
                         & (runs.seed.astype(int) == seed)] if len(runs) else runs)
            found = [o for o in (_outcome(run) for _, run in mine.iterrows()) if o is not None]
            if found:
                outcomes.append(found[0])
            else:
                absent.append(f"{name} {tuning.key}={value} seed={seed}")
        points.append(GridPoint((f"{tuning.key}={value}",), *map(tuple, zip(*outcomes))) if outcomes
                      else GridPoint((f"{tuning.key}={value}",), ()))
    return points, absent


def pick_steps(stage: Path, spec: TableSpec, steps: dict[str, float]) -> pd.DataFrame:
    """Every grid point's scores and each method's pick from the runs under ``stage`` (one folder per method), written
    to ``stage/``:data:`TUNED_CSV`; :class:`StageIncomplete` listing the points without an outcome."""
    from csg.evaluation.tuning import pick

    tuning, rows, absent = spec.tuning, [], []
    for name, recipe in steps.items():
        points, missing = _points(stage, spec, name, recipe)
        absent += missing
        if missing:
            continue
        try:
            chosen = pick(points)
        except ValueError as error:
            raise ConfigError(tuning.key, ",".join(grid(recipe, tuning.factors)), f"a grid where {name} does not "
                              f"diverge at every point ({error})") from None
        at = points.index(chosen.point)
        for index, point in enumerate(points):
            rows.append({"method": name, "value": float(point.overrides[0].split("=", 1)[1]),
                         "factor": tuning.factors[index], "heldout_nll": point.mean_nll, "stderr": point.stderr_nll,
                         "effective_members": point.mean_effective_members, "check_passed": point.samples,
                         "picked": index == at, "edge": index == at and at in (0, len(points) - 1),
                         "reason": chosen.reason if index == at else "", "seeds": tuning.seeds,
                         "holdout": tuning.holdout})
    if absent:
        raise StageIncomplete("--runs", str(stage.parent), f"the tuning stage's runs of every grid point (none there "
                              f"for {len(absent)}: {'; '.join(absent[:4])}{' ...' if len(absent) > 4 else ''}); run "
                              "the target again with --runs to finish them")
    frame = pd.DataFrame(rows)
    write_text(stage / TUNED_CSV, frame.to_csv(index=False))
    return frame


def read_picks(frame: pd.DataFrame) -> dict[str, float]:
    """The picks of a :data:`TUNED_CSV` as the table's placeholders' values."""
    picked = frame[frame.picked.astype(bool)]
    return {str(row.method): float(row.value) for row in picked.itertuples()}


def section(frame: pd.DataFrame, spec: TableSpec) -> list[str]:
    """The report's account of the tuning stage (its grid, seeds and hold-out as the CSV records them), then one row
    per method."""
    factors = sorted(set(frame.factor))
    lines = ["", "## The tuning stage", "",
             f"Before these runs, each method's `{spec.tuning.key}` was picked from {len(factors)} values "
             f"({', '.join(f'{f:g}' for f in factors)} x its recipe's) at seeds "
             f"{str(frame.seeds.iloc[0]).replace(',', ', ')} (not the table's), each run on the training split less "
             f"{float(frame.holdout.iloc[0]):.0%} held out (`data.holdout`) and scored on the held-out examples "
             "alone, by `csg-tune`'s rule (csg.evaluation.tuning: the least held-out NLL; within one standard error "
             "of it, the points whose sampling check passed at every seed, then the most effective members). A pick "
             "at the grid's edge is marked: the grid did not bracket it. These runs count in the table's cost beside "
             "its own.", ""]
    rows = [[row.method, f"{row.value:g}", f"{row.factor:g}", f"{row.heldout_nll:.4f} ({row.stderr:.4f})",
             f"{row.effective_members:.2f}", "yes" if row.check_passed else "no",
             "**at the edge**" if row.edge else "no"] for row in frame[frame.picked.astype(bool)].itertuples()]
    return lines + markdown_table(["method", "picked", "factor", "held-out NLL (se)", "effective members",
                                   "sampling check passed", "edge"], rows, align="lrrrrll")


def stage_folder(runs: Path) -> Path:
    """Where a table's tuning runs go: below its runs folder, which the table's own runs are read from without them."""
    return Path(runs) / TUNING_STAGE


STAGE_SETS = ("evaluation.reference", "data.holdout", "ood")  # the command's values of these stay out of the stage


def with_flags(spec: TableSpec, job, committed: bool) -> TableSpec:
    """``spec`` with the stage's grid and seeds of the command (``--tune-factors``, ``--tune-seeds``), checked: one
    line naming the flag for a bad value, or for another grid than the table's where the committed table is written."""
    from dataclasses import replace

    tuning, table_seeds = spec.tuning, set((job.seeds or spec.seeds[job.scale]).split(","))
    factors, seeds = tuning.factors, tuning.seeds
    if job.tune_factors is not None:
        try:
            factors = tuple(float(f) for f in job.tune_factors.split(","))
        except ValueError:
            factors = ()
        if not factors or not all(math.isfinite(f) and f > 0 for f in factors) or len(set(factors)) < len(factors):
            raise ConfigError("--tune-factors", job.tune_factors, "comma-separated distinct numbers > 0 (x each "
                              "method's recipe step, e.g. 0.25,0.5,1)")
        factors = tuple(sorted(factors))
    if job.tune_seeds is not None:
        from studies.experiments.job import checked_seeds

        seeds = ",".join(map(str, checked_seeds("--tune-seeds", job.tune_seeds)))
    if set(seeds.split(",")) & table_seeds:
        raise ConfigError("--tune-seeds", seeds, f"seeds none of the table's runs has (theirs: "
                          f"{', '.join(sorted(table_seeds, key=int))}): a step is not tuned on the seeds it is "
                          "scored on")
    if committed and (factors, seeds) != (tuning.factors, tuning.seeds):
        flag, value = ("--tune-factors", job.tune_factors) if factors != tuning.factors else ("--tune-seeds", seeds)
        raise ConfigError(flag, value, f"the table's tuning stage ({', '.join(f'{f:g}' for f in tuning.factors)} x "
                          f"the recipe's step at seeds {tuning.seeds}) to write the committed table; pass --out DIR "
                          "to write this table elsewhere")
    return replace(spec, tuning=replace(tuning, factors=factors, seeds=seeds))


def check_command(spec: TableSpec, overrides: list[str]) -> None:
    """A command that sets the tuned key itself is refused in one line: the stage sets it per method."""
    for override in overrides:
        if override.lstrip("+~").split("=", 1)[0] == spec.tuning.key:
            raise ConfigError(spec.tuning.key, override.split("=", 1)[-1], f"left to the target's tuning stage (it "
                              f"picks each method's {spec.tuning.key} on held-out training data; to run a step of "
                              "your own, train it with train.py, or pass --out and --add a method)")


def _check_points(sweeps: dict[str, list[str]], key: str, preset: str | None, overrides: list[str],
                  configs: Path) -> None:
    """Each method's run at its grid's largest ``key`` (its other points differ only in a smaller step and the
    seed), checked as train.py checks a command, before any run starts."""
    import csg
    from studies.experiments.launch import not_set_by
    from studies.experiments.sweeps import expected_runs

    base = [f"experiment={preset}"] if preset else []
    for name, sweep in sweeps.items():
        point = max(expected_runs([sweep]), key=lambda p: float(p[key]))
        own = [f"{k}={v}" for k, v in point.items()]
        message = csg.check_command([*base, *own, *not_set_by(own, overrides)], configs)
        if message is not None:
            raise ConfigError("tuning stage", f"{name}: {' '.join(own)}", f"a point train.py accepts; it refused: "
                              f"{message}")


def run_stage(spec: TableSpec, scale: str, epochs: int, preset: str | None, runs: Path, launcher: str,
              overrides: list[str], configs: Path, gpus_per_run: int | None = None) -> dict[str, float]:
    """Run the tuning stage's missing points (locally one command a point, so that a diverged point does not end its
    method's multirun; on SLURM one multirun a method), then pick: the table's tuned values."""
    from csg.reporting import DIVERGED
    from studies.experiments.launch import LaunchFailed, run_sweeps, without_launcher
    from studies.experiments.sweeps import expected_runs

    kept = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] not in STAGE_SETS]
    steps = recipe_steps(spec, scale, epochs, preset, without_launcher(kept), configs)
    folder = stage_folder(runs)
    sweeps = stage_sweeps(spec, scale, epochs, steps)
    _check_points(sweeps, spec.tuning.key, preset, without_launcher(kept), configs)
    for name, sweep in sweeps.items():
        if not _points(folder, spec, name, steps[name])[1]:
            continue  # finished by an earlier command in these --runs
        if launcher == "slurm":  # independent jobs: a diverged one ends only itself
            try:
                run_sweeps(preset, [sweep], folder, launcher, kept, folders=[name], gpus_per_run=gpus_per_run)
            except LaunchFailed:
                pass  # a diverged point is an outcome (its diverged.json); any other failure is named below
            continue
        for number, point in enumerate(expected_runs([sweep])):
            if any(any((folder / name / str(number)).glob(f"*/{done}")) for done in ("metrics.json", DIVERGED)):
                continue  # an outcome: finished, or diverged
            try:  # a multirun of one point: it runs as the table's runs run
                run_sweeps(preset, [[f"{k}={v}" for k, v in point.items()]], folder / name, launcher, kept,
                           folders=[str(number)])
            except LaunchFailed:
                pass
    return read_picks(pick_steps(folder, spec, steps))
