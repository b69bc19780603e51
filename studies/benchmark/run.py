"""``make reference-network``: the network's reference predictives written to ``results/benchmark/reference/``.

One ``mnist_mlp_T<T>.npz`` per temperature (what ``evaluation.reference=`` reads), ``reference_network.json`` (the
facts: settings, cost, convergence checks) and ``reference_network.md`` (the same, to read), every file written
atomically; a temperature whose chains fail a check writes nothing of its own and is reported as refused."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from csg.errors import ConfigError
from csg.reporting import atomic_open, markdown_table, write_text

__all__ = ["npz_name", "report", "run_posterior_benchmark", "run_reference_network"]

JSON, REPORT = "reference_network.json", "reference_network.md"


def npz_name(temperature: float) -> str:
    return f"mnist_mlp_T{temperature:g}.npz"


def _options(job) -> dict:
    from studies.benchmark.reference import NETWORK_NUTS, TEMPERATURES
    from studies.experiments.in_process import checked_options

    options = checked_options(job, {"temperatures": f"comma-separated, default {','.join(map(str, TEMPERATURES))}",
                                    "chains": "NUTS chains (>= 2)", "warmup": "NUTS warm-up iterations per chain",
                                    "samples": "NUTS draws per chain", "max_tree_depth": "NUTS tree depth",
                                    "workers": "processes running chains", "ood.root": "Fashion-MNIST's folder",
                                    "draws_dir": "where the draws are saved (default data/reference-network)"})
    numbers = {}
    # samples: the floors average up to 40 draws of 2 chains (reference.floors), R-hat splits each chain in two
    for key, low in (("chains", 2), ("warmup", 1), ("samples", 20), ("max_tree_depth", 1), ("workers", 1)):
        if key in options:
            if not options[key].isdigit() or int(options[key]) < low:
                why = " (the floors of 1 to 40 members need 40 draws of 2 chains)" if key == "samples" else ""
                raise ConfigError(key, options[key], f"a whole number >= {low}{why}")
            numbers[key] = int(options[key])
    try:
        temperatures = tuple(float(t) for t in options.get("temperatures", ",".join(map(str, TEMPERATURES))).split(","))
    except ValueError:
        raise ConfigError("temperatures", options["temperatures"], "comma-separated numbers > 0") from None
    if not all(t > 0 for t in temperatures):
        raise ConfigError("temperatures", options["temperatures"], "comma-separated numbers > 0")
    overrides = (f"ood.root={options['ood.root']}",) if "ood.root" in options else ()
    return {"settings": replace(NETWORK_NUTS, **numbers), "temperatures": temperatures, "overrides": overrides,
            "draws_dir": Path(options.get("draws_dir", Path("data") / "reference-network"))}


def _versions() -> dict:
    from importlib.metadata import version

    return {name: version(name) for name in ("jax", "numpyro", "torch", "arviz")}


def run_reference_network(job) -> list[str]:
    from studies.accuracy.reference import ReferenceRejected
    from studies.benchmark.reference import build

    options = _options(job)
    out = job.out / "reference"
    path = out / JSON
    previous = json.loads(path.read_text()) if path.is_file() else {}
    lines, refused = [], []
    for temperature in options["temperatures"]:
        try:
            arrays, facts = build(temperature, options["settings"], options["overrides"],
                                  log=lambda line: print(line, flush=True), draws_dir=options["draws_dir"])
        except ReferenceRejected as error:
            refused.append(str(error))
            continue
        out.mkdir(parents=True, exist_ok=True)
        with atomic_open(out / npz_name(temperature)) as handle:
            np.savez_compressed(handle, **arrays)
        facts["file"] = npz_name(temperature)
        facts["load_average_15min"] = os.getloadavg()[2]  # the machine's load as the chains ended (shared or not)
        facts["versions"] = _versions()
        previous[f"{temperature:g}"] = facts
        write_text(path, json.dumps(previous, indent=1) + "\n")
        lines.append(f"reference-network: wrote {out / npz_name(temperature)} ({facts['seconds']:.0f} s)")
    if len(refused) < len(options["temperatures"]):
        write_text(out / REPORT, report(previous))
        lines.append(f"reference-network: wrote {out / REPORT}")
    if refused:  # the accepted temperatures are written; the command fails, naming what was not
        for line in lines:
            print(line, flush=True)
        raise ReferenceRejected(" | ".join(refused))
    return lines


def report(references: dict) -> str:
    """reference_network.md from the JSON's facts (one entry per temperature)."""
    rows, floor_rows, sizes = [], [], []
    for key in sorted(references, key=float, reverse=True):
        f = references[key]
        c, s = f["checks"], f["settings"]
        ood = c.get("rhat_ood", {})
        rows.append([
            f"{float(key):g}", f['file'], f"{s['chains']} x ({s['warmup']} + {s['samples']})",
            f"{f['gradient_evaluations_sampling'] / (s['chains'] * s['samples']):.0f}",
            f"{max(ch.get('max_depth_share', float('nan')) for ch in f['chains']):.2f}",
            f"{min(ch.get('e_bfmi', float('nan')) for ch in f['chains']):.2f}",
            sum(ch['divergences'] for ch in f['chains']), f"{f['seconds']:.0f}",
            f"{f.get('gradient_evaluations_warmup', 0) + f['gradient_evaluations_sampling']:,}",
            f"{f.get('load_average_15min', float('nan')):.1f}",
            f"{c['rhat_test']['median']:.4f} / {c['rhat_test']['q99']:.4f} / {c['rhat_test']['max']:.4f}",
            f"{c['rhat_test']['share_at_most_1.01']:.4f}",
            f"{ood['q99']:.4f} / {ood['max']:.4f} / {ood['share_at_most_1.01']:.4f}" if ood else "-",
            f"{c['ess_test']['bulk']['min']:.0f} / {c['ess_test']['bulk']['median']:.0f}" if "ess_test" in c else "-",
            f"{c['halves']['total_variation']:.4f} / {c['halves']['agreement']:.3f}",
            f"{c['ood_split']['halves']['total_variation']:.4f}" if "ood_split" in c else "-",
            f"{max(c['chains_tv_to_pooled']):.4f}", f"{f['test_error_pct']:.1f}", f"{f['test_nll']:.4f}"])
        if "floors_test" in c:
            floor_rows.append([f"{float(key):g}", *(
                f"{c['floors_test'][size]['total_variation']:.4f} / "
                + (f"{c['floors_ood'][size]['total_variation']:.4f}" if "floors_ood" in c else "-")
                for size in sorted(c["floors_test"], key=int))])
            sizes = list(c["floors_test"])
    first = references[sorted(references, key=float)[0]]
    from studies.benchmark.reference import HALVES_TV_MAX, OOD_CHECKED, RHAT_MAX, RHAT_SHARE, RHAT_WORST

    return "\n".join([
        "# The posterior benchmark's reference: NUTS on a real network",
        "",
        f"`make reference-network` (studies/benchmark/reference.py). The posterior that `python train.py "
        f"experiment=posterior_benchmark sampler.temperature=T` targets: {first['num_data']} shipped MNIST digits "
        f"(100 per class), averaged to 7 x 7, an MLP 49-32-10 ({first['dimension']} weights), U = the training "
        f"set's summed negative log-likelihood + (N wd / 2) |theta|^2 with wd = {first['weight_decay']:g} (prior "
        f"precision {first['prior_precision']:g}, divided by T in the target exp(-U / T)); full-batch NUTS (NumPyro), "
        "each chain from its own random start (small weights N(0, 0.1^2), near the origin: not overdispersed, so "
        "the chains' agreement is judged in function space), one chain per process, float64 chains with "
        f"float32 matrix products. Scored on the {first['num_test']} test digits and the {first['num_ood']} "
        f"{first['ood']} test images (OOD).",
        "",
        f"Accepted only where, across the chains, the rank-normalised split R-hat of the test inputs' class "
        f"probabilities is at most {RHAT_MAX} for at least {RHAT_SHARE:.0%} of them and at most {RHAT_WORST} for "
        f"all (the same on the first {OOD_CHECKED} OOD inputs), and the predictive of the draws' first halves is within "
        f"{HALVES_TV_MAX} in mean total variation of their second halves' (a gate against chains still drifting, "
        "not the estimate's error, which is measured below). Every row below passed. The reference is a Monte Carlo "
        "estimate of the posterior predictive from all chains' draws, not the exact one.",
        "",
        *markdown_table(["T", "file", "chains x (warm-up + draws)", "gradients per draw",
                         "a chain's largest share of draws at the tree-depth cap", "smallest E-BFMI", "divergences",
                         "seconds", "full-batch gradients, warm-up included", "15-min load average",
                         "test R-hat median / 99 % / max", "test share <= 1.01", "OOD R-hat 99 % / max / share <= 1.01",
                         "test bulk ESS min / median", "test halves TV / agreement", "OOD halves TV",
                         "a chain's largest test TV to the pooled", "error %", "NLL"], rows,
                        align="rllrrrrrrrlrlllrrrr"),
        "",
        "Seconds: wall time of the chains (2 processes at a time; the load average says whether the machine was "
        "shared); gradients per draw: NUTS's leapfrog steps per kept draw, averaged. The estimate's own Monte Carlo "
        "error is about half the halves' TV (each half has half the draws); the OOD columns are on the first "
        f"{OOD_CHECKED} OOD inputs.",
        "",
        *([f"The expected TV of S exact draws: the mean total variation, test / OOD, between the average of S draws "
           f"taken at random from the chains and the reference; a method with S members is read beside it (a "
           f"yardstick for S independent posterior draws, not a bound).", "",
           *markdown_table(["T", *(f"S = {size}" for size in sorted(sizes, key=int))], floor_rows,
                           align="r" + "l" * len(sizes)), ""] if floor_rows else []),
        "A method's score against these: "
        "`evaluation.reference=results/benchmark/reference/<file>` (train.py), `scripts/evaluate_run.py RUN "
        "--reference <file>`, `csg.Posterior.evaluate(reference=<file>)`.",
        "",
    ])


