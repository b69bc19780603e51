"""Every paper target, one registry: what ``make <target>`` and ``scripts/reproduce.py <target>`` run.

A :class:`Target` runs its experiments (Hydra multiruns of ``train.py``, studies on analytic targets, or
in-process jobs) and writes its tables and figures under ``results/<paper>/`` (``.../smoke/`` at smoke
scale). Every target reads the same :class:`Job` (``--scale``, ``--launcher``, ``--seeds``,
``--report-only``, ``--runs``, ``--preset``, ``--out``, ``--add``, and ``KEY=VALUE`` overrides); a flag a
target has no use for is a one-line error naming the targets that take it, before anything runs. ``--seeds``
are the seeds themselves (each once), for every target that takes them.

The committed results of a sweep target are written only from runs of its protocol
(:mod:`studies.experiments.protocol`); other runs, or a command that would make them, need ``--out``.

``--add "OVERRIDES"`` (Tables 1 and 3) runs a user's method beside the paper's: the table's protocol sweep
(:attr:`~studies.experiments.sweeps.TableSpec.add_sweep`) with its ``sampler=`` choice replaced by the overrides,
under the same preset, data, seeds, budget and ``KEY=VALUE`` overrides, into ``<runs>/add_<sampler.name>``;
the table shows it as one more row (:mod:`studies.experiments.table_report`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from csg.errors import ConfigError
from studies.experiments import fig3, fig4, protocol, table5, tables
from studies.experiments import tuning_stage as stage
from studies.experiments.added import added_label, added_protocol, read_added, record_added
from studies.experiments.aggregate import load_runs, runs_to_report
from studies.experiments.in_process import (checked_options, run_accuracy, run_accuracy_multimodal, run_bandit,
                                                run_fig1, run_part_sampling, run_reference, run_reference_multimodal,
                                                run_uci_regression, simulation_report, variance_report)
from studies.experiments.job import FLAGS, Job, checked_seeds
from csg.paths import CONFIGS
from studies.experiments.launch import added_method, newest_runs, preset_epochs, run_study, run_sweeps
from studies.experiments.sweeps import TableSpec, expand, expected_runs
from studies.experiments.table_report import RUNS_CSV, is_runs_csv
from studies.experiments.table_report import report as table_report

LETTERS = Path("data") / "generated_notmnist"  # the notMNIST-style letters of the smoke-scale OOD targets



def _reference_network(job: Job) -> list[str]:
    from studies.benchmark.run import run_reference_network

    return run_reference_network(job)


def _reference_cifar10(job: Job) -> list[str]:
    from studies.benchmark.run import run_reference_cifar10

    return run_reference_cifar10(job)


def _override(job: Job, key: str) -> str | None:
    """The value of the last ``KEY=VALUE`` override of ``key`` in the command (None: not given)."""
    given = [o.split("=", 1)[1] for o in job.overrides if o.split("=", 1)[0] == key]
    return given[-1] if given else None


def _with_reference(make: Callable[[Job], list[str]]) -> Callable[[Job], list[str]]:
    """The full-scale benchmark's sweeps, once its reference predictive is there (the preset's, or the user's
    ``evaluation.reference=``): else one line saying how to make it, before anything runs."""

    def checked(job: Job) -> list[str]:
        from studies.benchmark.run import CIFAR10_REFERENCE

        reference = Path(_override(job, "evaluation.reference")
                         or Path("results") / "benchmark" / "reference" / CIFAR10_REFERENCE)
        if not job.report_only and not reference.is_file():
            raise ConfigError("evaluation.reference", str(reference), "an existing reference .npz: make "
                              "reference-cifar10 ARGS=\"probs=... test_x=... test_y=...\" writes it from Izmailov et "
                              "al.'s starter-kit files")
        epochs = preset_epochs(job.preset or tables.TABLES["posterior_benchmark_cifar10"].presets["full"],
                               list(job.overrides))
        if not job.report_only and epochs % 4:
            raise ConfigError("trainer.epochs", epochs, "a multiple of 4: the 4-chain rows run a quarter of it each, "
                              "at the same gradients as the others")
        return make(job)

    return checked


def _posterior_benchmark(job: Job) -> list[str]:
    from studies.benchmark.run import run_posterior_benchmark

    return run_posterior_benchmark(job)


@dataclass(frozen=True)
class Target:
    name: str
    what: str
    paper_dir: str                  # results/<paper_dir>
    make: Callable[[Job], list[str]]  # runs the target (or only reports); returns the lines to print
    scales: tuple[str, ...] = ("full",)
    flags: frozenset[str] = field(default_factory=frozenset)  # the FLAGS it takes

    def check(self, job: Job) -> None:
        """A one-line error for a scale or a flag this target does not take."""
        if job.scale not in self.scales:
            raise ConfigError("--scale", job.scale, f"{' or '.join(self.scales)} for {self.name}")
        if job.seeds is not None:
            checked_seeds("--seeds", job.seeds)
        for flag, default in FLAGS.items():
            value = getattr(job, flag)
            if value != default and flag not in self.flags:
                takers = [name for name, target in TARGETS.items() if flag in target.flags]
                raise ConfigError(f"--{flag.replace('_', '-')}", value[0] if flag == "add" else value,
                                  f"not used by {self.name}; the targets that take it: {', '.join(takers)}")
        if job.add and job.report_only:
            raise ConfigError("--add", job.add[0], "methods to run, and --report-only runs nothing (it reports the "
                              "added methods that its --runs folder records)")


def default_out(target: Target, scale: str) -> Path:
    return Path("results") / target.paper_dir / ("smoke" if scale == "smoke" else "")


def _letters(job: Job) -> None:
    """The smoke scale's OOD letters (scripts/make_letters.py), drawn once."""
    if job.scale == "smoke" and not (LETTERS / "J").is_dir():
        from csg.data.notmnist import render_letters

        render_letters(LETTERS, 200, 0)
        print(f"wrote 2000 letters to {LETTERS}")


