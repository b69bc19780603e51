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

from csg.evaluation.comparison import method_statement, tally
from csg.reporting import markdown_table, write_text
from studies.accuracy.multimodal import contour_report, figures, reading, study, tuning, verdicts
from studies.accuracy.multimodal.network_report import (NETWORK, arrival_lines, burnin_lines,  # noqa: F401
                                                            compared_cells, network_lines, verdict_mark, within_margin)
from studies.accuracy.multimodal.targets import SPECS

FILES = {"runs": "accuracy_multimodal_runs.csv", "tuning": "accuracy_multimodal_tuning.csv",
         "barriers": "accuracy_multimodal_barriers.csv", "targets": "accuracy_multimodal_targets.csv"}
OPTIONAL = {"burnin": "accuracy_multimodal_burnin.csv"}     # absent from a study before the network's burn-in


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Per target, method and budget: the tuned setting, M and its ceiling, and each metric's mean and s.e. over
    the evaluation seeds, with the exact floor of W2; per rank of the setting (:func:`.tuning.ranked`; 1: the
    choice) where the runs have ranks."""
    floor = runs[runs.method == "exact"].groupby(["target", "budget"]).w2.mean().rename("w2_floor")
    runs = runs[runs.method != "exact"]
    grouped = runs.groupby(["target", "method", "budget", *(["rank"] if "rank" in runs.columns else [])], sort=False)
    first = grouped[["step", "explore", "cycle", "cycles", "ceiling"]].first()
    means = grouped[["mode_error", "core_tv", "w2", "crossings", "covered"]].mean()
    errors = grouped[["mode_error", "core_tv", "w2", "crossings"]].sem().add_suffix("_se")
    counts = grouped.agg(seeds=("seed", "count"), diverged=("finite", lambda f: int((~f.astype(bool)).sum())))
    table = pd.concat([first, means, errors, counts], axis=1).reset_index()
    return table.join(floor, on=["target", "budget"])


def _cell(mean: float, se: float, digits: int = 3) -> str:
    shown = f"{mean:.{digits}f}" + (f" +- {se:.{digits}f}" if math.isfinite(se) else "")
    return shown if math.isfinite(mean) else "-"


def _setting(row) -> str:
    own = tuning.OWN.get(tuning.BY_NAME[row.method].kind)
    if own:
        return f"h = {tuning.power(row.step)} / L, {own} {row.explore:g}"
    if row.cycle <= 1:
        return f"h = {tuning.power(row.step)} / L"
    return f"alpha_0 = {tuning.power(row.step)} / L, beta {row.explore:g}, C {int(row.cycle)}"


def labels(barriers: pd.DataFrame) -> dict[str, str]:
    return {t: figures.barrier_label(barriers, t) for t in SPECS if t in set(barriers.target)}


def _target_lines(tables: dict[str, pd.DataFrame], summary: pd.DataFrame) -> list[str]:
    barriers, info = tables["barriers"], tables["targets"].set_index("target")
    lines = ["## The targets and their barriers", "",
             "Escape barriers from minimum-energy paths (the string method between each pair of neighbouring minima, "
             "studies/accuracy/multimodal/barriers.py): the highest energy on the path less the energy of the "
             "minimum left. L: the largest curvature at the minima (steps are in units of 1 / L). Core share: the "
             "exact probability of lying in a mode's core (Table 4's radius, 1.443 sd; the network: the 99 % ellipsoid of the "
             "mode's Laplace fit, by the reference below).", ""]
    rows = []
    for target in labels(barriers):
        block = barriers[barriers.target == target]
        weights = ("0.75 / 0.25" if target.startswith("barrier") else
                   "the reference's (below)" if target == "network" else "1/25 each")
        rows.append([f"{target}: {SPECS[target].label}", int(info.modes[target]), weights, len(block) // 2,
                     f"{block.barrier.min():.2f} / {block.barrier.median():.2f} / {block.barrier.max():.2f}",
                     f"{info.scale[target]:.4g}", f"{info.core_share[target]:.3f}"])
    return lines + markdown_table(["target", "modes", "weights", "pairs measured",
                                   "escape barrier (nats): min / median / max", "L", "core share"], rows,
                                  align="lrlrlrr") + [""]


TITLES = {"cycles": ("## Verdicts: cyclical against constant step, paired by seed", "cyclical", "constant", "One family"),
          "ICSGLD": ("## Verdicts: the ICSGLD paper's samplers against SGLD, cSGLD and CSGLD, paired by seed",
                     "method", "baseline", "A second family, Holm-corrected on its own (the cycles' verdicts above are "
                                           "as they were without it; with two families, the report's claims of all "
                                           "kinds together err with probability at most 30 %)")}


def _verdict_lines(found: pd.DataFrame) -> list[str]:
    """Each family of :data:`.verdicts.FAMILIES` present in ``found``: its section of verdict tables."""
    families = found.apply(lambda r: verdicts.family_of(r.method, r.baseline), axis=1) if len(found) else []
    lines = []
    for family in verdicts.FAMILIES:
        block = found[families == family] if len(found) else found
        if len(block):
            lines += _family_lines(block, *TITLES[family])
    return lines


def _family_lines(found: pd.DataFrame, title: str, mine: str, theirs: str, family: str) -> list[str]:
    lines = [title, "",
             method_statement(margin=verdicts.statement()[0], bar=verdicts.statement()[1]) +
             f" {family}: all {len(found)} comparisons below (every pair, target, budget and metric). Each "
             "method at its tuned setting of that budget (chosen on seeds 0-4, judged on the evaluation seeds).", ""]
    for metric, name in verdicts.METRICS.items():
        block = found[found.metric == metric]
        if block.empty:
            continue
        lines += [f"**{name}** (difference = {mine} - {theirs}; lower is better):", "", *markdown_table(
            ["target", "budget", "pair", mine, theirs, "difference", "simultaneous interval", "margin", "bar",
             "detectable", "verdict"],
            [[row.target, f"{row.budget:,}", contour_report.pair(row), *compared_cells(row), f"{row.margin:.3g}",
              f"{row.bar:.3g}", f"{row.detectable:.3g}", verdict_mark(row)] for row in block.itertuples()],
            align="lrlrrrrrrrl")]
        lines += ["", f"- {name}: {tally(block.itertuples())} of {len(block)}; the smallest detectable difference "
                      f"(80 % power at the family's level) is in median {block.detectable.median():.3g} "
                      f"({block.detectable.min():.3g} to {block.detectable.max():.3g}).", ""]
    missed, small = found[found.verdict.isin(["helps", "hurts"]) & (found.method_meets == False)  # noqa: E712
                          & (found.baseline_meets == False)], sum(map(within_margin, found.itertuples()))  # noqa: E712
    return lines + [f"- **all {len(found)}**, one Holm family: {tally(found.itertuples())}; of the helps and hurts, "
                    f"{len(missed)} are between two methods that both miss the bar (marked *: a difference found, "
                    f"neither meets the bar), and {small} are smaller than their margin (marked 'within the margin': "
                    "found, but negligible by the margin the report states).", "", "A mean marked ' (miss)' does not "
                    "meet the bar.", ""]


def _per_target_lines(summary: pd.DataFrame, tables: dict) -> list[str]:
    lines = ["## Each target: tuned settings and scores on the evaluation seeds", "",
             "Mean +- s.e. over the evaluation seeds. M: cycles in all (constant steps: chains; reSGLD: its kept T = 1 "
             "chain), ceiling: the mode-weight "
             "error of M perfect independent mode picks (exact, studies/accuracy/multimodal/ceiling.py). Crossings: "
             "entries into another mode's core per (kept) chain over the kept iterations. Covered: modes with more than 100 kept "
             "iterations in their core (Table 4's rule), mean over seeds. Arrived: the share of seeds whose kept iterations "
             "all lie within 100 nats of the lowest minimum (the others are scored 1). W2: 128 draws against 128 exact "
             "draws; floor: two exact samples.", ""]
    names = labels(tables["barriers"])
    for target in names:
        block = summary[summary.target == target]
        if block.empty:
            continue
        rows = [[f"{row.budget:,}", row.method, _setting(row), int(row.cycles), f"{row.ceiling:.3f}",
                 _cell(row.mode_error, row.mode_error_se), _cell(row.core_tv, row.core_tv_se), f"{row.crossings:.3g}",
                 f"{row.covered:.2f}", f"{1 - row.diverged / row.seeds:.2f}",
                 f"{_cell(row.w2, row.w2_se, 2)}{f' ({row.w2_floor:.2f})' if math.isfinite(row.w2_floor) else ''}"]
                for row in block.sort_values(["budget", "method"], key=_method_order).itertuples()]
        lines += [f"### {target}: {SPECS[target].label} ({names[target]})", "", *markdown_table(
            ["budget", "method", "tuned setting", "M", "ceiling", "mode-weight error", "core TV", "crossings / chain",
             "covered", "arrived", "W2 (floor)"], rows, align="rllrrrrrrrr"), ""]
    return lines


def _method_order(column: pd.Series) -> pd.Series:
    if column.name != "method":
        return column
    order = {"SGLD": 0, "cSGLD": 1, "SGLD x4": 2, "cSGLD x4": 3, "SGHMC": 4, "cSGHMC": 5, "reSGLD": 6, "CSGLD": 7,
             "ICSGLD x4": 8}
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
            "a longer one's)" + _rule_text(chosen) + " **Edge check: passed**: each of the "
            f"{len(chosen)} {'choices' if chosen.get('window', pd.Series(dtype=float)).isna().all() else 'best settings'} is bracketed in its step (and beta and C), every neighbour along those axes ran and scored no better or lies "
            "outside the domain (the report is not written otherwise); the ICSGLD paper's samplers' own value "
            "(T_high, zeta) is chosen from a short list whose ends are not bracketed (below). On the domain's bound, where the optimum is "
            f"the boundary itself: of the {len(cyclical)} cyclical choices, {beta_zero} take beta = 0 (no exploration "
            f"stage), {beta_top} the largest beta that leaves a sampling stage, {shortest} the shortest cycle C = {min(protocol.grids.cycle_lattice)} and {single} one cycle "
            f"per chain.{_own_bounds(chosen, tried)}{contour_report.limit_text(tried)} All settings' tuning means: "
            "accuracy_multimodal_tuning.csv.", ""]


def _own_bounds(chosen: pd.DataFrame, tried: pd.DataFrame | None = None) -> str:
    """The ICSGLD paper's samplers' own values (T_high, zeta: short lists whose ends are not bracketed), where their
    best settings lie on them, and how many settings each method's search ran per target and budget."""
    own = chosen[[tuning.BY_NAME[m].kind in tuning.OWN for m in chosen.method]]
    if own.empty:
        return ""
    parts, leaning, ends = [], [], 0
    for method, block in own.groupby("method", sort=False):
        counts = block.best_explore.value_counts().sort_index()
        values = tried[tried.method == method].explore if tried is not None and len(tried) else counts.index
        low, high = min(values), max(values)
        ends += int(block.best_explore.isin([low, high]).sum())
        name = tuning.OWN[tuning.BY_NAME[method].kind]
        parts.append(f"{method}'s best has {name} " + ", ".join(f"{v:g} in {int(n)}" for v, n in counts.items())
                     + f" of {len(block)} cells")
        for value, end in ((high, "largest"), (low, "smallest")):
            if counts.get(value, 0) > len(block) / 2:
                leaning.append(f"{method}'s best is mostly the {end} {name}")
    text = (" The ICSGLD paper's samplers' own value comes from a short list (T_high, zeta: the study's choice, "
            f"not a domain's bounds), and {ends} of their {len(own)} choices sit at an end of its list, not bracketed "
            "in it: " + "; ".join(parts) + ". A value beyond the list might do better there"
            + (f" ({'; '.join(leaning)})" if leaning else "")
            + ", so their verdicts are for these lists, not for fully tuned methods.")
    if tried is not None and len(tried):
        per = tried.drop_duplicates(["target", "method", "budget", *tuning.SETTING]).groupby(
            ["method", "target", "budget"]).size().groupby("method").median()
        text += (" The search's effort was not equal: settings run per target and budget (median), "
                 + ", ".join(f"{m} {per[m]:.0f}" for m in dict.fromkeys(chosen.method) if m in per) + ".")
    return text


