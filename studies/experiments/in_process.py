"""The paper targets that run in this process rather than as ``train.py`` runs: Figure 1, the NUTS references,
the accuracy studies against them and the Mushroom bandit; and the ``--report-only`` rewrites of two studies'
reports. Each target takes the driver's :class:`~studies.experiments.job.Job` and returns the lines to print;
:func:`checked_options` checks the ``KEY=VALUE`` overrides such a target takes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from csg.errors import ConfigError
from studies.experiments.job import Job
from csg.paths import CONFIGS


def simulation_report(out: Path) -> Path:
    from studies.synthetic import icsgld_simulation_report

    return icsgld_simulation_report.rewrite(out)


def variance_report(out: Path) -> Path:
    from studies.synthetic import icsgld_variance

    return icsgld_variance.rewrite(out)


def run_fig1(job: Job) -> list[str]:
    from studies.experiments import fig1

    return [f"fig1: wrote {fig1.render(job.out)}"]


def checked_options(job: Job, allowed: dict[str, str]) -> dict[str, str]:
    """``KEY=VALUE`` overrides of an in-process target, checked against its keys (key -> what it takes)."""
    options = {}
    for override in job.overrides:
        key, _, value = override.partition("=")
        if key not in allowed:
            keys = "; ".join(f"{k}=<{v}>" for k, v in allowed.items()) or "none"
            raise ConfigError(key, value, f"overrides of {job.target}: {keys}")
        options[key] = value
    return options


def run_bandit(job: Job) -> list[str]:
    import logging

    from omegaconf import OmegaConf

    from studies.bandit.report import report
    from studies.bandit.results import combine, load_results, run_all

    ours = ("agents=", "extend=")  # a subset of the agents; add the runs to those already in --out
    agents = [o.split("=", 1)[1].split(",") for o in job.overrides if o.startswith("agents=")]
    extend = [o.split("=", 1)[1].lower() for o in job.overrides if o.startswith("extend=")]
    if any(value not in ("true", "false") for value in extend):
        raise ConfigError("extend", extend[-1], "true (add the runs to those in --out) or false")
    extend = bool(extend) and extend[-1] == "true"
    yaml = [o for o in job.overrides if not o.startswith(ours)]
    cfg = OmegaConf.merge(OmegaConf.load(CONFIGS / "bandit" / "mushroom.yaml"), OmegaConf.from_dotlist(yaml))
    if job.seeds is not None:
        OmegaConf.update(cfg, "smoke.seeds" if job.scale == "smoke" else "seeds", [int(s) for s in job.seeds.split(",")])
    scale = job.scale
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the agents' progress
    if job.report_only:
        results = load_results(job.out, cfg)
        scale = str(results.curves.scale.iloc[0])
    else:
        previous = load_results(job.out, cfg) if extend else None  # no previous run: refused before running
        results = run_all(cfg, scale, agents[-1] if agents else None)
        if previous is not None:
            results = combine(previous, results)
    return [f"icsgld-bandit: wrote {report(results, cfg, job.out, scale)}"]


def _names(text: str | None, allowed: list[str], key: str) -> tuple[str, ...]:
    names = tuple(allowed if text is None else text.split(","))
    for name in names:
        if name not in allowed:
            raise ConfigError(key, name, f"one of {', '.join(allowed)}")
    return names


def _references(job: Job) -> Path:
    return (job.out if job.out_given else Path("results") / "csgmcmc") / "reference"


def run_reference(job: Job) -> list[str]:
    from studies.accuracy.reference import ACCURACY_NUTS, TARGETS, build_reference

    options = checked_options(job, {"targets": f"comma-separated subset of {','.join(TARGETS)}",
                             "warmup": "NUTS warm-up iterations per chain", "samples": "NUTS draws per chain"})
    for key in ("warmup", "samples"):
        if not options.get(key, "1").isdigit() or int(options.get(key, "1")) < 1:
            raise ConfigError(key, options[key], "a whole number >= 1")
    settings = replace(ACCURACY_NUTS, warmup=int(options.get("warmup", ACCURACY_NUTS.warmup)),
                       samples=int(options.get("samples", ACCURACY_NUTS.samples)))
    lines = []
    for name in _names(options.get("targets"), list(TARGETS), "targets"):
        print(f"{name}: NUTS, {settings.chains} chains x ({settings.warmup} + {settings.samples}) ...", flush=True)
        result = build_reference(TARGETS[name], settings)
        path = _references(job) / f"{name}.json"
        result.save(path)
        lines.append(f"{name}: R-hat {result.rhat_max:.4f}, ESS bulk {result.ess_bulk_min:.0f} / tail "
                     f"{result.ess_tail_min:.0f}, {result.divergences} divergences, {result.seconds:.0f} s -> {path}")
        print(lines[-1], flush=True)
    return [f"reference: wrote {len(lines)} reference(s) into {_references(job)}"]


def _previous_runs(runs_csv: Path, target: str, study_of: Callable):
    """--report-only's study: ``study_of`` the per-chain CSV of a previous ``make <target>``, or a one-line error."""
    import pandas as pd

    if not runs_csv.exists():
        raise ConfigError("--report-only", True, f"a previous run's {runs_csv}: run `make {target}` first")
    try:
        runs = pd.read_csv(runs_csv)
        result = study_of(runs)
    except Exception as error:  # not a CSV, or not the study's columns
        detail = (str(error).strip().splitlines() or [""])[0][:120]
        raise ConfigError("--report-only", True, f"a readable {runs_csv} of a previous `make {target}`: "
                          f"it is not ({type(error).__name__}: {detail})") from None
    if runs.empty:
        raise ConfigError("--report-only", True, f"a {runs_csv} of a previous `make {target}`: it holds no run")
    return result


