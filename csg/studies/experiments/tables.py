"""cSG-MCMC Tables 1-3 as sweeps of train.py and as paper-vs-reproduced tables.

A table is a :class:`TableSpec`: the experiment preset of each scale, the Hydra multiruns
that produce its runs (comma lists expand as in ``python train.py -m``), how a run maps to a
row label of the paper's table, and the metrics. :func:`report` aggregates the runs under a
directory with pandas: mean, standard error and number of seeds per (data set, method,
metric), the paper's value and the difference, the preset; every run of the sweeps that is
absent or unfinished is listed, never silently dropped.

A user's method can stand beside the paper's (``scripts/reproduce.py table1 --add "sampler=... sampler.name=mine"``):
it runs as the table's ``add_sweep`` with that sweep's ``sampler=`` choice replaced by the added overrides (same
preset, data, seeds and budget), the driver records it in the runs folder (:data:`ADDED`), and the report makes it
one more row, after the paper's, labelled by its ``sampler.name``, with no paper value.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from csg.io.atomic import atomic_write_text
from csg.errors import ConfigError, describe
from csg.studies.experiments import comparisons
from csg.studies.experiments.aggregate import mean_and_stderr, refuse_runs, runs_to_report
from csg.studies.experiments.comparisons import Claim
from csg.studies.paper import paper_tables

PAPER = "csgmcmc-iclr2020"
SCALES = ("full", "smoke")
GROUPS = ("sampler", "data", "model")  # config groups: a run records the choice as <group>.name

LABELS = {"sgd": "SGD", "sgdm": "SGDM", "snapshot_sgd": "Snapshot-SGD", "snapshot_sgdm": "Snapshot-SGDM",
          "sgld": "SGLD", "csgld": "cSGLD", "sghmc": "SGHMC", "csghmc": "cSGHMC"}


@dataclass(frozen=True)
class Metric:
    """A column of the paper's table: its name there, and how to read it from a run's ensemble metrics."""

    paper_name: str
    label: str
    read: Callable[[pd.Series], pd.Series]
    digits: int = 2
    paper_dataset: str | None = None  # the paper's data set of this column when not the run's (an OOD set)
    lower_is_better: bool = True
    # the equivalence margin of the comparisons (csg.studies.experiments.comparisons), in the metric's units, and why
    margin: float = math.nan
    margin_note: str = ""
    per_example: bool = False  # summed over the test set: the margin is per test example


POINTS = ("half a percentage point, 5 of the smoke scale's 1000 test images (50 of CIFAR's 10000): below the binomial "
          "standard error of one method's value on 1000 images (about 0.7 points at 5 % error)")
PER_IMAGE = "0.01 nats per test image, 5 % of a smoke-scale NLL of 0.2"
ERROR = Metric("test_error_pct", "test error %", lambda r: r["metrics.ensemble.test_error_pct"], margin=0.5,
               margin_note=POINTS)
NLL = Metric("test_nll", "NLL", lambda r: r["metrics.ensemble.nll"], digits=4, margin=0.01, margin_note=PER_IMAGE)
TOP1 = Metric("top1_pct", "top-1 %", lambda r: 100.0 - r["metrics.ensemble.test_error_pct"], digits=3,
              lower_is_better=False, margin=0.5, margin_note=POINTS)
TOP5 = Metric("top5_pct", "top-5 %", lambda r: 100.0 - r["metrics.ensemble.top5_error_pct"], digits=3,
              lower_is_better=False, margin=0.5, margin_note=POINTS)


@dataclass(frozen=True)
class TableSpec:
    """One paper table. ``sweeps`` are lists of train.py overrides with ``{data}``, ``{seeds}``,
    ``{epochs}`` and ``{half_epochs}`` filled in per scale (``epochs``: the preset's budget)."""

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


def _table2_label(run: pd.Series, budget: int) -> str:
    schedule = "Cyclical" if run["metrics.schedule"] == "cyclical" else "Decreasing"
    chains, epochs = int(run["metrics.chains"]), int(run["metrics.epochs"])
    kind = "Parallel" if chains > 1 else "Single"
    sampler = "SGHMC" if str(run["sampler.update_rule"]) == "sghmc" else "SGLD"
    return f"{schedule}+{kind} {sampler} ({_cost(epochs, chains, budget)})"


def _cost(epochs: int, chains: int, budget: int) -> str:
    """The paper's cost column at full scale ("#epochs per chain / #epochs in all chains", 200 epochs)."""
    per_chain = round(200 * epochs / budget)
    return f"{per_chain}/{per_chain * chains}"


ICSGLD_LABELS = {"csghmc": "cycSGHMC T4", "cycswag": "cycSWAG T4", "msgd": "M-SGD P4", "resghmc": "reSGHMC P4",
                 "icsghmc": "ICSGHMC P4"}
ACCURACY = Metric("test_acc_pct", "accuracy %", lambda r: 100.0 - r["metrics.ensemble.test_error_pct"],
                  lower_is_better=False, margin=0.5, margin_note=POINTS)
NLL_SUM = Metric("test_nll_sum", "NLL (sum)", lambda r: r["metrics.ensemble.nll"] * r["metrics.num_test"], digits=0,
                 margin=0.01, margin_note=PER_IMAGE + ", times the number of test images", per_example=True)
BRIER_OOD = Metric("brier_pct", "Brier on OOD %", lambda r: 100.0 * r["metrics.ood.ensemble.brier_ood"], digits=3,
                   paper_dataset="svhn_ood", margin=0.1,
                   margin_note="0.1 points, the size of the paper's standard errors of this column (0.04-0.15)")


def _icsgld_label(run: pd.Series, budget: int) -> str:
    return f"{ICSGLD_LABELS[run['sampler.name']]} / {run['model.name']}"


def _table2_paper_method(label: str) -> tuple[str, str]:
    """("Cyclical+Parallel SGLD", "total 200/800"): the paper's rows differ in the cost of their note."""
    method, cost = label.rsplit(" (", 1)
    return method, f"total {cost.rstrip(')')}"


TABLES: dict[str, TableSpec] = {
    "table1": TableSpec(
        name="table1",
        title="cSG-MCMC Table 1: test error (%) of ResNet-18 on CIFAR-10 and CIFAR-100",
        presets={"full": "table1", "smoke": "table1_smoke"},
        data={"full": "cifar10,cifar100", "smoke": "mnist5k"},
        paper_data=("cifar10", "cifar100"),
        seeds={"full": "0,1,2", "smoke": "0,1,2"},
        sweeps=(("sampler=sgd,sgdm,snapshot_sgd,snapshot_sgdm,sgld,csgld,sghmc,csghmc", "data={data}", "seed={seeds}"),),
        label=lambda run, budget: LABELS[run["sampler.name"]],
        metrics=(ERROR, NLL),
        add_sweep=0,
        claims=tuple(Claim(method, baseline, ("test_error_pct", "test_nll")) for method, baseline in (
            ("cSGLD", "SGLD"), ("cSGHMC", "SGHMC"), ("cSGLD", "Snapshot-SGD"), ("cSGHMC", "Snapshot-SGDM"))),
        claims_text="The paper's claims (Section 5.2, Table 1): cSG-MCMC \"significantly outperforms Snapshot ensembles "
                    "and the traditional SG-MCMC\": cSGLD against SGLD and Snapshot-SGD, cSGHMC against SGHMC and "
                    "Snapshot-SGDM, in test error (the paper's column) and NLL (ours).",
    ),
    "table2": TableSpec(
        name="table2",
        title="cSG-MCMC Table 2: test error (%) of 4 parallel chains against one, cyclical against decreasing",
        presets={"full": "table2", "smoke": "table2_smoke"},
        data={"full": "cifar10,cifar100", "smoke": "mnist5k"},
        paper_data=("cifar10", "cifar100"),
        seeds={"full": "0,1,2", "smoke": "0"},
        sweeps=(
            ("sampler=csgld,csghmc,sgld,sghmc", "sampler.chains=4", "data={data}", "seed={seeds}"),
            ("sampler=sgld,sghmc", "sampler.chains=4", "trainer.epochs={half_epochs}", "data={data}", "seed={seeds}"),
            ("sampler=csgld,csghmc", "sampler.chains=1", "data={data}", "seed={seeds}"),
        ),
        label=_table2_label,
        metrics=(ERROR, NLL),
        claims=tuple(Claim(method.format(s), baseline.format(s), ("test_error_pct", "test_nll"))
                     for method, baseline in (("Cyclical+Parallel {} (200/800)", "Decreasing+Parallel {} (200/800)"),
                                              ("Cyclical+Single {} (200/200)", "Decreasing+Parallel {} (100/400)"))
                     for s in ("SGLD", "SGHMC")),
        claims_text="The paper's claims (Section 5.2, Table 2): with 4 chains of the same length, the cyclical "
                    "schedule gives lower errors than the decreasing one; one cyclical chain beats 4 decreasing "
                    "chains of half its length (half the cost). Here in test error (the paper's column) and NLL (ours).",
        paper_method=_table2_paper_method,
        note="Cost: epochs per chain / epochs in all chains, in the paper's 200-epoch units at every scale.",
    ),
    "table3": TableSpec(
        name="table3",
        title="cSG-MCMC Table 3: ResNet-50 on ImageNet, NLL, top-1 and top-5 accuracy",
        presets={"full": "table3", "smoke": "table3_smoke"},
        data={"full": "imagenet", "smoke": "mnist5k"},
        paper_data=("imagenet",),
        seeds={"full": "0", "smoke": "0"},
        sweeps=(
            ("sampler=sgdm", "data={data}", "seed={seeds}"),
            ("sampler=sghmc", "sampler.samples_per_cycle=9", "data={data}", "seed={seeds}"),  # as many as cSGHMC
            ("sampler=snapshot_sgdm,csghmc", "sampler.cycles=3", "sampler.samples_per_cycle=3", "data={data}",
             "seed={seeds}"),
        ),
        label=lambda run, budget: LABELS[run["sampler.name"]],
        metrics=(NLL, TOP1, TOP5),
        add_sweep=2,  # an added method runs as cSGHMC does: 3 cycles of 3 samples
        claims=tuple(Claim("cSGHMC", baseline, ("test_nll",)) for baseline in ("SGHMC", "Snapshot-SGDM", "SGDM")),
        claims_text="The paper's claim (Section 5.2, Table 3): \"cSGHMC yields the lowest testing NLL\": cSGHMC against "
                    "SGHMC, Snapshot-SGDM and SGDM in NLL.",
    ),
    "icsgld_table1": TableSpec(
        name="icsgld_table1",
        title="ICSGLD Table 1: CIFAR-100 accuracy, NLL and Brier score out of distribution (SVHN)",
        presets={"full": "icsgld_table1", "smoke": "icsgld_table1_smoke"},
        data={"full": "cifar100", "smoke": "mnist5k"},
        paper_data=("cifar100",),
        seeds={"full": "0,1,2,3,4", "smoke": "0"},
        values={"full": {"models": "resnet20,resnet32,resnet56,wrn16_8", "resnets": "resnet20,resnet32,resnet56",
                         "wrn": "wrn16_8", "per_cycle": 5, "p4_samples": 100},
                "smoke": {"models": "mlp", "resnets": "mlp", "wrn": "", "per_cycle": 2, "p4_samples": 8}},
        sweeps=(
            ("sampler=csghmc", "sampler.cycles=10", "sampler.explore=0.85", "sampler.hold_sampling_lr=true",
             "sampler.samples_per_cycle={per_cycle}", "trainer.epochs={quad_epochs}", "model={models}", "data={data}",
             "seed={seeds}"),
            ("sampler=cycswag", "sampler.cycles=10", "sampler.samples_per_cycle={per_cycle}",
             "trainer.epochs={quad_epochs}", "model={models}", "data={data}", "seed={seeds}"),
            ("sampler=msgd", "model={models}", "data={data}", "seed={seeds}"),
            ("sampler=resghmc,icsghmc", "sampler.samples_per_cycle={p4_samples}", "model={resnets}", "data={data}",
             "seed={seeds}"),
            # WRN-16-8: the paper's correction 1000 and partition width 60 (per example: 0.02 and 0.0012)
            ("sampler=resghmc", "sampler.replica.correction=0.02", "sampler.samples_per_cycle={p4_samples}",
             "model={wrn}", "data={data}", "seed={seeds}"),
            ("sampler=icsghmc", "sampler.contour.width=0.0012", "sampler.samples_per_cycle={p4_samples}",
             "model={wrn}", "data={data}", "seed={seeds}"),
        ),
        label=_icsgld_label,
        metrics=(ACCURACY, NLL_SUM, BRIER_OOD),
        claims=tuple(Claim(f"ICSGHMC P4 / {model}", f"{baseline} / {model}", ("test_acc_pct", "test_nll_sum", "brier_pct"))
                     for model in ("mlp", "resnet20", "resnet32", "resnet56", "wrn16_8")
                     for baseline in ("cycSGHMC T4", "cycSWAG T4", "M-SGD P4", "reSGHMC P4")),
        claims_text="The paper's claim (Section 5.4, Table 1): ICSGHMC P4 \"consistently performs remarkable in both "
                    "ACC and NLL and performs comparable to M-SGD P4 in Brier scores\": ICSGHMC P4 against each of "
                    "cycSGHMC T4, cycSWAG T4, M-SGD P4 and reSGHMC P4 per model, in accuracy, NLL and Brier on OOD.",
        paper_method=lambda label: (label.split(" / ")[0], None),
        note="P4: 4 chains of the preset's epochs (interacting ones run as 4 processes); T4: one chain of 4 x the "
             "epochs. NLL is summed over the test set, as in the paper (10000 CIFAR images; 1000 digits at smoke "
             "scale). Brier on OOD: mean over OOD inputs of (1/C) sum_c p_c^2 (the authors' script). At smoke "
             "scale the paper's column is its ResNet-20 row.",
        paper="icsgld-iclr2022",
        paper_model="resnet20",
        processes={3: 4, 4: 4, 5: 4},
    ),
}


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


def expand(spec: TableSpec | SweepPlan, scale: str, epochs: int, seeds: str | None = None) -> list[list[str]]:
    """The overrides of each multirun of ``spec`` at ``scale`` (comma lists left for Hydra to expand).

    A sweep with an empty value (a model this scale does not have) becomes an empty list: nothing to run."""
    values = {"data": spec.data.get(scale, ""), "seeds": seeds or spec.seeds[scale], "epochs": epochs,
              "half_epochs": max(1, epochs // 2), "quad_epochs": 4 * epochs, **spec.values.get(scale, {})}
    sweeps = [[override.format(**values) for override in sweep] for sweep in spec.sweeps]
    return [[] if any(o.endswith("=") for o in sweep) else sweep for sweep in sweeps]


def expected_runs(sweeps: list[list[str]]) -> list[dict[str, str]]:
    """Every run the multiruns make: one dict of key -> value per combination."""
    runs = []
    for sweep in filter(None, sweeps):
        keys, choices = zip(*(override.split("=", 1) for override in sweep))
        for combination in itertools.product(*(choice.split(",") for choice in choices)):
            runs.append(dict(zip(keys, combination)))
    return runs


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
    from csg.io.trust import read_bytes

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
        raise ConfigError("--runs", str(runs_dir), f"a folder whose {ADDED} is the driver's record of the methods "
                          f"--add added: it cannot be read ({describe(error, 120)})") from None
    return record


def read_added(runs_dir: str | Path, table: str) -> dict[str, list[str]]:
    """The methods the driver added to ``table`` in ``runs_dir`` (name -> overrides; none without a record)."""
    return {str(name): [str(o) for o in overrides] for name, overrides in _record(runs_dir).get(table, {}).items()}


def record_added(runs_dir: str | Path, table: str, methods: dict[str, list[str]]) -> None:
    """Add ``methods`` (name -> overrides) to ``table``'s record in ``runs_dir``, keeping the methods already there."""
    record = _record(runs_dir)
    record.setdefault(table, {}).update(methods)
    atomic_write_text(Path(runs_dir) / ADDED, json.dumps(record, indent=2) + "\n")


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
    """The comparisons section's rows (:func:`csg.studies.experiments.comparisons.compare`): the paper's claims of
    ``spec`` on the runs of :func:`per_run`, one Holm family for the whole table."""
    if frame.empty or not spec.claims:
        return pd.DataFrame()
    return comparisons.compare(frame, spec.claims, spec.metrics)


def aggregate(spec: TableSpec, runs: pd.DataFrame, scale: str, budget: int, preset: str, added=()) -> pd.DataFrame:
    """One row per (data set, method, metric): ours (mean, stderr, seeds) beside the paper's value.

    Finished runs that are not rows of the table (see :func:`labelled`) are left out. The methods in ``added``
    (names) follow the table's own, in their order, and have no paper value."""
    done, _ = labelled(spec, runs, budget, added)
    added_labels = list(dict.fromkeys(added_label(name) for name in added))
    paper = _paper_values(spec)
    if done.empty:
        return pd.DataFrame()
    rows = []
    for metric in spec.metrics:
        done["value"] = _read(metric, done)
        summary = mean_and_stderr(done, ["data.name", "method"], "value")
        for row in summary.itertuples():
            same = done[(done["data.name"] == row[1]) & (done.method == row[2])]
            seeds = sorted(int(s) for s in same.seed)
            paper_method, note = spec.paper_method(row[2])
            paper_rows = paper[(paper.method == paper_method) & (paper.metric == metric.paper_name)]
            if note is not None:
                paper_rows = paper_rows[paper_rows.note.str.contains(note, regex=False)]
            if spec.paper_model is not None:
                model = spec.paper_model if scale == "smoke" else str(same["model.name"].iloc[0])
                paper_rows = paper_rows[paper_rows.model == model]
            if row[2] in added_labels:
                paper_rows = paper_rows.iloc[0:0]  # not the paper's method, whatever its name
            for paper_data in (spec.paper_data if scale == "smoke" else (row[1],)):
                match = paper_rows[paper_rows.dataset == (metric.paper_dataset or paper_data)]
                value = float(match.value.iloc[0]) if len(match) else float("nan")
                rows.append({
                    "table": spec.name, "scale": scale, "preset": preset, "data": row[1], "paper_data": paper_data,
                    "method": row[2], "metric": metric.paper_name, "mean": row.mean, "stderr": row.stderr,
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


def report(name: str, runs_dir: str | Path, out_dir: str | Path, scale: str, *, epochs: int,
           seeds: str | None = None, preset: str | None = None) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """Write ``out_dir/<name>.csv`` and ``.md`` from the runs under ``runs_dir``; returns (table, missing runs).

    A folder that does not exist, or holds no finished run of the table, is a :class:`~csg.errors.ConfigError`
    (``--runs``) and nothing is written."""
    spec = TABLES[name]
    runs = runs_to_report(runs_dir, name)
    added = read_added(runs_dir, name) if spec.add_sweep is not None else {}
    preset = preset or spec.presets[scale]
    expected = expected_runs(expand(spec, scale, epochs, seeds)) + added_runs(spec, scale, epochs, seeds, added)
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
    atomic_write_text(out_dir / f"{name}.csv", table.to_csv(index=False))
    atomic_write_text(out_dir / f"{name}_runs.csv", frame.to_csv(index=False))
    if spec.claims:
        atomic_write_text(out_dir / f"{name}_comparisons.csv", verdicts.to_csv(index=False))
    atomic_write_text(out_dir / f"{name}.md", text)
    return table, missing


def _cell(mean: float, stderr: float, digits: int) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f}" + (f" +- {stderr:.{digits}f}" if not math.isnan(stderr) else "")


def markdown(spec: TableSpec, table: pd.DataFrame, scale: str, preset: str, runs_dir, missing, unfinished,
             others=(), added=None, protocol: str = "", verdicts: pd.DataFrame | None = None) -> str:
    command = f"make {spec.name.replace('_', '-')}" + (" SCALE=smoke" if scale == "smoke" else "")
    lines = [f"# {spec.title}" + (" (SMOKE SCALE)" if scale == "smoke" else ""), ""]
    if scale == "smoke":
        lines.append(
            f"Scale: **smoke**: the paper's methods, schedules and sweep on data these CPU machines hold (the 5000 "
            f"shipped MNIST digits, MLP 784-200-200-200-10, preset `experiment={preset}`), not the paper's data and "
            "model: our numbers prove the pipeline and compare the methods with each other; beside them stands the "
            "paper's number on each of its data sets, for reading the ranking, not for a difference.")
    else:
        lines.append(f"Scale: **full** (preset `experiment={preset}`): the paper's data, model and budget.")
    seeds = sorted({s for cell in table.get("seed_list", pd.Series(dtype=str)) for s in cell.split()}, key=int)
    lines += ["", f"Seeds: {', '.join(seeds) or 'none'}; mean +- standard error over seeds (one seed: no error), the "
              "number of seeds in brackets; the paper's columns appear for the metrics it publishes. "
              f"Runs: `{runs_dir}`. Command: `{command}`." + (f" {spec.note}" if spec.note else ""), ""]
    if added:
        lines += ["Added methods (`--add`; not the paper's, no paper value), each run with the table's preset, budget "
                  f"and `{protocol}`: "
                  + "; ".join(f"{added_label(name)}: `{' '.join(overrides)}`" for name, overrides in added.items()), ""]
    if table.empty:
        lines.append("No finished runs.")
    for data, block in (table.groupby("data", sort=False) if not table.empty else []):
        paper_sets = list(dict.fromkeys(block.paper_data))
        published = {m.paper_name: bool(block[block.metric == m.paper_name].paper.notna().any()) for m in spec.metrics}
        header = ["method"]
        for metric in spec.metrics:
            header.append(f"{metric.label}, ours")
            if published[metric.paper_name]:  # the paper's columns only where it published the metric
                header += [f"{metric.label}, paper ({metric.paper_dataset or p})" for p in paper_sets]
                if scale == "full":
                    header.append(f"{metric.label}, difference")
        lines += [f"## {data}", "", "| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
        for method in dict.fromkeys(block.method):
            cells = [method]
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
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
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