def _rule_text(chosen: pd.DataFrame) -> str:
    """The one-standard-error rule in words, with how many choices it moved from the best."""
    if "window" not in chosen.columns or chosen.window.isna().all():
        return "; the chosen setting has the lowest mean core TV over them (studies/accuracy/multimodal/tuning.py)."
    moved = int(((chosen.step != chosen.best_step) | (chosen.explore != chosen.best_explore)
                 | (chosen.cycle != chosen.best_cycle)).sum())
    return (". The choice, by a one-standard-error rule (studies/accuracy/multimodal/tuning.py): the *best* setting "
            "has the lowest mean core TV over the tuning seeds; among the settings whose mean core TV is within one "
            "standard error of the best's (its s.e. over the tuning seeds: in median "
            f"{chosen.window.median():.3f}), the choice is the one whose chains crossed between modes most (ties: the "
            "lower core TV, then the smaller setting): five seeds cannot tell such settings apart, and one that ties "
            "without crossing owes its score to where its chains started. "
            f"It moved {moved} of the {len(chosen)} choices away from the best."
            + (f" {int(chosen.plateau.sum())} best settings lie at the step grid's low end on a plateau (the next step "
               "scores within one standard error; towards h -> 0 a chain stays where it starts, so a smaller step "
               "cannot be shown better): they count as bracketed, with "
               + ", ".join(f"{r.target} {r.method} at {r.budget:,}" for r in chosen[chosen.plateau.astype(bool)].itertuples())
               + "." if "plateau" in chosen.columns and chosen.plateau.astype(bool).any() else ""))


