"""The posterior benchmark's report: per budget, every contender's scores beside the expected TV of as many exact
draws as it has members, and cSGHMC's paired verdicts against each (:func:`csg.evaluation.comparison.compare_paired`, one
Holm family over the report), a figure of agreement and total variation against budget, and a reading generated
from the verdicts. Every file is written atomically."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from csg.evaluation.comparison import Paired, compare_paired, method_statement, tally, verdict_frame
from csg.reporting import atomic_open, markdown_table, write_text
from studies.benchmark.study import BASE, NOISE_OFF, Protocol

__all__ = ["METRICS", "floor_of", "verdicts", "write"]

# metric -> (words, lower is better, equivalence margin: a difference smaller than it is negligible here)
METRICS = {"agreement": ("top-1 agreement with the reference", False, 0.005),
           "tv": ("total variation to the reference", True, 0.005), "nll": ("test NLL", True, 0.01),
           "ece": ("test ECE", True, 0.005), "ood_tv": ("OOD total variation to the reference", True, 0.01)}
RUNS, TUNING, VERDICTS, REPORT, FIGURE = ("posterior_benchmark_runs.csv", "posterior_benchmark_tuning.csv",
                                          "posterior_benchmark_verdicts.csv", "posterior_benchmark.md",
                                          "posterior_benchmark.png")


def verdicts(runs: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """cSGHMC against every other method at every budget, on every metric of :data:`METRICS`, paired by seed: one
    Holm family. ``difference`` = cSGHMC - the other; ``helps``: cSGHMC is the better (also where higher is)."""
    keys, comparisons = [], []
    for budget in dict.fromkeys(runs.budget):
        here = runs[runs.budget == budget]
        base = here[here.method == BASE].set_index("seed")
        for other in dict.fromkeys(here.method):
            if other == BASE or base.empty or (budget, other) in duplicates(runs):
                continue
            theirs = here[here.method == other].set_index("seed")
            seeds = sorted(set(base.index) & set(theirs.index))
            for metric, (_, lower, margin) in METRICS.items():
                if metric not in base.columns or metric not in theirs.columns:
                    continue
                keys.append({"budget": budget, "method": BASE, "baseline": other, "metric": metric})
                comparisons.append(Paired(base.loc[seeds, metric].to_numpy(float),
                                          theirs.loc[seeds, metric].to_numpy(float), lower_is_better=lower,
                                          margin=margin))
    if not comparisons:
        return pd.DataFrame()
    return pd.concat([pd.DataFrame(keys), verdict_frame(compare_paired(comparisons, alpha))], axis=1)


def _added(runs: pd.DataFrame) -> str:
    if "added_methods" not in runs.columns or not isinstance(runs.added_methods.iloc[0], str):
        return ""
    return (f"; {runs.added_methods.iloc[0]} added by a run of their own (`ARGS=\"contenders=... merge=true\"`, "
            f"{float(runs.added_seconds.iloc[0]) / 60:.1f} min), every other row as it was")


def duplicates(runs: pd.DataFrame) -> set[tuple[str, str]]:
    """(budget, "Snapshot-SGDM") where its tuned step is cSGHMC's: its runs are then the noise-off control's (the same
    contender, step and seeds), compared once, as the control."""
    found = set()
    for budget in dict.fromkeys(runs.budget):
        here = runs[runs.budget == budget]
        snapshot, off = here[here.method == "Snapshot-SGDM"], here[here.method == NOISE_OFF]
        if len(snapshot) and len(off) and set(snapshot.lr0) == set(off.lr0):
            found.add((budget, "Snapshot-SGDM"))
    return found


def effect(row, verdict: bool = True) -> str:
    """A verdict with its effect size and margin: "hurts (+0.0013, within the margin 0.005)"."""
    margin = METRICS[row.metric][2]
    within = row.verdict in ("helps", "hurts") and abs(row.difference) < margin
    size = f"{row.difference:+.4f}" + (f", within the margin {margin:g}" if within else "")
    return f"{row.verdict} ({size})" if verdict else size


def noise_lines(runs: pd.DataFrame, found: pd.DataFrame) -> list[str]:
    """What the noise does: cSGHMC against its own cycles with the noise off, paired at its step, per budget; and
    where Snapshot-SGDM is that control."""
    if found.empty or NOISE_OFF not in set(found.baseline):
        return []
    cells = []
    for budget in dict.fromkeys(runs.budget):
        block = found[(found.baseline == NOISE_OFF) & (found.budget == budget)]
        row = {r.metric: r for r in block.itertuples()}
        if "tv" in row:
            cells.append(f"{budget}: total variation {effect(row['tv'])}, agreement {effect(row['agreement'])}")
    same = sorted(b for b, _ in duplicates(runs))
    return [f"- **The noise** (cSGHMC against the same cycles with the noise off, T = 0, paired at cSGHMC's step; "
            f"difference = cSGHMC - noise off, so a positive TV difference means the noise moves the predictive "
            f"away from the reference): " + "; ".join(cells) + "."
            + (f" Snapshot-SGDM's own tuning chose cSGHMC's step at {', '.join(same)}: its runs there are this "
               "control's, compared once." if same else "")]


def twin_lines(runs: pd.DataFrame, within: float = 0.001) -> list[str]:
    """Methods whose test TV is within ``within`` of the noise-off control's on every seed at a budget: in effect
    the same predictive, whatever the method is meant to add."""
    found = []
    for budget in dict.fromkeys(runs.budget):
        here = runs[runs.budget == budget]
        off = here[here.method == NOISE_OFF].set_index("seed").tv
        if off.empty:
            continue
        for method, block in here.groupby("method", sort=False):
            if method in (NOISE_OFF, "Snapshot-SGDM", BASE):
                continue
            gap = (block.set_index("seed").tv - off).abs().dropna()
            if len(gap) and float(gap.max()) <= within:
                found.append(f"{method} at {budget} (at most {float(gap.max()):.4f})")
    if not found:
        return []
    return [f"- **In effect the noise-off control**: per seed, these methods' test TV is within {within:g} of the "
            f"noise-off control's: {', '.join(found)}: in effect the same predictive, whatever their verdicts against "
            "cSGHMC say."]


def trend_lines(runs: pd.DataFrame) -> list[str]:
    """Methods whose mean test TV is larger at the largest budget than at a smaller one, with their tuned steps."""
    order = sorted(dict.fromkeys(runs.budget), key=lambda b: int(runs[runs.budget == b].budget_epochs.iloc[0]))
    found, smaller = [], 0
    for method, block in runs.groupby("method", sort=False):
        tv = block.groupby("budget").tv.mean()
        lr = block.groupby("budget").lr0.first()
        if len(tv) == len(order) and tv[order[-1]] > tv[order[:-1]].min() + 0.005:
            found.append(f"{method} (" + ", ".join(f"{b}: {tv[b]:.4f} at lr0 {lr[b]:.3g}" for b in order) + ")")
            smaller += bool(lr[order[-1]] < lr[tv[order[:-1]].idxmin()])
    if not found:
        return []
    return [f"- **More budget, farther from the reference** for {len(found)} methods, their mean test TV larger at "
            f"{order[-1]} than at a smaller budget: " + "; ".join(found) + f". For {smaller} of them the step tuned "
            f"on the held-out digits' NLL at {order[-1]} is smaller than at the budget of their least TV (the step "
            "is tuned on NLL, not on closeness to the posterior)."]


def floor_of(floors: dict, members: float) -> tuple[int, float]:
    """The expected TV of S exact draws (the mean TV of S random reference draws' average to the reference) at
    S = ``members``, or at the listed S nearest to it where that S is not listed: (S, TV)."""
    sizes = sorted(int(s) for s in floors)
    size = min(sizes, key=lambda s: (abs(s - members), s))
    return size, float(floors[str(size)]["total_variation"])


def convergence_text(reference: dict) -> str:
    """The reference's convergence checks in words (reference_network.json's facts of one temperature)."""
    checks, settings = reference["checks"], reference.get("settings", {})
    rhat = checks["rhat_test"]
    parts = [f"{settings['chains']} chains x {settings['samples']} draws" if settings else "",
             f"split R-hat of the test class probabilities median / 99 % / max {rhat.get('median', math.nan):.4f} / "
             f"{rhat.get('q99', math.nan):.4f} / {rhat['max']:.4f}, "
             f"{rhat.get('share_at_most_1.01', math.nan):.4f} of them at most 1.01"]
    if "rhat_ood" in checks:
        parts.append(f"OOD R-hat max {checks['rhat_ood']['max']:.4f}")
    if "halves" in checks:
        parts.append(f"the draws' halves within {checks['halves']['total_variation']:.4f} in test TV")
    if "ess_test" in checks:
        parts.append(f"test bulk ESS at least {checks['ess_test']['bulk']['min']:.0f}")
    return "; ".join(p for p in parts if p) + ": every check passed"


def _cell(values: pd.Series, digits: int) -> str:
    finite = values[values.map(math.isfinite)] if len(values) else values
    if finite.empty:
        return "-"
    if len(finite) < 2:
        return f"{finite.mean():.{digits}f}"
    return f"{finite.mean():.{digits}f} +- {finite.std(ddof=1) / math.sqrt(len(finite)):.{digits}f}"


def _table(runs: pd.DataFrame, tuning: pd.DataFrame, floors: dict, budget: str) -> list[str]:
    here = runs[runs.budget == budget]
    rows = []
    for method in dict.fromkeys(here.method):
        block = here[here.method == method]
        members = float(block.members.mean())
        size, floor = floor_of(floors, members) if floors and math.isfinite(members) else (0, math.nan)
        lr0 = f"{block.lr0.iloc[0]:.4g} (x{block.factor.iloc[0]:g}{'' if block.bracketed.iloc[0] else ', grid edge'})"
        if method == NOISE_OFF:
            lr0 = f"{block.lr0.iloc[0]:.4g} (cSGHMC's)"
        shown = f"{members:g}" if math.isfinite(members) else "a Gaussian"
        floor_cell = "-" if not math.isfinite(floor) else (
            f"{floor:.4f}" if size == members else f"{floor:.4f} (S = {size}, the nearest listed)")
        rows.append([method, shown, lr0, _cell(block.error_pct, 2), _cell(block.nll, 4), _cell(block.ece, 4),
                     _cell(block.ood_auroc, 3), _cell(block.agreement, 4), _cell(block.tv, 4), floor_cell,
                     _cell(block.get('ood_tv', pd.Series(dtype=float)), 4), f"{block.train_seconds.mean():.1f}"])
    header = ["method", "members", "lr0 (x recipe)", "error %", "NLL", "ECE", "OOD AUROC", "agreement", "TV",
              "expected TV of S exact draws", "OOD TV", "train s"]
    return [f"### Budget {budget} ({int(here.budget_epochs.iloc[0])} epochs over all chains)", "",
            *markdown_table(header, rows, align="lrlrrrrrrrrr"), ""]


def _margins() -> str:
    """The equivalence margins of :data:`METRICS`, in words, for :func:`csg.evaluation.comparison.method_statement`."""
    return "absolute, in each metric's units: " + ", ".join(f"{words} {margin:g}"
                                                            for words, _, margin in METRICS.values())


def _verdict_lines(found: pd.DataFrame) -> list[str]:
    lines = ["## Verdicts: cSGHMC against each method, paired by seed", "",
             method_statement(margin=_margins()) + f" All {len(found)} comparisons (every budget, method and metric) "
             "are one family; "
             "difference = cSGHMC - the other, so on agreement (higher is better) a positive difference helps cSGHMC.",
             ""]
    rows = []
    for (budget, other), block in found.groupby(["budget", "baseline"], sort=False):
        cells = []
        for metric in METRICS:
            row = block[block.metric == metric]
            cells.append("-" if row.empty else effect(row.iloc[0]))
        rows.append([budget, other, *cells])
    lines += markdown_table(["budget", "against", *(words for words, *_ in METRICS.values())], rows)
    return lines + ["", f"- all: {tally(list(found.itertuples()))} of {len(found)}.", ""]


def reading(found: pd.DataFrame) -> list[str]:
    """Sentences generated from the verdicts: per other method, what cSGHMC's comparisons found."""
    if found.empty:
        return ["- No comparisons (cSGHMC was not run)."]
    lines = []
    for other, block in found.groupby("baseline", sort=False):
        helps, hurts = block[block.verdict == "helps"], block[block.verdict == "hurts"]
        said = []
        if len(helps):
            said.append("cSGHMC is better on " + ", ".join(f"{METRICS[r.metric][0]} at {r.budget} ({effect(r, False)})"
                                                           for r in helps.itertuples()))
        if len(hurts):
            said.append("worse on " + ", ".join(f"{METRICS[r.metric][0]} at {r.budget} ({effect(r, False)})"
                                                for r in hurts.itertuples()))
        rest = len(block) - len(helps) - len(hurts)
        lines.append(f"- against {other}: " + ("; ".join(said) + "; " if said else "")
                     + f"{rest} of {len(block)} comparisons inconclusive.")
    return lines