def _sweeps(plan, report: Callable[[Job, Path, int, str | None], list[str]], prepare=None) -> Callable[[Job], list[str]]:
    """A target made of multiruns: run the sweeps of ``plan`` (unless --report-only), then ``report``.

    The committed table (``results/<paper>[/smoke]``) is written only from runs of the table's protocol
    (:mod:`studies.experiments.protocol`: its preset and budget, methods and seeds; runs missing from the sweep are
    listed by the report, not refused). Any other command or runs folder needs ``--out``: without it, one line says
    what differs, before anything runs or is written; with it, the table's header says so."""

    def make(job: Job) -> list[str]:
        preset = job.preset or plan.presets[job.scale]
        folder = preset or job.target  # its runs: multirun/<folder>/<date>
        epochs = preset_epochs(preset, list(job.overrides)) if preset else 0
        own = plan.presets[job.scale]  # the table's preset, and its budget: the protocol
        protocol_epochs = preset_epochs(own, []) if own else 0
        committed = _committed(job)
        tuned_plan = None  # with a tuning stage: the plan with the stage's grid and seeds (--tune-factors, --tune-seeds)
        if getattr(plan, "tuning", None) is not None:
            stage.check_command(plan, list(job.overrides))
            tuned_plan = stage.with_flags(plan, job, committed)

        def compare(runs: Path, frame, *, before: bool) -> protocol.Check:
            check = protocol.check_command(plan, job.scale, protocol_epochs, own, preset=job.preset, seeds=job.seeds,
                                           overrides=list(job.overrides), configs=CONFIGS, compose=before)
            if frame is not None:
                added = read_added(runs, plan.name) if getattr(plan, "add_sweep", None) is not None else {}
                found = protocol.check_runs(plan, job.scale, protocol_epochs, own, frame, CONFIGS, added)
                check.items += found.items
                check.coverage = found.coverage
            if check and committed:
                _refuse_protocol(job, check, runs, before)
            return check

        if job.report_only:
            runs = job.runs or _newest_or_record(plan, folder, job)
            if isinstance(plan, TableSpec) and is_runs_csv(runs):  # a per-run record: the committed one, or --out
                check = protocol.check_command(plan, job.scale, protocol_epochs, own, preset=job.preset,
                                               seeds=job.seeds, overrides=list(job.overrides), configs=CONFIGS,
                                               compose=False)
                record = default_out(TARGETS[job.target], job.scale) / f"{_name(job)}{RUNS_CSV}"
                if not Path(runs).resolve() == record.resolve():
                    check.items.append(f"a per-run record other than the committed table's ({record})")
                if check and committed:
                    _refuse_protocol(job, check, runs, False)
            else:
                check = compare(runs, runs_to_report(runs, _name(job)), before=False)  # no finished runs: refused
        else:
            runs = job.runs or Path("multirun") / folder / job.stamp
            added = _added(plan, job, preset, epochs, runs)  # refused in one line before anything runs
            compare(runs, _finished(runs), before=True)  # the command, and the runs already in --runs
            if prepare is not None:
                prepare(job)
            if added:  # first: a user's method that fails, fails before the paper's runs
                record_added(runs, plan.name, {name: overrides for name, overrides, _ in added})
                run_sweeps(preset, [sweep for _, _, sweep in added], runs, job.launcher, list(job.overrides),
                           folders=[f"add_{name}" for name, _, _ in added])
            tuned = None if tuned_plan is None else stage.run_stage(  # each method's step, on held-out training data
                tuned_plan, job.scale, epochs, preset, runs, job.launcher, list(job.overrides), CONFIGS,
                plan.gpus_per_run)
            run_sweeps(preset, expand(plan, job.scale, epochs, job.seeds, tuned), runs, job.launcher,
                       list(job.overrides), plan.processes, gpus_per_run=getattr(plan, "gpus_per_run", None))
            check = compare(runs, load_runs(runs), before=False)
        lines = report(job, runs, epochs, preset)
        if check:
            protocol.mark(job.out / f"{_name(job)}.md", check, job.out)
            lines.append(f"{job.target}: not the table's protocol (said so in its header): {check.text()}")
        return lines

    return make