def _sensitivity_lines(moved: pd.DataFrame, which: str = "") -> list[str]:
    """How the verdicts move across each method's best settings (:func:`.verdicts.sensitivity`); ``which``: the
    family's words in the title."""
    ranks = sorted(int(c.split("_")[1]) for c in moved.columns if c.startswith("verdict_"))
    if len(ranks) < 2 or moved.empty:
        return []
    lines = [f"## How the verdicts move across the best settings{which}", "",
             f"Every method was also evaluated, on the same seeds, at its setting{'s' if len(ranks) > 2 else ''} of "
             f"rank{'s 2 to ' if len(ranks) > 2 else ' '}{max(ranks)}: after the "
             "choice (rank 1, the verdicts above), the settings with the next lowest mean core TV on the tuning seeds. "
             "Rank r's verdicts compare both methods of a pair at their rank-r settings, each rank and family in a Holm "
             "family of its own (the same comparisons, statistics, margins and bars as above): the verdicts' sensitivity to "
             "which of the settings that tuning could barely tell apart was chosen. Per rank (all metrics):", ""]
    for rank in ranks:
        column = moved[f"verdict_{rank}"].dropna()
        lines.append(f"- rank {rank}: {tally(column.to_frame('verdict').itertuples())} of {len(column)}")
    stable = moved[moved.stable]
    decided = moved[moved.verdict_1.isin(["helps", "hurts"])]
    lines += ["", f"**{len(stable)} of {len(moved)} comparisons keep their verdict under all {len(ranks)} ranks**, "
              f"and {int(decided.stable.sum())} of the {len(decided)} helps and hurts of rank 1; "
              "per metric and rank-1 verdict, how many keep it:", "", *markdown_table(
                  ["metric", "rank-1 verdict", "comparisons", "the same under every rank"],
                  [[verdicts.METRICS.get(metric, metric), verdict, len(block), int(block.stable.sum())]
                   for (metric, verdict), block in moved.groupby(["metric", "verdict_1"], sort=False)], align="llrr")]
    changing = moved[~moved.stable & moved.verdict_1.isin(["helps", "hurts"])]
    if changing.empty:
        return lines + ["", "Every help and hurt of rank 1 holds under every rank (all changes: "
                            "accuracy_multimodal_sensitivity.csv).", ""]
    lines += ["", f"The helps and hurts of rank 1 that do not hold under every rank ({len(changing)}; all changes: "
              "accuracy_multimodal_sensitivity.csv):", ""]
    rows = [[row.target, f"{row.budget:,}", verdicts.METRICS.get(row.metric, row.metric),
             f"{row.method} - {row.baseline}",
             *(_moved_cell(getattr(row, f"verdict_{r}"), getattr(row, f"difference_{r}")) for r in ranks)]
            for row in changing.itertuples()]
    lines += markdown_table(["target", "budget", "metric", "pair", *(f"rank {r}" for r in ranks)], rows,
                            align="lrll" + "l" * len(ranks))
    return lines + [""]