def run_accuracy(job: Job) -> list[str]:
    from studies.accuracy import report, study
    from studies.accuracy.reference import TARGETS

    options = checked_options(job, {"targets": f"comma-separated subset of {','.join(TARGETS)}"})
    targets = _names(options.get("targets"), list(TARGETS), "targets")
    references = _references(job)
    missing = [name for name in targets if not (references / f"{name}.json").exists()]
    if missing:
        raise ConfigError("targets", ",".join(missing), f"targets with a reference in {references}: run "
                          "`make reference` first")
    if job.report_only:
        result = _previous_runs(job.out / "accuracy_runs.csv", "accuracy",
                                lambda runs: study.Study(runs, study.summarise(runs), float("nan")))
    else:
        seeds = tuple(int(s) for s in (job.seeds or "0,1,2").split(","))
        smoke = {"factors": (0.5, 1.0), "overrides": study.SMOKE} if job.scale == "smoke" else {}
        result = study.run_study(references, targets, seeds, **smoke, log=lambda line: print(line, flush=True))
    report.write(result, job.out, references, job.scale)
    return [f"accuracy: wrote {job.out / 'accuracy.md'}"]


def run_reference_multimodal(job: Job) -> list[str]:
    import json

    from csg.reporting import write_text
    from studies.accuracy.multimodal import reference

    checked_options(job, {})
    facts = reference.probe(log=lambda line: print(line, flush=True))
    path = _references(job) / "network_multimodal.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(facts, indent=1) + "\n")
    return [f"reference-multimodal: wrote {path} (reference {'accepted' if facts['accepted'] else 'not accepted'})"]


def run_accuracy_multimodal(job: Job) -> list[str]:
    from studies.accuracy.multimodal import report, study
    from studies.accuracy.multimodal.targets import TARGETS

    from studies.accuracy.multimodal.merge import merged

    protocol = study.PROTOCOLS[job.scale]
    merge_means = "true (the methods' rows replace theirs in the CSVs in --out) or false"
    allowed = [m.replace(" ", "") for m in protocol.methods]
    options = checked_options(job, {"targets": f"comma-separated subset of {','.join(TARGETS)}",
                                    "methods": f"comma-separated subset of {','.join(allowed)}",
                                    "merge": merge_means})
    if "targets" in options:
        protocol = replace(protocol, targets=_names(options["targets"], list(TARGETS), "targets"))
    merge = options.get("merge", "false").lower()
    if merge not in ("true", "false"):
        raise ConfigError("merge", options["merge"], merge_means)
    if "methods" in options:
        names = _names(options["methods"].replace(" ", ""), allowed, "methods")
        protocol = replace(protocol, methods=tuple(m for m in protocol.methods if m.replace(" ", "") in names))
    if merge == "true" and ("methods" not in options or job.report_only):
        raise ConfigError("merge", "true", "with methods=<the methods to add> and a run (not --report-only)")
    if job.seeds is not None:
        seeds = tuple(int(seed) for seed in job.seeds.split(","))
        if set(seeds) & set(protocol.tuning_seeds):
            raise ConfigError("--seeds", job.seeds, "fresh evaluation seeds, none of the tuning seeds "
                              f"{','.join(map(str, protocol.tuning_seeds))}")
        protocol = study.with_seeds(protocol, seeds)
    if job.report_only:
        def study_of(runs):
            return report.load(job.out, protocol)

        result = _previous_runs(job.out / report.FILES["runs"], "accuracy-multimodal", study_of)
    elif merge == "true":
        previous = _previous_runs(job.out / report.FILES["runs"], "accuracy-multimodal",
                                  lambda runs: report.load(job.out, study.PROTOCOLS[job.scale]))
        protocol = replace(protocol, seeds=previous.protocol.seeds, budgets=previous.protocol.budgets)
        added = study.run_study(protocol, log=lambda line: print(line, flush=True))
        result = merged(previous, added, protocol.methods)
    else:
        result = study.run_study(protocol, log=lambda line: print(line, flush=True))
    return [f"accuracy-multimodal: wrote {report.write(result, job.out, _references(job))}"]