def run_posterior_benchmark(job) -> list[str]:
    """``make posterior-benchmark``: :mod:`.study`'s protocol at the job's scale into ``job.out``; ``--report-only``
    rewrites the report from the CSVs there."""
    from dataclasses import replace

    import pandas as pd

    from studies.benchmark import report, study
    from studies.experiments.in_process import checked_options

    options = checked_options(job, {"workers": "processes running tasks (default 2; smoke 1)",
                                    "contenders": f"comma-separated, of {', '.join(study.ALL)}",
                                    "merge": "true: run only the contenders named and put their rows into the CSVs "
                                             "in --out"})
    merge = options.get("merge", "false").lower()
    if merge not in ("true", "false"):
        raise ConfigError("merge", options["merge"], "true or false")
    merge = merge == "true"
    protocol = study.SMOKE if job.scale == "smoke" else study.FULL
    if "workers" in options:
        if not options["workers"].isdigit() or int(options["workers"]) < 1:
            raise ConfigError("workers", options["workers"], "a whole number >= 1")
        protocol = replace(protocol, workers=int(options["workers"]))
    if "contenders" in options:
        names = tuple(n.strip() for n in options["contenders"].split(","))
        unknown = [n for n in names if n not in study.ALL]
        if unknown or (study.BASE not in names and not merge):
            raise ConfigError("contenders", options["contenders"],
                              f"comma-separated names including {study.BASE} (unless merge=true), of "
                              f"{', '.join(study.ALL)}")
        protocol = replace(protocol, contenders=names)
    elif merge:
        raise ConfigError("merge", "true", "with contenders=<the methods to add>")
    if merge and not all((job.out / name).is_file() for name in (report.TUNING, report.RUNS)):
        raise ConfigError("merge", "true", f"the CSVs of a finished benchmark in {job.out}")
    references = Path("results") / "benchmark" / "reference"
    facts_path, npz = references / JSON, references / npz_name(protocol.temperature)
    if not npz.is_file() or not facts_path.is_file():
        raise ConfigError("reference", str(npz), "the committed reference (make reference-network writes it)")
    facts = report.load_reference_facts(facts_path, protocol.temperature)
    command = "make posterior-benchmark" + (" SCALE=smoke" if job.scale == "smoke" else "")
    if job.report_only:
        tuning, runs = pd.read_csv(job.out / report.TUNING), pd.read_csv(job.out / report.RUNS)
        seconds = float(runs.study_seconds.iloc[0])
        return [f"posterior-benchmark: wrote {report.write(job.out, protocol, tuning, runs, facts, seconds, command)}"]
    runs_dir = job.runs or Path("data") / "benchmark-runs" / job.stamp
    tuning, rows, seconds = study.run_study(protocol, runs_dir, npz.resolve())
    tuning, runs = pd.DataFrame(tuning), pd.DataFrame(rows).assign(study_seconds=seconds)
    if merge:   # the named contenders' rows replace theirs; every other row is kept as it was
        tuning, runs, seconds = report.merged(job.out, tuning, runs, protocol.contenders, seconds)
        protocol = replace(protocol, contenders=tuple(dict.fromkeys(runs.method)))
    path = report.write(job.out, protocol, tuning, runs, facts, seconds, command)
    return [f"posterior-benchmark: wrote {path} ({seconds / 60:.1f} min)"]