def _robust_bullet(moved: pd.DataFrame | None) -> list[str]:
    """The reading's line on how the helps and hurts stand across the best settings."""
    if moved is None or "verdict_2" not in moved.columns:
        return []
    ranks = sum(1 for c in moved.columns if c.startswith("verdict_"))
    lines = []
    for verdict in ("helps", "hurts"):
        block = moved[moved.verdict_1 == verdict]
        if len(block):
            lines.append(f"{int(block.stable.sum())} of the {len(block)} {verdict}")
    held = " and ".join(lines) if lines else "no helps or hurts to hold"
    return [f"- Across each method's best {ranks} settings by tuning score (the choice and the next {ranks - 1}; "
            f"below, How the verdicts move): {held} keep their verdict under every rank; "
            f"{int(moved.stable.sum())} of all {len(moved)} comparisons do."]


def _moved_cell(verdict, difference) -> str:
    if not isinstance(verdict, str):
        return "-"
    return f"{verdict} ({difference:+.3f})"


def markdown(result: study.Study, found: pd.DataFrame, summary: pd.DataFrame, references: Path,
             moved: pd.DataFrame | None = None) -> str:
    protocol, tables = result.protocol, result.tables
    summary = summary[summary["rank"] == 1] if "rank" in summary.columns else summary
    load = f"; the machine's 15-minute load average at the end: {result.load:.2f}" if math.isfinite(result.load) else ""
    took = f"{result.seconds / 60:.1f} min" if result.seconds >= 60 else f"{result.seconds:.0f} s"
    processes = f"{protocol.workers} process{'es' if protocol.workers > 1 else ''}"
    timing = f"{took} ({processes}{load})" if math.isfinite(result.seconds) else "time not recorded"
    facts = tables["targets"]
    if "added_seconds" in facts.columns and math.isfinite(float(facts.added_seconds.iloc[0])):
        timing += (f" for the first run, and {float(facts.added_seconds.iloc[0]) / 60:.1f} min more for "
                   f"{facts.added_methods.iloc[0]}, added by a run of their own (its load not recorded); the "
                   "machine's CPU model is not recorded")
    budgets = ", ".join(f"{b:,}" for b in protocol.budgets)
    first = verdicts.at_rank(tables["runs"], 1)
    if "network" in set(tables["runs"].target) and tuple(protocol.network_budgets) != tuple(protocol.budgets):
        budgets += f" (the network: {', '.join(f'{b:,}' for b in protocol.network_budgets)}, below)"
    lines = ["# Where do cycles pay? Cyclical and constant steps on posteriors whose barriers we control", "",
             f"Scale: {protocol.name}. Budgets {budgets} gradient evaluations per run, counted over all its chains "
             f"(one chain of B iterations, or 4 chains of B / 4; reSGLD 2 of B / 2); methods "
             f"{', '.join(protocol.methods)}; each tuned on seeds "
             f"{', '.join(map(str, protocol.tuning_seeds))} and evaluated on {len(protocol.seeds)} fresh seeds "
             f"({min(protocol.seeds)}-{max(protocol.seeds)}); {timing}. Command: `make accuracy-multimodal` "
             "(`make accuracy-multimodal-report` rewrites this file from the CSVs beside it). Full-batch gradients; "
             "SGLD's noise sqrt(2 h); SGHMC at momentum 0.9 with lr = h (1 - 0.9) (in the high-friction limit SGLD at "
             "step h); the cyclical methods: cSG-MCMC's Eq. (1) from alpha_0, cycle length C, exploration (the first "
             "share beta of each cycle) without noise, draws from the sampling stages; constant steps: 10 % burn-in. "
             "Every run of a seed starts at the same points (uniform on a box around the modes; the grids: the paper's "
             "U(-10, 10)^2"
             + ("; the network: the end points of a shared burn-in from its box"
                if protocol.network_burnin > 0 and "network" in set(tables["runs"].target) else "")
             + ") and sees the same noise.", "",
             "## Where the cycles pay", "", *reading.bullets(contour_report.family(found, "cycles"), summary, tables),
             *_robust_bullet(contour_report.family(moved, "cycles") if moved is not None else None), "",
             "![verdicts over barrier height and budget](accuracy_multimodal.png)", "",
             *contour_report.still_lines(summary, found),
             *contour_report.design_lines(protocol, tables, found, summary, moved),
             *_target_lines(tables, summary), *_verdict_lines(found),
             *(_sensitivity_lines(contour_report.family(moved, "cycles"), ": the cycles")
               + _sensitivity_lines(contour_report.family(moved, "ICSGLD"), ": the ICSGLD paper's samplers")
               if moved is not None else []), *_per_target_lines(summary, tables),
             *_tuning_lines(protocol, tables), *network_lines(references, protocol),
             *burnin_lines(tables.get("burnin")), *arrival_lines(first),
             "![mode-weight error against budget, with the ceilings](accuracy_multimodal_curves.png)", ""]
    return "\n".join(lines)


