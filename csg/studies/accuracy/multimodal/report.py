"""``results/csgmcmc/accuracy_multimodal.{md,csv,png}`` and the tables beside them.

Written from the study's tables only (:func:`write`), so that ``--report-only`` rewrites the same report from the
CSVs of a previous run (:func:`load`). The edge check runs again before anything is written.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from csg.evaluation.comparison import interval_text, method_statement, tally
from csg.io.atomic import atomic_write_text
from csg.studies.accuracy.multimodal import figures, reading, study, tuning, verdicts
from csg.studies.accuracy.multimodal.targets import SPECS

FILES = {"runs": "accuracy_multimodal_runs.csv", "tuning": "accuracy_multimodal_tuning.csv",
         "barriers": "accuracy_multimodal_barriers.csv", "targets": "accuracy_multimodal_targets.csv"}
NETWORK = Path("reference") / "network_multimodal.json"


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Per target, method and budget: the tuned setting, M and its ceiling, and each metric's mean and s.e. over
    the evaluation seeds, with the exact floor of W2."""
    floor = runs[runs.method == "exact"].groupby(["target", "budget"]).w2.mean().rename("w2_floor")
    runs = runs[runs.method != "exact"]
    grouped = runs.groupby(["target", "method", "budget"], sort=False)
    first = grouped[["step", "explore", "cycle", "cycles", "ceiling"]].first()
    means = grouped[["mode_error", "core_tv", "w2", "crossings", "covered"]].mean()
    errors = grouped[["mode_error", "core_tv", "w2", "crossings"]].sem().add_suffix("_se")
    counts = grouped.agg(seeds=("seed", "count"), diverged=("finite", lambda f: int((~f.astype(bool)).sum())))
    table = pd.concat([first, means, errors, counts], axis=1).reset_index()
    return table.join(floor, on=["target", "budget"])


def _cell(mean: float, se: float, digits: int = 3) -> str:
    if not math.isfinite(mean):
        return "-"
    return f"{mean:.{digits}f} +- {se:.{digits}f}" if math.isfinite(se) else f"{mean:.{digits}f}"


def _setting(row) -> str:
    if row.cycle <= 1:
        return f"h = {tuning.power(row.step)} / L"
    return f"alpha_0 = {tuning.power(row.step)} / L, beta {row.explore:g}, C {int(row.cycle)}"


def labels(barriers: pd.DataFrame) -> dict[str, str]:
    return {t: figures.barrier_label(barriers, t) for t in SPECS if t in set(barriers.target)}


def _target_lines(tables: dict[str, pd.DataFrame], summary: pd.DataFrame) -> list[str]:
    barriers, info = tables["barriers"], tables["targets"].set_index("target")
    lines = ["## The targets and their barriers", "",
             "Escape barriers from minimum-energy paths (the string method between each pair of neighbouring minima, "
             "csg/studies/accuracy/multimodal/barriers.py): the highest energy on the path less the energy of the "
             "minimum left. L: the largest curvature at the minima (steps are in units of 1 / L). Core share: the "
             "exact probability of lying in a mode's core (Table 4's radius, 1.443 sd; the network: the 99 % ellipsoid of the "
             "mode's Laplace fit, by the reference below).", "",
             "| target | modes | weights | pairs measured | escape barrier (nats): min / median / max | L | core share |",
             "|---|---:|---|---:|---|---:|---:|"]
    for target in labels(barriers):
        block = barriers[barriers.target == target]
        spec = SPECS[target]
        weights = ("0.75 / 0.25" if target.startswith("barrier") else
                   "the reference's (below)" if target == "network" else "1/25 each")
        lines.append(f"| {target}: {spec.label} | {int(info.modes[target])} | {weights} | {len(block) // 2} | "
                     f"{block.barrier.min():.2f} / {block.barrier.median():.2f} / {block.barrier.max():.2f} | "
                     f"{info.scale[target]:.4g} | {info.core_share[target]:.3f} |")
    return lines + [""]


