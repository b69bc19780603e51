"""The part-sampling study's report: error, NLL, ECE, mutual information, cost and disk per method, mean +- s.e.
over seeds; the sampled last layer checked against its exact conditional posterior (NUTS on the frozen trunk's
features, :mod:`studies.part.reference`); and the verdicts (:func:`csg.evaluation.comparison.compare_paired`,
paired by seed, Holm-corrected across the report, with the absolute margins of :data:`MARGINS`).

A part run's cost is its SGD pretraining plus its own sampling: :func:`collect` puts the SGD run's training seconds
of the same seed beside each part run's (``pretrain_s``) and their sum in ``cost_s``. :func:`report` writes
``part_sampling.{csv,md}`` and ``part_reference.csv``; :func:`rewrite` writes the report again from those CSVs alone
(``make part-sampling-report``)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from csg.evaluation.comparison import Paired, compare_paired, mean_se, method_statement, tally
from csg.reporting import markdown_table, write_text
from studies.part.study import CYCLES, EPOCHS, METHODS

__all__ = ["LABELS", "MARGINS", "collect", "reference_rows", "report", "rewrite"]

LABELS = {"sgd": "SGD (the pretrained model)", "last_layer": "cSGHMC last layer, rest frozen",
          "adapters": "cSGHMC low-rank adapters (rank 4), rest frozen", "full": "cSGHMC whole network, from scratch"}
METRICS = (("test_error_pct", "error %", 2), ("nll", "NLL", 4), ("ece", "ECE", 4),
           ("mutual_information", "MI (nats)", 4))
CLAIMS = (("last_layer", "sgd"), ("adapters", "sgd"), ("last_layer", "full"), ("adapters", "full"))
PART = ("last_layer", "adapters")
# equivalence margins, absolute, in each metric's units (stated in the report)
# (TV: 0.001, a fifth of the SGD head's own distance to the exact predictive, 0.005 on the study's seeds)
MARGINS = {"test_error_pct": 0.5, "nll": 0.01, "tv": 0.001, "mi_logerr": 0.25, "logsd": 0.1}
# the reference checks: (csg's column, the yardstick's column, margin key, what it is). The weights' mean error and
# the predictive TV against as many exact draws have no verdict: a point near the mode beats any ensemble of 12
# exact draws on both (their Monte Carlo error, about 0.8 / sqrt(12) posterior sd in the mean), so those comparisons
# favour a collapsed sampler; they are shown in the table only.
REFERENCE_CLAIMS = (
    ("tv_csg", "tv_start", "tv", "predictive TV to the exact posterior's: csg's members against the SGD head they start from"),
    ("mi_logerr_csg", "mi_logerr_exact", "mi_logerr",
     "|log(MI / the exact posterior's MI)|: csg's members against as many exact draws"),
    ("logsd_csg", "logsd_exact", "logsd", "|log(weights' sd / posterior sd)|: csg's members against as many exact draws"),
)
CSV, REFERENCE_CSV, MARKDOWN = "part_sampling.csv", "part_reference.csv", "part_sampling.md"


def _disk_bytes(run: Path) -> int:
    return sum(path.stat().st_size for path in (run / "samples").rglob("*.pt"))


def collect(runs: dict[tuple[str, int], Path]) -> pd.DataFrame:
    """One row per run: method, seed, the ensemble's metrics, members, own training seconds, the pretraining seconds
    it starts from (a part run: the SGD run's of its seed; else 0), their sum, and sample bytes."""
    rows = []
    for (method, seed), run in sorted(runs.items(), key=lambda item: (METHODS.index(item[0][0]), item[0][1])):
        metrics = json.loads((run / "metrics.json").read_text())
        ensemble = metrics["ensemble"]
        rows.append({"method": method, "seed": seed, **{key: ensemble.get(key, math.nan) for key, _, _ in METRICS},
                     "members": ensemble["num_samples"], "train_s": metrics["wall_time_s"]["train"],
                     "sample_bytes": _disk_bytes(run), "epochs": metrics["epochs"]})
    return with_cost(pd.DataFrame(rows))


def with_cost(frame: pd.DataFrame) -> pd.DataFrame:
    """``pretrain_s`` (a part run: the SGD run's ``train_s`` at its seed, nan if that run is missing; else 0) and
    ``cost_s`` = ``train_s`` + ``pretrain_s``: what a part run costs from scratch."""
    frame = frame.copy()
    sgd = frame[frame.method == "sgd"].set_index("seed").train_s
    frame["pretrain_s"] = [sgd.get(seed, math.nan) if method in PART else 0.0
                           for method, seed in zip(frame.method, frame.seed)]
    frame["cost_s"] = frame.train_s + frame.pretrain_s
    return frame


def reference_rows(runs: dict[tuple[str, int], Path], seeds: list[int] | None = None, budget=None) -> pd.DataFrame:
    """For each last-layer run (of ``seeds``; None: every one): :func:`studies.part.reference.compare` of its
    members against NUTS draws of its exact conditional posterior, with the NUTS run's facts; one row per seed.
    Each row is kept in the run's ``reference.json`` and read from there when it exists."""
    from studies.part import reference

    rows = []
    for (method, seed), run in sorted(runs.items()):
        if method != "last_layer" or (seeds is not None and seed not in seeds):
            continue
        kept = run / "reference.json"
        if kept.is_file():
            rows.append(json.loads(kept.read_text()))
            continue
        problem = reference.head_problem(run, runs.get(("sgd", seed)))
        draws, facts = reference.reference_draws(problem, budget or replace(reference.PART_NUTS, seed=seed))
        row = {"seed": seed, "temperature": problem.temperature, "weights": problem.dimension,
               **reference.compare(problem, draws, seed=seed), **facts}
        write_text(kept, json.dumps(row, indent=1) + "\n")
        rows.append(row)
    return pd.DataFrame(rows)


def report(frame: pd.DataFrame, out: Path, scale: str, command: str,
           references: pd.DataFrame | None = None) -> Path:
    """Write ``<out>/part_sampling.{csv,md}`` (and ``part_reference.csv``) from :func:`collect`'s frame and
    :func:`reference_rows`' rows."""
    out.mkdir(parents=True, exist_ok=True)
    frame = with_cost(frame[[c for c in frame.columns if c not in ("pretrain_s", "cost_s")]])
    write_text(out / CSV, frame.to_csv(index=False))
    if references is not None and not references.empty:
        write_text(out / REFERENCE_CSV, references.to_csv(index=False))
    write_text(out / MARKDOWN, "\n".join(_lines(frame, scale, command, references)) + "\n")
    return out / MARKDOWN


def rewrite(out: Path) -> Path:
    """The report again from ``<out>``'s CSVs alone (``make part-sampling-report``): no run, no NUTS."""
    from csg.errors import ConfigError

    if not (out / CSV).is_file():
        raise ConfigError("--out", str(out), f"a folder holding {CSV} (written by make part-sampling): it has none")
    frame = pd.read_csv(out / CSV)
    references = pd.read_csv(out / REFERENCE_CSV) if (out / REFERENCE_CSV).is_file() else None
    scale = "smoke" if out.name == "smoke" else "full"
    command = "make part-sampling" + ("" if scale == "full" else f" SCALE={scale}")
    return report(frame, out, scale, command, references)


def _lines(frame: pd.DataFrame, scale: str, command: str, references: pd.DataFrame | None) -> list[str]:
    seeds = sorted(int(s) for s in frame.seed.unique())
    temperature = (references.temperature.iloc[0] if references is not None and not references.empty
                   else _recipe_temperature())
    lines = ["# Sampling part of a pretrained network: the last layer or low-rank adapters", "",
             f"Scale: {scale} ({'the study' if scale == 'full' else 'short budgets, a look at the pipeline'}); "
             f"{len(seeds)} seeds ({_seed_range(seeds)}); command `{command}` (`make part-sampling-report` writes "
             "this page again from its CSVs). The MLP of the embedded default on the shipped MNIST digits (mnist5k: "
             f"4000 training, 1000 test). SGD trains it ({EPOCHS[scale]['sgd']} epochs, the `sgd` preset); cSGHMC then "
             f"samples its last layer or rank-4 adapters of every layer ({EPOCHS[scale]['last_layer']} epochs, "
             f"{CYCLES[scale]} cycles), the rest frozen at the SGD weights, against cSGHMC on the whole network from "
             f"scratch ({EPOCHS[scale]['full']} epochs). No paper reports this setting: no paper number exists.", "",
             f"Temperature: every cSGHMC run here samples at T = {temperature:g}, the mnist5k recipe's "
             "(configs/data/mnist5k.yaml), the embedded default's: a part run then targets the conditional, given "
             "the frozen rest, of the same tempered posterior p(theta | D)^(1/T) that the whole-network run targets "
             "(docs/part.md), whose Gaussian prior of precision N wd = 2 becomes N wd / T = 10. The exact reference "
             "below targets that same conditional at that T.", ""]
    rows = []
    for method in METHODS:
        block = frame[frame.method == method]
        if block.empty:
            continue
        cells = [mean_se(block[key], digits) for key, _, digits in METRICS]
        rows.append([LABELS[method], *cells, int(block.members.iloc[0]), f"{block.train_s.mean():.1f}",
                     f"{block.cost_s.mean():.1f}", f"{int(block.sample_bytes.mean()):,}"])
    lines += markdown_table(["method", "error %", "NLL", "ECE", "MI (nats)", "members", "own train s",
                             "cost s (with pretraining)", "bytes of samples"], rows, align="lrrrrrrrr")
    lines += ["", "Mean +- standard error over the seeds. MI: the mean mutual information between the label and the "
              "parameters on the test set (the members' disagreement; 0 for one model). Own train s: the run's own "
              "training loop (wall clock on this project's 2-core CPU machine, shared with other jobs: a timing, "
              "not a benchmark); cost s: a part run's own seconds plus the SGD pretraining it starts from (the SGD run of "
              "its seed), the other runs' own seconds. Bytes: the run's sample files (a part run: its samples and "
              "the frozen rest once).", "", *_reading(frame), *_reference(references), *_verdicts(frame, references)]
    return lines


def _recipe_temperature() -> float:
    from omegaconf import OmegaConf

    from csg.paths import CONFIGS

    return float(OmegaConf.load(CONFIGS / "data" / "mnist5k.yaml").recipe.temperature)


def _seed_range(seeds: list[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2 else \
        ", ".join(map(str, seeds))


def _reading(frame: pd.DataFrame) -> list[str]:
    """Cost and bytes of each part against the whole network sampled, in numbers taken from the table."""
    means = frame.groupby("method")[["train_s", "cost_s", "sample_bytes", "epochs"]].mean()
    if "full" not in means.index:
        return []
    full = means.loc["full"]
    whole = frame[frame.method == "full"].set_index("seed").cost_s
    spread = frame.groupby("method").train_s.agg(lambda t: t.max() / t.min()).max()
    lines = ["Reading (means over the seeds; the claims themselves are the verdicts below):", ""]
    for method in PART:
        if method in means.index:
            part = means.loc[method]
            pretrain = means.loc["sgd"].epochs if "sgd" in means.index else math.nan
            ratios = (frame[frame.method == method].set_index("seed").cost_s / whole).dropna()
            lines.append(f"- {LABELS[method]}: in epochs over the training set it is {pretrain:.0f} of SGD pretraining "
                         f"and {part.epochs:.0f} of its own (each a forward pass of the whole network and a backward "
                         f"pass of the part) against the whole network's {full.epochs:.0f}, so counted with its "
                         f"pretraining it costs at least the whole network's epochs. Its wall time with the "
                         f"pretraining is {ratios.min():.2f}x to {ratios.max():.2f}x the whole network's per seed: "
                         f"on this shared machine one method's seeds differ up to {spread:.1f}x in wall time, so these "
                         f"times measure no cost. It stores {part.sample_bytes / full.sample_bytes:.3f}x the whole "
                         "network's sample bytes.")
    lines += ["- Against the whole network a part differs in three ways at once: it samples only its part, it starts "
              "warm from the SGD model, and it has 300 epochs in all against 200; its verdicts against the whole "
              "network compare the two recipes, not part against whole alone.",
              "- MI of a part and of the whole network measure different things: a part's is the disagreement of "
              "members that differ only in that part, given the frozen trunk (for the last layer, a convex softmax "
              "regression on 4000 examples: small by construction); the whole network's includes the trunk's. "
              "They are not compared here; the last layer's MI is compared with its exact conditional posterior's "
              "below.", ""]
    return lines


def _reference(references: pd.DataFrame | None) -> list[str]:
    if references is None or references.empty:
        return ["## The last layer against its exact conditional posterior", "",
                "Not run for these runs (no part_reference.csv beside this page): `make part-sampling` checks the "
                "last layer of the seeds of `reference_seeds` against NUTS on the frozen trunk's features "
                "(studies.part.reference), and this section then gives that check and its verdicts.", ""]
    r = references
    seeds = len(r)

    def cell(column: str, digits: int = 4) -> str:
        return mean_se(r[column], digits)

    lines = ["## The last layer against its exact conditional posterior", "",
             f"Given the frozen trunk, the last layer's posterior is a softmax regression on the trunk's features "
             f"({int(r.weights.iloc[0])} weights, convex potential: one mode). Per seed, NumPyro's NUTS samples it "
             f"({int(r.reference_draws.iloc[0])} draws: {int(r.nuts_chains.iloc[0])} chains x "
             f"{int(r.nuts_samples.iloc[0])} after {int(r.nuts_warmup.iloc[0])} warm-up steps), started from Laplace draws around the mode "
             "with the Hessian's inverse as its mass matrix; accepted on every weight and every test point's "
             f"probability of its label (worst R-hat {r.rhat_max.max():.4f}, smallest bulk / tail ESS "
             f"{r.ess_bulk_min.min():.0f} / {r.ess_tail_min.min():.0f}; {int(r.divergences.sum())} divergences; "
             f"{r.nuts_seconds.mean():.1f} s per seed). csg's {int(r.members.iloc[0])} members are set against it, "
             f"beside ensembles of {int(r.members.iloc[0])} exact draws (disjoint groups of the NUTS draws, each "
             "against the rest: what a perfect sampler with as many members gives) and beside the SGD head the run "
             f"starts from. Mean +- s.e. over {seeds} seeds:", "",
             "| statistic | csg's members | as many exact draws | SGD head (start) |", "|---|---:|---:|---:|",
             f"| predictive TV to the exact posterior's (test points) | {cell('tv_csg')} | {cell('tv_exact')} | "
             f"{cell('tv_start')} |",
             f"| MI on the test points (nats; exact posterior: {cell('mi_reference', 5)}) | {cell('mi_csg', 5)} | "
             f"{cell('mi_exact', 5)} | 0 |",
             f"| weights' mean error (in posterior sd, mean over weights) | {cell('zmean_csg', 3)} | "
             f"{cell('zmean_exact', 3)} | |",
             f"| |log(weights' sd / posterior sd)|, mean over weights | {cell('logsd_csg', 3)} | {cell('logsd_exact', 3)} | |",
             f"| median of weights' sd / posterior sd | {cell('sd_ratio_csg', 3)} | | |", "",
             f"The exact posterior's own ensemble: error {cell('error_reference_pct', 2)} %, NLL "
             f"{cell('nll_reference')}.", "", *_reference_reading(r)]
    return lines


def _reference_reading(r: pd.DataFrame) -> list[str]:
    """What the table says, in numbers (the claims are the verdicts below)."""
    ratio, mi = r.sd_ratio_csg.mean(), r.mi_csg.mean() / r.mi_reference.mean()
    further = ", ".join(f"{d:+.5f}" for d in (r.tv_csg - r.tv_start))
    unconverged = [int(s) for s, ok in zip(r.seed, r.map_converged) if str(ok) != "True"]
    note = (f" L-BFGS stopped short of the mode on seed{'s' if len(unconverged) > 1 else ''} "
            f"{', '.join(map(str, unconverged))}: the mode only starts the chains and sets their mass matrix, and the "
            "draws were accepted on their own diagnostics." if unconverged else "")
    return [f"Seeds checked: {', '.join(str(int(s)) for s in r.seed)} (the run's `reference_seeds`).{note}", "",
            f"Reading (means over those seeds; the claims are the verdicts below): along a typical weight (the "
            f"median) csg's members spread over {ratio:.3f}x the conditional posterior's standard deviation, and "
            f"their MI is {mi:.3f}x the exact posterior's, where {int(r.members.iloc[0])} exact draws give "
            f"{r.mi_exact.mean() / r.mi_reference.mean():.3f}x. Their predictive distribution is a little further "
            f"from the exact posterior's than that of the SGD head they start from, on every seed ({further}). So "
            "these members are not draws of the last layer's conditional posterior: their predictions stay close to "
            "the SGD head's. Two rows of the table cannot rank a sampler: a point near the posterior's mode (which "
            "for this near-Gaussian posterior is near its mean) beats any ensemble of as many exact draws on the "
            "weights' mean error and on the predictive TV, because the exact draws carry their Monte Carlo error "
            "(about 0.8 / sqrt(12) posterior sd in the mean); both favour a collapsed sampler, so neither has a "
            "verdict. Why the chain stays narrow was "
            "not measured here (the step size and length of the sampling stages, and T, are the run's settings at "
            "the top of this page).", ""]


def _verdicts(frame: pd.DataFrame, references: pd.DataFrame | None) -> list[str]:
    """Two families, each Holm-corrected on its own: the parts against SGD and the whole network (error, NLL), and
    the last layer against its exact reference (on the seeds that have one)."""
    accuracy, accuracy_names = [], []
    for method, baseline in CLAIMS:
        a = frame[frame.method == method].set_index("seed")
        b = frame[frame.method == baseline].set_index("seed")
        common = sorted(set(a.index) & set(b.index))
        if not common:
            continue
        for key, label in (("test_error_pct", "error %"), ("nll", "NLL")):
            accuracy.append(Paired(a.loc[common, key].tolist(), b.loc[common, key].tolist(), margin=MARGINS[key]))
            accuracy_names.append(f"{LABELS[method]} against {LABELS[baseline]}, {label} (margin {MARGINS[key]:g})")
    checks, check_names = [], []
    if references is not None and not references.empty:
        for method, baseline, margin, text in REFERENCE_CLAIMS:
            checks.append(Paired(references[method].tolist(), references[baseline].tolist(), margin=MARGINS[margin]))
            check_names.append(f"last layer, {text} (margin {MARGINS[margin]:g})")
    if not accuracy and not checks:
        return []
    margins = (f"absolute, in each metric's units: error {MARGINS['test_error_pct']:g} percentage points, NLL "
               f"{MARGINS['nll']:g} nats, predictive TV {MARGINS['tv']:g}, |log MI ratio| {MARGINS['mi_logerr']:g}, "
               f"|log sd ratio| {MARGINS['logsd']:g}")
    lines = ["## Verdicts", "", method_statement(margin=margins) + " Two families, each corrected on its own: the "
             "parts against SGD and the whole network, and the last layer against its exact reference; over the "
             "report, each kind of claim then errs with probability at most 10 % (all together at most 20 %).", ""]
    for title, family, names in (("Against SGD and the whole network", accuracy, accuracy_names),
                                 ("The last layer against its exact conditional posterior", checks, check_names)):
        if not family:
            continue
        verdicts = compare_paired(family)
        lines += [f"{title}: {len(family)} comparisons, {tally(verdicts)}.", ""]
        for name, verdict in zip(names, verdicts):
            detectable = "" if math.isnan(verdict.detectable) else f"; detectable {verdict.detectable:.3g}"
            lines.append(f"- {name}: {verdict.describe()}{detectable}")
        lines.append("")
    return lines[:-1]