def write(result: study.Study, out: Path, references: Path) -> Path:
    """Every file of the report into ``out`` (after the edge check)."""
    tuning.check_edges(result.tables["chosen"])
    out.mkdir(parents=True, exist_ok=True)
    runs = result.tables["runs"]
    summary = summarise(runs)
    found = contour_report.mark_still(verdicts.verdicts(verdicts.at_rank(runs, 1)), summary, runs)
    moved = verdicts.sensitivity(runs)
    for key, name in FILES.items():
        table = result.tables[key]
        if key == "targets":
            table = table.assign(study_seconds=result.seconds, study_load=result.load)
        write_text(out / name, table.to_csv(index=False))
    for key, name in OPTIONAL.items():
        if result.tables.get(key) is not None and not result.tables[key].empty:
            write_text(out / name, result.tables[key].to_csv(index=False))
    write_text(out / "accuracy_multimodal.csv", summary.to_csv(index=False))
    write_text(out / "accuracy_multimodal_verdicts.csv", found.to_csv(index=False))
    if "verdict_2" in moved.columns:
        write_text(out / "accuracy_multimodal_sensitivity.csv", moved.to_csv(index=False))
    names = labels(result.tables["barriers"])
    first = summary[summary["rank"] == 1] if "rank" in summary.columns else summary
    figures.phase_diagram(contour_report.family(found, "cycles"), names, out / "accuracy_multimodal.png")
    icsgld = contour_report.family(found, "ICSGLD")
    if not icsgld.empty:
        figures.phase_diagram(icsgld, names, out / "accuracy_multimodal_icsgld.png")
    figures.curves(first, names, out / "accuracy_multimodal_curves.png")
    write_text(out / "accuracy_multimodal.md", markdown(result, found, summary, references, moved))
    return out / "accuracy_multimodal.md"