CIFAR10_REFERENCE = "cifar10_hmc_izmailov.npz"


def run_reference_cifar10(job) -> list[str]:
    """``make reference-cifar10 ARGS="probs=... test_x=... test_y=..."``: Izmailov et al.'s public CIFAR-10 HMC
    predictive converted to csg's reference format (:mod:`.izmailov`) into ``--out``/reference/."""
    from studies.benchmark.izmailov import convert
    from studies.experiments.in_process import checked_options

    options = checked_options(job, {"probs": "their probs.csv", "test_x": "their cifar10_test_x.csv",
                                    "test_y": "their cifar10_test_y.csv", "data.root": "CIFAR-10's folder (data)"})
    missing = [key for key in ("probs", "test_x", "test_y") if key not in options]
    if missing:
        raise ConfigError(missing[0], "", "the path of the starter kit's file (probs.csv, cifar10_test_x.csv, "
                                          "cifar10_test_y.csv: github.com/izmailovpavel/neurips_bdl_starter_kit)")
    for key in ("probs", "test_x", "test_y"):
        if not Path(options[key]).is_file():
            raise ConfigError(key, options[key], "an existing file")
    out = job.out / "reference" / CIFAR10_REFERENCE
    facts = convert(Path(options["probs"]), Path(options["test_x"]), Path(options["test_y"]),
                    Path(options.get("data.root", "data")), out)
    return [f"reference-cifar10: wrote {out} ({facts['images']} test images, {facts['reordered']} moved to csg's "
            f"order; the reference's error {facts['error_pct']:.2f} %, against the 10.36 % of Izmailov et al.'s HMC "
            "in their paper: a check that these are their files)"]