def edge_lines(tuning: pd.DataFrame) -> list[str]:
    """The method-budget cells whose chosen step is at the grid's edge (not bracketed): their verdicts may
    understate them."""
    if tuning.empty or "bracketed" not in tuning.columns:
        return []
    cells = tuning.groupby(["method", "budget"], sort=False).bracketed.first()
    edges = [f"{method} at {budget}" for (method, budget), bracketed in cells.items() if not bool(bracketed)]
    if not edges:
        return []
    return [f"- **Not bracketed**: in {len(edges)} of the {len(cells)} method-budget cells the tuned step is at the "
            f"grid's edge (the best validation NLL at the largest or smallest step tried): {', '.join(edges)}. A step "
            "beyond the grid might do better, so the verdicts against these cells may understate them."]


def floor_lines(runs: pd.DataFrame, floors: dict) -> list[str]:
    """Per budget, the methods' mean TV over the expected TV of as many exact draws as each has members (a
    description, not a comparison between methods)."""
    if not floors:
        return []
    lines = []
    for budget in dict.fromkeys(runs.budget):
        here = runs[runs.budget == budget]
        ratios = {m: float(b.tv.mean()) / floor_of(floors, float(b.members.mean()))[1]
                  for m, b in here.groupby("method", sort=False) if math.isfinite(float(b.members.mean()))}
        if not ratios:
            continue
        low, high = min(ratios, key=ratios.get), max(ratios, key=ratios.get)
        lines.append(f"- at {budget}, every method's mean test TV is {ratios[low]:.1f} ({low}) to {ratios[high]:.1f} "
                     f"({high}) times the expected TV of as many exact draws (1: as close as that many independent "
                     "posterior draws; members that are not such draws can score below it).")
    return lines