def load(out: Path, protocol: study.Protocol) -> study.Study:
    """The study of a previous run from its CSVs in ``out`` (``--report-only``)."""
    tables = {key: pd.read_csv(out / name) for key, name in FILES.items()}
    tables.update({key: pd.read_csv(out / name) for key, name in OPTIONAL.items() if (out / name).exists()})
    ranked = "rank" in tables["runs"].columns     # a study before the one-standard-error rule has no ranks
    tables["chosen"] = tuning.choose(tables["tuning"], protocol.grids, one_se=ranked)
    facts = tables["targets"]
    seconds = float(facts.study_seconds.iloc[0]) if "study_seconds" in facts else math.nan
    load = float(facts.study_load.iloc[0]) if "study_load" in facts else math.nan
    runs = tables["runs"]
    measured = runs[runs.method != "exact"]
    protocol = replace(protocol, seeds=tuple(sorted(int(s) for s in set(measured.seed))),
                       budgets=tuple(sorted(int(b) for b in set(measured.budget))),
                       methods=tuple(m for m in protocol.methods if m in set(measured.method)),
                       targets=tuple(t for t in SPECS if t in set(measured.target)),
                       ranks=int(measured["rank"].max()) if ranked else 1,
                       network_burnin=protocol.network_burnin if "burnin" in tables else 0)
    return study.Study(protocol, tables, seconds, load)