def _newest_or_record(plan, folder: str, job: Job) -> Path:
    """What ``--report-only`` reads without ``--runs``: the newest ``multirun/<folder>/<date>``; for a table when
    there is none (a fresh clone), its committed per-run record ``<out>/<table>_runs.csv``."""
    try:
        return newest_runs(folder)
    except ConfigError:
        record = job.out / f"{_name(job)}{RUNS_CSV}"
        if isinstance(plan, TableSpec) and record.is_file():
            return record
        raise


def _name(job: Job) -> str:
    """The report's name: its Markdown file is ``<out>/<name>.md``."""
    return job.target.replace("-", "_")


def _committed(job: Job) -> bool:
    """Whether ``job`` writes into the committed results (results/<paper>[/smoke]), typed as --out or not."""
    committed = default_out(TARGETS[job.target], job.scale)  # of the working folder (the repository's: committed)
    return Path(job.out).resolve() == committed.resolve()


def _finished(runs: Path):
    """The runs already in a --runs folder that a run of the target adds to (None: no finished run there yet)."""
    if not runs.is_dir():
        return None
    frame = load_runs(runs)
    return frame if len(frame) and (frame.status == "done").any() else None


def _refuse_protocol(job: Job, check: protocol.Check, runs: Path, before: bool) -> None:
    where = default_out(TARGETS[job.target], job.scale)
    why = (f"the protocol of {job.target} ({check.against()}, its methods and seeds) to write the committed table in "
           f"{where}")
    if job.report_only or not before or check.flag is None:
        key, value, subject = "--runs", str(runs), "runs of"
        if not job.report_only and not before:
            why += f" (the runs stay in {runs}; --report-only --runs {runs} --out DIR reports them)"
        raise ConfigError(key, value, f"{subject} {why}; they differ: {check.text()}; pass --out DIR to write this "
                          "table elsewhere")
    key, value = check.flag
    raise ConfigError(key, value, f"{why}; this command differs: {check.text()}; pass --out DIR to write this table "
                      "elsewhere")


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")  # an added method's sampler.name: a row and a folder name


def _added(spec, job: Job, preset: str | None, epochs: int, runs: Path) -> list[tuple[str, list[str], list[str]]]:
    """The methods of ``--add``, each (its sampler.name, its overrides, the sweep it runs as), checked: train.py
    would take every run of its sweep, and its name is its own (not one of the table's methods, nor another's)."""
    if not job.add:
        return []
    read_added(runs, spec.name)  # a damaged record in --runs: refused now, not after the runs
    protocol = added_protocol(spec, job.scale, epochs, job.seeds)
    fixed = {override.split("=", 1)[0] for override in protocol} | {"trainer.epochs"}  # the same for every method
    own = {run["sampler"] for run in expected_runs(expand(spec, job.scale, epochs, job.seeds))}
    taken = {added_label(name): f"{spec.name}'s {added_label(name)}" for name in own}
    added = []
    for text in job.add:
        overrides, name = added_method(text, preset, protocol, list(job.overrides), runs, fixed)
        if not NAME.fullmatch(name):
            raise ConfigError("--add", text, f"a method whose sampler.name is a row and a folder name (letters, "
                              f"digits, _ . + -): it is {name!r}; name it with sampler.name=<name>")
        label = added_label(name)
        if label in taken:
            raise ConfigError("--add", text, f"a method of its own name: sampler.name={name} is {taken[label]} "
                              "already; name it with sampler.name=<name>")
        taken[label] = "another --add's name"
        added.append((name, overrides, [*protocol, *overrides]))
    return added


def _missing(lines: list[str], missing: list[dict[str, str]]) -> list[str]:
    return lines + ["missing run: " + " ".join(f"{k}={v}" for k, v in run.items()) for run in missing]


