"""What a paper table is, and which runs it expects.

A table is a :class:`TableSpec`: the experiment preset of each scale, the Hydra multiruns that produce its runs
(comma lists expand as in ``python train.py -m``), how a run maps to a row label of the paper's table, and the
metrics (each a :class:`Metric`). A target whose report is its own (Table 5, Figure 4) is a :class:`SweepPlan`.
:func:`expand` fills a table's sweeps in at a scale, :func:`expected_runs` lists every run they make and
:func:`missing_runs` those without a finished run. The tables: :mod:`studies.experiments.tables`; their
reports: :mod:`studies.experiments.table_report`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from studies.experiments.comparisons import Claim

PAPER = "csgmcmc-iclr2020"
GROUPS = ("sampler", "data", "model")  # config groups: a run records the choice as <group>.name


@dataclass(frozen=True)
class Metric:
    """A column of the paper's table: its name there, and how to read it from a run's ensemble metrics."""

    paper_name: str
    label: str
    read: Callable[[pd.Series], pd.Series]
    digits: int = 2
    paper_dataset: str | None = None  # the paper's data set of this column when not the run's (an OOD set)
    lower_is_better: bool = True
    # the equivalence margin of the comparisons (studies.experiments.comparisons), in the metric's units, and why
    margin: float = math.nan
    margin_note: str = ""
    per_example: bool = False  # summed over the test set: the margin is per test example


TUNED = "<tuned>"  # a tuned placeholder's value until the tuning stage has picked it


@dataclass(frozen=True)
class Tuning:
    """A table's tuning stage, run before its sweeps (:mod:`studies.experiments.tuning_stage`): each method
    (placeholder name -> the sweep overrides that make it, placeholders of :class:`TableSpec` filled in) runs at
    ``factors`` x its recipe's ``key`` on the training split less the share ``holdout`` (``data.holdout``), at
    ``seeds`` disjoint from the table's, and :func:`csg.evaluation.tuning.pick` chooses its value from the held-out
    examples alone; the table's sweeps name it as ``{<placeholder>}``."""

    methods: dict[str, tuple[str, ...]]
    factors: tuple[float, ...]
    seeds: str
    holdout: float
    key: str = "sampler.lr0"


@dataclass(frozen=True)
class TableSpec:
    """One paper table. ``sweeps`` are lists of train.py overrides with ``{data}``, ``{seeds}``, ``{epochs}``,
    ``{half_epochs}``, ``{quarter_epochs}`` and ``{quad_epochs}`` filled in per scale (``epochs``: the preset's
    budget)."""

    name: str
    title: str
    presets: dict[str, str]
    data: dict[str, str]
    paper_data: tuple[str, ...]
    seeds: dict[str, str]
    sweeps: tuple[tuple[str, ...], ...]
    label: Callable[[pd.Series, int], str]
    metrics: tuple[Metric, ...]
    # a row label -> (the paper's method name, a text its note must contain, or None)
    paper_method: Callable[[str], tuple[str, str | None]] = field(default=lambda label: (label, None))
    note: str = ""
    paper: str = PAPER
    # the paper's model to compare a row with: a run's model at full scale, this one at smoke scale (None: any)
    paper_model: str | None = None
    # sweep index -> processes per run (chains that interact run under torchrun / SLURM tasks)
    processes: dict[int, int] = field(default_factory=dict)
    # scale -> more values for the sweeps' {placeholders}
    values: dict[str, dict[str, object]] = field(default_factory=dict)
    # the sweep an added method (--add) runs as, its `sampler=` choice replaced (None: the table takes no --add)
    add_sweep: int | None = None
    # the comparisons the paper makes (row labels), and where it makes them: the report's comparisons section
    claims: tuple[Claim, ...] = ()
    claims_text: str = ""
    # a row label -> which baseline it is by its step size (the "step size" column): decreasing, constant, ...
    step: Callable[[str], str] = field(default=lambda label: "-")
    # what the full scale is, where not "the paper's data, model and budget"
    full_scale: str = ""
    # GPUs (and processes) of each SLURM job where a sweep has no processes of its own (None: the launcher's)
    gpus_per_run: int | None = None
    # a stage that tunes each method's step before the sweeps run (None: the sweeps run the presets' steps)
    tuning: Tuning | None = None


@dataclass(frozen=True)
class SweepPlan:
    """The multiruns of a paper target whose report is its own (Table 5, Figure 4): the fields of a
    :class:`TableSpec` that :func:`expand` reads. ``presets[scale]`` None: the sweeps pick the presets."""

    presets: dict[str, str | None]
    seeds: dict[str, str]
    sweeps: tuple[tuple[str, ...], ...]
    data: dict[str, str] = field(default_factory=dict)
    processes: dict[int, int] = field(default_factory=dict)
    values: dict[str, dict[str, object]] = field(default_factory=dict)


def placeholders(spec: TableSpec | SweepPlan, scale: str, epochs: int, seeds: str | None = None) -> dict[str, object]:
    """The values of the ``{placeholders}`` of ``spec``'s sweeps at ``scale`` (a tuned one: :data:`TUNED`)."""
    tuning = getattr(spec, "tuning", None)
    return {"data": spec.data.get(scale, ""), "seeds": seeds or spec.seeds[scale], "epochs": epochs,
            "half_epochs": max(1, epochs // 2), "quad_epochs": 4 * epochs,
            "quarter_epochs": max(1, epochs // 4), **spec.values.get(scale, {}),
            **({name: TUNED for name in tuning.methods} if tuning else {})}


def expand(spec: TableSpec | SweepPlan, scale: str, epochs: int, seeds: str | None = None,
           tuned: dict[str, object] | None = None) -> list[list[str]]:
    """The overrides of each multirun of ``spec`` at ``scale`` (comma lists left for Hydra to expand).

    A sweep with an empty value (a model this scale does not have) becomes an empty list: nothing to run. A table
    with a tuning stage takes its picks as ``tuned`` (placeholder -> value); without them, the overrides that name
    a tuned value are left out (the sweeps as the presets' steps would run them, what the protocol composes)."""
    values = {**placeholders(spec, scale, epochs, seeds), **(tuned or {})}
    sweeps = [[o for o in (override.format(**values) for override in sweep) if not o.endswith(f"={TUNED}")]
              for sweep in spec.sweeps]
    return [[] if any(o.endswith("=") for o in sweep) else sweep for sweep in sweeps]


def expected_runs(sweeps: list[list[str]]) -> list[dict[str, str]]:
    """Every run the multiruns make: one dict of key -> value per combination."""
    runs = []
    for sweep in filter(None, sweeps):
        keys, choices = zip(*(override.split("=", 1) for override in sweep))
        for combination in itertools.product(*(choice.split(",") for choice in choices)):
            runs.append(dict(zip(keys, combination)))
    return runs


def _run_value(run: pd.Series, key: str) -> str:
    column = f"{key}.name" if key in GROUPS else key
    value = run.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return str(value).lower()  # as typed in an override
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def missing_runs(runs: pd.DataFrame, expected: list[dict[str, str]]) -> list[dict[str, str]]:
    """The expected runs without a finished run (a metrics.json) that matches all their keys."""
    done = runs[runs.status == "done"] if not runs.empty else runs
    missing = []
    for wanted in expected:
        if not any(all(_run_value(run, k) == v for k, v in wanted.items()) for _, run in done.iterrows()):
            missing.append(wanted)
    return missing