def run_part_sampling(job: Job) -> list[str]:
    """``make part-sampling``: the runs of :mod:`studies.part.study` into ``multirun/part-sampling/<stamp>``
    (or ``--runs``; finished runs there are kept), the last layer's exact references, then the report.
    ``--report-only``: the report again from the CSVs in ``--out`` (no run, no NUTS); with ``--runs``, from the
    finished runs there (their references computed again)."""
    from studies.experiments.launch import newest_runs
    from studies.part.report import collect, reference_rows, report, rewrite
    from studies.part.study import METHODS, REFERENCE_SEEDS, SEEDS, run_all, run_dir

    options = checked_options(job, {"reference_seeds": "seeds whose last layer is checked against NUTS, e.g. 0,1,2"})
    if job.report_only and job.runs is None:
        return [f"part-sampling: wrote {rewrite(job.out)} from its CSVs"]
    seeds = [int(s) for s in (job.seeds or SEEDS[job.scale]).split(",")]
    if job.report_only:
        runs = job.runs or newest_runs("part-sampling")
        found = {(m, s): run_dir(runs, m, s) for m in METHODS for s in seeds
                 if (run_dir(runs, m, s) / "metrics.json").is_file()}
        if not found:
            raise ConfigError("--runs", str(runs), "a folder holding finished part-sampling runs "
                              "(<method>_seed<s>/metrics.json): it holds none")
    else:
        runs = job.runs or Path("multirun") / "part-sampling" / job.stamp
        found = run_all(runs, seeds, job.scale)
    command = "make part-sampling" + ("" if job.scale == "full" else f" SCALE={job.scale}")
    text = options.get("reference_seeds", REFERENCE_SEEDS[job.scale])
    try:
        checked = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError("reference_seeds", text, "comma-separated integer seeds, e.g. 0,1,2") from None
    written = report(collect(found), job.out, job.scale, command, reference_rows(found, checked))
    return [f"part-sampling: wrote {written} from {runs}"]


def run_uci_regression(job: Job) -> list[str]:
    """``make uci-regression``: the runs of :mod:`studies.uci.study` into ``multirun/uci-regression/<stamp>``
    (or ``--runs``; finished runs there are kept), then the report (:mod:`studies.uci.report`).
    ``sets=boston,yacht``: a subset. ``--report-only``: the report again from ``--out``'s runs.csv, or with
    ``--runs`` from the finished runs there."""
    from studies.uci.report import collect, report, rewrite
    from studies.uci.study import SETS, run_all

    options = checked_options(job, {"sets": f"a comma-separated subset of {','.join(SETS)}",
                                    "post_hoc": "true: also the runs chosen after the protocol's (reported apart)"})
    sets = _names(options.get("sets"), list(SETS), "sets")
    if options.get("post_hoc", "false") not in ("true", "false"):
        raise ConfigError("post_hoc", options["post_hoc"], "true or false")
    if job.report_only and job.runs is None:
        return [f"uci-regression: wrote {rewrite(job.out)} from its runs.csv"]
    runs = job.runs or Path("multirun") / "uci-regression" / job.stamp
    if not job.report_only:
        run_all(runs, job.scale, sets, post_hoc=options.get("post_hoc") == "true")
    frame = collect(runs)
    if frame.empty:
        raise ConfigError("--runs", str(runs), "a folder holding finished uci-regression runs (<set>/split<k>/"
                          "<method>/metrics.json): it holds none")
    command = "make uci-regression" + ("" if job.scale == "full" else f" SCALE={job.scale}")
    return [f"uci-regression: wrote {report(frame, job.out, job.scale, command)} from {runs}"]