def _figure(runs: pd.DataFrame, protocol: Protocol, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for method in dict.fromkeys(runs.method):
        block = runs[runs.method == method].groupby("budget_epochs", sort=True)
        for axis, metric in zip(axes, ("agreement", "tv")):
            means = block[metric].mean()
            axis.plot(means.index, means.values, marker="o", label=method)
    for axis, metric in zip(axes, ("agreement", "tv")):
        axis.set_xscale("log")
        axis.set_xlabel("budget: epochs over all chains")
        axis.set_ylabel(METRICS[metric][0])
    axes[1].legend(fontsize=7)
    figure.suptitle(f"Against NUTS at T = {protocol.temperature:g} (means over {len(protocol.seeds)} seeds)")
    figure.tight_layout()
    with atomic_open(path) as handle:
        figure.savefig(handle, format="png", dpi=110)
    plt.close(figure)


def write(out: Path, protocol: Protocol, tuning: pd.DataFrame, runs: pd.DataFrame, reference: dict,
          seconds: float, command: str) -> Path:
    """The report's files into ``out``; ``reference``: the JSON facts of the reference of ``protocol``'s T."""
    out.mkdir(parents=True, exist_ok=True)
    found = verdicts(runs)
    for name, table in ((RUNS, runs), (TUNING, tuning), (VERDICTS, found)):
        write_text(out / name, table.to_csv(index=False))
    _figure(runs, protocol, out / FIGURE)
    checks = reference["checks"]
    floors = checks.get("floors_test", {})
    lines = [f"# What does the posterior buy? The posterior benchmark ({protocol.name} scale)", "",
             f"`{command}` (studies/benchmark/study.py), {seconds / 60:.1f} min in {protocol.workers} "
             f"process(es){_added(runs)}. The task of `python train.py experiment=posterior_benchmark`: an MLP 49-32-10 on 1000 "
             f"real MNIST digits, scored on the 1000 test digits and on Fashion-MNIST (OOD), at T = "
             f"{protocol.temperature:g}, against the NUTS reference `{reference['file']}` (make reference-network; "
             f"{convergence_text(reference)}). Each method's `sampler.lr0` tuned on the "
             f"held-out digits' NLL over tuning seeds {', '.join(map(str, protocol.tuning_seeds))} (the grid: "
             f"{', '.join(f'{f:g}' for f in protocol.factors)} x the recipe's step; only the step is tuned, the "
             "cycles, exploration share and samples per cycle are the recipe's, chosen for cSGHMC on mnist5k: a home "
             f"advantage), then run on seeds {min(protocol.seeds)}-{max(protocol.seeds)}. The reference is never used "
             "to tune. Budgets are epochs over all of a method's chains (4 chains or 5 members each get their "
             f"share). '{NOISE_OFF}': cSGHMC's cycles at T = 0 at cSGHMC's chosen step, paired: the control for the "
             f"noise alone. {recipe_text(protocol.temperature)}", "",
             "## Reading (generated from the verdicts and the expected TV of exact draws)", "", *noise_lines(runs, found),
             *reading(found), *twin_lines(runs), *trend_lines(runs), *edge_lines(tuning),
             *floor_lines(runs, checks.get("floors_test", {})), "",
             f"![agreement and total variation against budget]({FIGURE})", "",
             "## Scores (mean +- s.e. over the evaluation seeds)", "",
             "Expected TV of S exact draws: the mean total variation between the average of S draws taken at "
             "random from the reference's chains and the reference, S the method's members (or the listed size "
             "nearest them, as the cell says): a yardstick for an ensemble of S independent posterior draws, not a "
             "bound (an ensemble whose members are not posterior draws can come closer).", ""]
    for budget in dict.fromkeys(runs.budget):
        lines += _table(runs, tuning, floors, budget)
    lines += _verdict_lines(found) if not found.empty else []
    rows = []
    for (method, budget), block in tuning.groupby(["method", "budget"], sort=False):
        tried = ", ".join(f"{r.lr0:.4g} ({r.validation_nll:.4f})" for r in block.itertuples())
        chosen = block[block.chosen.astype(bool)].lr0
        rows.append([method, budget, tried, f"{chosen.iloc[0]:.4g}",
                     "yes" if bool(block.bracketed.iloc[0]) else "no: the best is at the grid edge"])
    lines += ["## Tuning", "", *markdown_table(["method", "budget", "lr0 tried (validation NLL)", "chosen",
                                                "bracketed"], rows, align="lllrl")]
    write_text(out / REPORT, "\n".join(lines) + "\n")
    return out / REPORT


def merged(out: Path, tuning: pd.DataFrame, runs: pd.DataFrame, names, seconds: float):
    """The benchmark in ``out`` with the rows of ``names`` (and, for cSGHMC, its noise-off control) replaced by
    ``tuning`` and ``runs``': (tuning, runs, the study's seconds), the added run's seconds and methods recorded."""
    previous_tuning, previous_runs = pd.read_csv(out / TUNING), pd.read_csv(out / RUNS)
    shown = set(runs.method)
    before = float(previous_runs.study_seconds.iloc[0])
    tuning = pd.concat([previous_tuning[~previous_tuning.method.isin(shown)], tuning], ignore_index=True)
    runs = pd.concat([previous_runs[~previous_runs.method.isin(shown)], runs], ignore_index=True)
    runs = runs.assign(study_seconds=before, added_seconds=seconds, added_methods=", ".join(names))
    return tuning, runs, before


def recipe_text(temperature: float) -> str:
    """csg's recipe and the deep ensemble's schedule as the runs take them, read from the preset's composed config."""
    from studies.benchmark.task import compose

    sampler = compose(temperature, ("sampler=csghmc",)).sampler
    cycle = 200 // int(sampler.cycles)
    held = (1 + math.cos(math.pi * float(sampler.explore))) / 2
    step = (f"the sampling stage's step held at its start ({held:.3f} lr0)" if sampler.hold_sampling_lr
            else "the step decaying through the sampling stage")
    return (f"cSGHMC is csg's recipe: {sampler.cycles} cosine cycles (at 1x, {cycle} epochs each), the first "
            f"{float(sampler.explore):g} of each cycle without noise (beta), then SGHMC (momentum "
            f"{float(sampler.momentum):g}) at T = {temperature:g} with {step}, a sample at each of the last "
            f"{sampler.samples_per_cycle} epoch ends of a cycle (10 steps apart). The deep ensemble runs that schedule "
            f"with one cycle at T = 0 and momentum 0.9: a cosine decay over the first {float(sampler.explore):g} of "
            f"each member's epochs, then " + (f"the step held at {held:.3f} lr0" if sampler.hold_sampling_lr else
                                              "the decay on") + " for the rest, its last model a member.")


def load_reference_facts(path: Path, temperature: float) -> dict:
    """The reference JSON's entry for ``temperature`` (read as data)."""
    return json.loads(path.read_text())[f"{temperature:g}"]