def _verdict_lines(found: pd.DataFrame) -> list[str]:
    lines = ["## Verdicts: cyclical against constant step, paired by seed", "",
             method_statement(margin=verdicts.statement()[0], bar=verdicts.statement()[1]) +
             f" One family: all {len(found)} comparisons below (every pair, target, budget and metric). Each "
             "method at its tuned setting of that budget (chosen on seeds 0-4, judged on the evaluation seeds).", ""]
    for metric, name in verdicts.METRICS.items():
        block = found[found.metric == metric]
        if block.empty:
            continue
        lines += [f"**{name}** (difference = cyclical - constant; lower is better):", "",
                  "| target | budget | pair | cyclical | constant | difference | simultaneous interval | margin | bar | "
                  "detectable | verdict |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for row in block.itertuples():
            interval = interval_text(row.low, row.high, "+.3f")
            lines.append(f"| {row.target} | {row.budget:,} | {row.method} - {row.baseline} | "
                         f"{row.method_mean:.3f}{_miss(row.method_meets)} | {row.baseline_mean:.3f}"
                         f"{_miss(row.baseline_meets)} | {row.difference:+.3f} | {interval} | {row.margin:.3g} | "
                         f"{row.bar:.3g} | {row.detectable:.3g} | {_verdict(row)} |")
        lines += ["", f"- {name}: {tally(block.itertuples())} of {len(block)}; the smallest detectable difference "
                      f"(80 % power at the family's level) is in median {block.detectable.median():.3g} "
                      f"({block.detectable.min():.3g} to {block.detectable.max():.3g}).", ""]
    missed = found[found.verdict.isin(["helps", "hurts"]) & (found.method_meets == False)  # noqa: E712
                   & (found.baseline_meets == False)]  # noqa: E712
    return lines + [f"- **all {len(found)}**, one Holm family: {tally(found.itertuples())}; of the helps and hurts, "
                    f"{len(missed)} are between two methods that both miss the bar (marked *: a difference found, "
                    "neither meets the bar).", "", "A mean marked ' (miss)' does not meet the bar.", ""]


def _miss(meets) -> str:
    return " (miss)" if meets is False or meets == "False" else ""


def _verdict(row) -> str:
    both_miss = _miss(row.method_meets) and _miss(row.baseline_meets)
    return f"{row.verdict}*" if both_miss and row.verdict in ("helps", "hurts") else row.verdict


def _per_target_lines(summary: pd.DataFrame, tables: dict) -> list[str]:
    lines = ["## Each target: tuned settings and scores on the evaluation seeds", "",
             "Mean +- s.e. over the evaluation seeds. M: cycles in all (constant steps: chains), ceiling: the mode-weight "
             "error of M perfect independent mode picks (exact, csg/studies/accuracy/multimodal/ceiling.py). Crossings: "
             "entries into another mode's core per chain over the kept iterations. Covered: modes with more than 100 kept "
             "iterations in their core (Table 4's rule), mean over seeds. Arrived: the share of seeds whose kept iterations "
             "all lie within 100 nats of the lowest minimum (the others are scored 1). W2: 128 draws against 128 exact "
             "draws; floor: two exact samples.", ""]
    names = labels(tables["barriers"])
    for target in names:
        block = summary[summary.target == target]
        if block.empty:
            continue
        lines += [f"### {target}: {SPECS[target].label} ({names[target]})", "",
                  "| budget | method | tuned setting | M | ceiling | mode-weight error | core TV | crossings / chain | "
                  "covered | arrived | W2 (floor) |", "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in block.sort_values(["budget", "method"], key=_method_order).itertuples():
            lines.append(f"| {row.budget:,} | {row.method} | {_setting(row)} | {int(row.cycles)} | {row.ceiling:.3f} | "
                         f"{_cell(row.mode_error, row.mode_error_se)} | {_cell(row.core_tv, row.core_tv_se)} | "
                         f"{row.crossings:.3g} | {row.covered:.2f} | {1 - row.diverged / row.seeds:.2f} | "
                         f"{_cell(row.w2, row.w2_se, 2)}{f' ({row.w2_floor:.2f})' if math.isfinite(row.w2_floor) else ''} |")
        lines.append("")
    return lines


def _method_order(column: pd.Series) -> pd.Series:
    if column.name != "method":
        return column
    order = {"SGLD": 0, "cSGLD": 1, "SGLD x4": 2, "cSGLD x4": 3, "SGHMC": 4, "cSGHMC": 5}
    return column.map(lambda m: order.get(m, 9))


def _tuning_lines(protocol: study.Protocol, tables: dict[str, pd.DataFrame]) -> list[str]:
    methods = [tuning.BY_NAME[m] for m in protocol.methods]
    chosen, tried = tables["chosen"], tables["tuning"]
    cyclical = chosen[chosen.cyclical.astype(bool)]
    first = sum(len(protocol.grids.settings(tuning.BY_NAME[m])) for m in set(tried.method))
    settings = tried.drop_duplicates(["target", "method", *tuning.SETTING]).groupby("target").size()
    rounds = tables["targets"].get("tuning_rounds", pd.Series(dtype=float)).dropna()
    bounds = cyclical.bounds.fillna("").str.split(", ").explode()
    bounds = bounds[bounds != ""]
    beta_zero = int((bounds == "beta 0").sum())
    beta_top = int(bounds.str.startswith("beta 0.").sum())
    shortest = int((bounds == f"C {min(protocol.grids.cycle_lattice)}").sum())
    single = int(sum(int(r.cycles) == tuning.BY_NAME[r.method].chains for r in cyclical.itertuples()))
    spread = f"{int(settings.min())} to {int(settings.max())}" if len(settings) else "0"
    took = f" in {int(rounds.min())} to {int(rounds.max())} rounds" if len(rounds) else ""
    return ["## Tuning", "",
            f"Grids, per method: {'; '.join(tuning.grid_text(protocol.grids, methods))}. The first round ran every "
            f"step at the first round's beta and C ({first} settings per target); each later round ran, around every "
            "choice one of whose neighbours (in step, beta or C) had not run, the block of its neighbours, with the "
            "first round's noise and starts, until every choice had all its neighbours run"
            f"{took}, {spread} settings per target in all; all on the tuning seeds "
            f"{', '.join(map(str, protocol.tuning_seeds))} at every budget (a shorter budget's chain is the start of "
            "a longer one's); the chosen setting has the lowest mean core TV over them "
            "(csg/studies/accuracy/multimodal/tuning.py). **Edge check: passed**: each of the "
            f"{len(chosen)} choices is bracketed, every neighbour along every axis ran and scored no better or lies "
            "outside the domain (the report is not written otherwise). On the domain's bound, where the optimum is "
            f"the boundary itself: of the {len(cyclical)} cyclical choices, {beta_zero} take beta = 0 (no exploration "
            f"stage), {beta_top} the largest beta that leaves a sampling stage, {shortest} the shortest cycle C = {min(protocol.grids.cycle_lattice)} and {single} one cycle "
            "per chain. All settings' tuning means: accuracy_multimodal_tuning.csv.", ""]


def _network_lines(references: Path, protocol: study.Protocol) -> list[str]:
    path = references / NETWORK.name
    if not path.exists():
        return []
    facts = json.loads(path.read_text())
    if not (facts.get("accepted") and "network" in protocol.targets):
        return ["## The network: not in this study", "", *facts.get("report", []), ""]
    budgets = ", ".join(f"{b:,}" for b in protocol.network_budgets)
    return ["## The network: its reference, and why NUTS and parallel tempering could not give one", "", *facts["report"], "",
            f"The network's runs: budgets {budgets} only (the study's time: a gradient of the network costs about "
            "12 x a 2-D mixture's), started uniformly on +-2 prior sd. No exact "
            "sampler, so no W2 and no W2 verdicts; its mode-weight errors and ceilings are against the reference's "
            "weights, its core TV against the reference's core shares. A run whose kept iterations reach an energy "
            "100 nats above the lowest minimum (density e^-100 of the mode's, 2 (U - U_min) > 200) counts as a chain "
            "that left the target (error 1), as on the mixtures; here it is mostly one that has not yet arrived: from "
            "the box (energies of thousands of nats) some chains descend slowly, along plateaus where a unit "
            "saturates.", ""]


def _arrival_lines(runs: pd.DataFrame) -> list[str]:
    """The network's arrival rates, and its mode-weight error on the seeds where both methods arrived."""
    found = verdicts.arrived(runs)
    if found.empty:
        return []
    lines = ["### The network: arrival, and hopping once arrived", "",
             "Where a method's chains have not all arrived (kept iterations within 100 nats of the lowest minimum), "
             "its mode-weight error mixes descent with hopping between modes. Below, each pair's arrival rates over "
             "all evaluation seeds, and the mode-weight error on the seeds where both arrived: a family of its own "
             "(the same statistics, bar and margin as above). It conditions on an outcome of the runs, so it describes; "
             "the study's verdicts are those above.", "",
             "| budget | pair | arrived (cyclical / constant) | seeds, both arrived | cyclical | constant | difference "
             "| simultaneous interval | verdict |", "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for row in found.itertuples():
        interval = interval_text(row.low, row.high, "+.3f")
        lines.append(f"| {row.budget:,} | {row.method} - {row.baseline} | {row.method_arrived:.2f} / "
                     f"{row.baseline_arrived:.2f} | {row.seeds} | {row.method_mean:.3f}{_miss(row.method_meets)} | "
                     f"{row.baseline_mean:.3f}{_miss(row.baseline_meets)} | {row.difference:+.3f} | {interval} | "
                     f"{_verdict(row)} |")
    return lines + ["", f"Family of {len(found)}: {tally(found.itertuples())}.", ""]


def markdown(result: study.Study, found: pd.DataFrame, summary: pd.DataFrame, references: Path) -> str:
    protocol, tables = result.protocol, result.tables
    load = f"; the machine's 15-minute load average at the end: {result.load:.2f}" if math.isfinite(result.load) else ""
    took = f"{result.seconds / 60:.1f} min" if result.seconds >= 60 else f"{result.seconds:.0f} s"
    processes = f"{protocol.workers} process{'es' if protocol.workers > 1 else ''}"
    timing = f"{took} ({processes}{load})" if math.isfinite(result.seconds) else "time not recorded"
    budgets = ", ".join(f"{b:,}" for b in protocol.budgets)
    if "network" in set(tables["runs"].target) and tuple(protocol.network_budgets) != tuple(protocol.budgets):
        budgets += f" (the network: {', '.join(f'{b:,}' for b in protocol.network_budgets)}, below)"
    lines = ["# Where do cycles pay? Cyclical and constant steps on posteriors whose barriers we control", "",
             f"Scale: {protocol.name}. Budgets {budgets} gradient evaluations per run (one chain of B iterations, or 4 "
             f"chains of B / 4); methods {', '.join(protocol.methods)}; each tuned on seeds "
             f"{', '.join(map(str, protocol.tuning_seeds))} and evaluated on {len(protocol.seeds)} fresh seeds "
             f"({min(protocol.seeds)}-{max(protocol.seeds)}); {timing}. Command: `make accuracy-multimodal` "
             "(`make accuracy-multimodal-report` rewrites this file from the CSVs beside it). Full-batch gradients; "
             "SGLD's noise sqrt(2 h); SGHMC at momentum 0.9 with lr = h (1 - 0.9) (in the high-friction limit SGLD at "
             "step h); the cyclical methods: cSG-MCMC's Eq. (1) from alpha_0, cycle length C, exploration (the first "
             "share beta of each cycle) without noise, draws from the sampling stages; constant steps: 10 % burn-in. "
             "Every run of a seed starts at the same points (uniform on a box around the modes; the grids: the paper's "
             "U(-10, 10)^2) and sees the same noise.", "",
             "## Where the cycles pay", "", *reading.bullets(found, summary, tables), "",
             "![verdicts over barrier height and budget](accuracy_multimodal.png)", "",
             *_target_lines(tables, summary), *_verdict_lines(found), *_per_target_lines(summary, tables),
             *_tuning_lines(protocol, tables), *_network_lines(references, protocol), *_arrival_lines(tables["runs"]),
             "![mode-weight error against budget, with the ceilings](accuracy_multimodal_curves.png)", ""]
    return "\n".join(lines)


def write(result: study.Study, out: Path, references: Path) -> Path:
    """Every file of the report into ``out`` (after the edge check)."""
    tuning.check_edges(result.tables["chosen"])
    out.mkdir(parents=True, exist_ok=True)
    runs = result.tables["runs"]
    summary = summarise(runs)
    found = verdicts.verdicts(runs)
    for key, name in FILES.items():
        table = result.tables[key]
        if key == "targets":
            table = table.assign(study_seconds=result.seconds, study_load=result.load)
        atomic_write_text(out / name, table.to_csv(index=False))
    atomic_write_text(out / "accuracy_multimodal.csv", summary.to_csv(index=False))
    atomic_write_text(out / "accuracy_multimodal_verdicts.csv", found.to_csv(index=False))
    names = labels(result.tables["barriers"])
    figures.phase_diagram(found, names, out / "accuracy_multimodal.png")
    figures.curves(summary, names, out / "accuracy_multimodal_curves.png")
    atomic_write_text(out / "accuracy_multimodal.md", markdown(result, found, summary, references))
    return out / "accuracy_multimodal.md"


def load(out: Path, protocol: study.Protocol) -> study.Study:
    """The study of a previous run from its CSVs in ``out`` (``--report-only``)."""
    tables = {key: pd.read_csv(out / name) for key, name in FILES.items()}
    tables["chosen"] = tuning.choose(tables["tuning"], protocol.grids)
    facts = tables["targets"]
    seconds = float(facts.study_seconds.iloc[0]) if "study_seconds" in facts else math.nan
    load = float(facts.study_load.iloc[0]) if "study_load" in facts else math.nan
    runs = tables["runs"]
    measured = runs[runs.method != "exact"]
    protocol = replace(protocol, seeds=tuple(sorted(int(s) for s in set(measured.seed))),
                       budgets=tuple(sorted(int(b) for b in set(measured.budget))),
                       methods=tuple(m for m in protocol.methods if m in set(measured.method)),
                       targets=tuple(t for t in SPECS if t in set(measured.target)))
    return study.Study(protocol, tables, seconds, load)