def _table_report(job: Job, runs: Path, epochs: int, preset: str | None) -> list[str]:
    name = tables.TABLES[job.target.replace("-", "_")].name
    _, missing = table_report(name, runs, job.out, job.scale, epochs=epochs, seeds=job.seeds, preset=preset)
    return _missing([f"{job.target}: wrote {job.out / (name + '.md')} from {runs}"], missing)


def _fig3_report(job: Job, runs: Path, epochs: int, preset: str | None) -> list[str]:
    missing = fig3.report(runs, job.out, job.scale, epochs=epochs, seeds=job.seeds,
                          data_root=_override(job, "data.root"))  # the user's own
    return _missing([f"fig3: wrote {job.out / 'fig3.md'} from {runs}"], missing)


def _own_report(report: Callable[[Path, Path], object], name: str):
    def write(job: Job, runs: Path, epochs: int, preset: str | None) -> list[str]:
        report(runs, job.out)
        return [f"{name}: wrote {job.out / (name + '.md')} from {runs}"]

    return write


def _studies(*studies: str, report: Callable[[Path], Path] | None = None) -> Callable[[Job], list[str]]:
    """A target made of studies on analytic targets (configs/synthetic/), each one ``train.py synthetic=...``;
    with ``--report-only``, ``report(out)`` rewrites the Markdown from the CSVs a previous run left in ``out``."""

    def make(job: Job) -> list[str]:
        if job.report_only:
            checked_options(job, {})
            return [f"{job.target}: wrote {report(job.out)}"]
        for study in studies:
            run_study(study, job.out, Path("runs") / study / job.stamp, list(job.overrides))
        return [f"{job.target}: wrote {', '.join(studies)} into {job.out}"]

    return make


SWEEP_FLAGS = frozenset(FLAGS) - {"add", "tune_factors", "tune_seeds"}
TABLE_FLAGS = SWEEP_FLAGS | {"add"}  # the tables whose methods are rows: a user's method can be one more
BOTH = ("full", "smoke")
_TABLES = {name: _sweeps(tables.TABLES[name], _table_report) for name in ("table1", "table2", "table3")}

TARGETS: dict[str, Target] = {target.name: target for target in (
    Target("table1", "cSG-MCMC Table 1: ResNet-18 on CIFAR-10/100, 8 methods and 2 constant-step baselines (smoke: "
           "MNIST digits, MLP)",
           "csgmcmc", _TABLES["table1"], BOTH, TABLE_FLAGS),
    Target("table2", "cSG-MCMC Table 2: 4 parallel chains against one, cyclical against decreasing",
           "csgmcmc", _TABLES["table2"], BOTH, SWEEP_FLAGS),
    Target("table3", "cSG-MCMC Table 3: ResNet-50 on ImageNet", "csgmcmc", _TABLES["table3"], BOTH, TABLE_FLAGS),
    Target("table4", "cSG-MCMC Table 4, Figures 2 and 5: 25-Gaussian mode coverage (CPU, under a minute)",
           "csgmcmc", _studies("table4")),
    Target("table5", "cSG-MCMC Table 5: ESS of Bayesian logistic regression, and ESS against the step up to the "
           "stability limit (in-process chains, CPU, minutes; --report-only: from the committed CSVs, or the "
           "train.py runs of --runs)", "csgmcmc", table5.run, flags=frozenset({"seeds", "report_only", "runs"})),
    Target("fig1", "cSG-MCMC Figure 1: the two step-size schedules (seconds)", "csgmcmc", run_fig1),
    Target("fig3", "cSG-MCMC Figure 3: MDS, interpolation between samples, error against cycles", "csgmcmc",
           _sweeps(fig3.SPEC, _fig3_report), BOTH, SWEEP_FLAGS),
    Target("fig4", "cSG-MCMC Figure 4: entropy on notMNIST (smoke: letters drawn from fonts)", "csgmcmc",
           _sweeps(fig4.SWEEPS, _own_report(fig4.report, "fig4"), prepare=_letters), BOTH, SWEEP_FLAGS),
    Target("reference", "NUTS reference posteriors (NumPyro; the reference extra)", "csgmcmc", run_reference),
    Target("accuracy", "Table 5's samplers against the NUTS references (CPU, ~20 min)", "csgmcmc", run_accuracy,
           BOTH, frozenset({"seeds", "report_only"})),
    Target("reference-multimodal", "the multimodal network with real barriers: its minima, minimum-energy paths and "
           "the reference of its mode weights (importance sampling, checked by tempered SMC; NUTS and parallel tempering "
           "reported; NumPyro: the reference extra)", "csgmcmc",
           run_reference_multimodal),
    Target("reference-network", "the posterior benchmark's reference: full-batch NUTS on an MLP 49-32-10 on 1000 real "
           "digits at T = 1 and 0.2, its test and Fashion-MNIST predictives with their convergence checks (NumPyro: "
           "the reference extra; CPU, ~20 min on 2 cores)", "benchmark", _reference_network),
    Target("reference-cifar10", "Izmailov et al.'s public CIFAR-10 HMC predictive (ResNet-20-FRN, T = 1) converted "
           "to csg's reference format, its test images matched to CIFAR-10's test_batch (probs=, test_x=, test_y=: the "
           "starter kit's files; data.root=)", "benchmark", _reference_cifar10),
    Target("posterior-benchmark", "What does the posterior buy? cSGHMC against 9 methods (2 of them peers' libraries) at 3 gradient budgets, each "
           "tuned on held-out digits, scored on 20 seeds against the NUTS reference of make reference-network "
           "(agreement, total variation, NLL, ECE; CPU; contenders=A,B: a subset; workers=N)", "benchmark",
           _posterior_benchmark, BOTH, frozenset({"report_only", "runs"})),
    Target("posterior-benchmark-cifar10", "The posterior benchmark at full scale (GPUs): ResNet-20-FRN on CIFAR-10, "
           "cSGHMC against 6 methods at one gradient budget, scored against Izmailov et al.'s HMC predictive (make "
           "reference-cifar10 first), their published numbers beside ours", "benchmark",
           _with_reference(_sweeps(tables.TABLES["posterior_benchmark_cifar10"], _table_report)), ("full",),
           SWEEP_FLAGS | {"tune_factors", "tune_seeds"}),
    Target("accuracy-multimodal", "Where do cycles pay? cSGLD against SGLD, and the ICSGLD paper's reSGLD, CSGLD and "
           "ICSGLD x4, on mixtures whose barriers we control, tuned and judged on fresh seeds (CPU, ~25 min for the "
           "six SGLD / SGHMC methods, ~48 min more for the ICSGLD paper's three on 2 busy cores; "
           "ARGS=\"methods=... merge=true\" adds methods to the CSVs in --out)", "csgmcmc", run_accuracy_multimodal, BOTH,
           frozenset({"seeds", "report_only"})),
    Target("cyclical-mcmc", "Wang et al. 2024 Figures 1 and 2, and cSGLD on the same targets", "on_cyclical_mcmc",
           _studies("wang_mixture1d", "wang_mog25")),
    Target("icsgld-sim", "ICSGLD Section 5.2: 5 samplers on the 25-mode landscape, KL curves", "icsgld",
           _studies("icsgld_sim", report=simulation_report), flags=frozenset({"report_only"})),
    Target("icsgld-variance", "ICSGLD Appendix D.5: variance of theta, ICSGLD x P10 against CSGLD x T10", "icsgld",
           _studies("icsgld_variance", report=variance_report), flags=frozenset({"report_only"})),
    Target("icsgld-mnist", "ICSGLD Section 5.1: loss of SGD, SGLD and ICSGLD on MNIST digits 0-4", "icsgld",
           _studies("icsgld_mnist")),
    Target("icsgld-table1", "ICSGLD Table 1: CIFAR-100 + SVHN (smoke: MNIST digits, letters)", "icsgld",
           _sweeps(tables.TABLES["icsgld_table1"], _table_report, prepare=_letters), BOTH, SWEEP_FLAGS),
    Target("part-sampling", "Sampling part of a pretrained network: cSGHMC on the last layer or on low-rank adapters "
           "against the whole network and SGD, the last layer against NUTS (reference_seeds=0,1,2: the seeds checked; "
           "CPU: 1-3 min of training per seed, ~25 min of NUTS per reference seed)", "part", run_part_sampling, BOTH,
           frozenset({"seeds", "report_only", "runs"})),
    Target("icsgld-bandit", "ICSGLD Figure 4: Mushroom contextual bandit, cumulative regret (agents=A,B: a subset; "
           "extend=true: add to the runs in --out)",
           "icsgld", run_bandit, BOTH, frozenset({"seeds", "report_only"})),
    Target("uci-regression", "The UCI regression benchmark (Hernandez-Lobato and Adams 2015): cSGHMC, cSGLD, SGHMC, "
           "SGD and a deep ensemble on 6 sets x 20 splits, published numbers beside ours (sets=boston,yacht: a "
           "subset; CPU, about an hour)", "uci", run_uci_regression, BOTH, frozenset({"report_only", "runs"})),
)}
