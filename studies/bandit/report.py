"""The bandit's report: the regret table against the paper's ranking, the comparisons with pICSGLD, the contour
agents' traces, and the figures, from the :class:`~studies.bandit.results.Results` of every agent's runs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from csg.evaluation.comparison import Paired, Verdict, compare_paired, interval_text, method_statement, tally
from csg.reporting import markdown_table, write_text
from studies.bandit.results import Results, final_regret
from studies.bandit.settings import settings_rows

FOCUS = "pICSGLD"  # the paper's method: each other agent is compared with it
# equivalence margins, absolute, in regret (15 per poisonous mushroom eaten, 5 per edible one left): the final
# regret over the 2000 steps, and the regret added in the second half
MARGINS = {"final": 100.0, "half": 25.0}
SAMPLING = ("pICSGLD", "pCSGLD", "pSGLD")  # the paper's order of the sampling agents, lowest regret first


@dataclass
class Comparison:
    """One comparison of the report's family: ``method`` - ``baseline`` of a regret, paired by seed."""

    method: str
    baseline: str
    regret: str            # "final" or "steps a-b" (the regret added in the second half)
    differences: pd.Series  # per seed, the seeds both agents have
    paired: Paired


def comparisons(curves: pd.DataFrame) -> list[Comparison]:
    """The report's family of paired comparisons, every agent of a seed meeting the same mushrooms and coin
    flips: pICSGLD against each other agent and pCSGLD against pSGLD on the final regret (the paper's order of
    the sampling agents is their three pairs), and pICSGLD against pSGLD on the regret added in the second half.
    Each with its absolute margin of :data:`MARGINS`; lower is better."""
    end = int(curves.step.max())
    last, half = (curves[curves.step == step].pivot(index="seed", columns="agent", values="cumulative_regret")
                  for step in (end, end // 2))
    agents = list(dict.fromkeys(curves.agent))
    pairs = [(FOCUS, other, "final") for other in agents if other != FOCUS and FOCUS in agents]
    pairs += [("pCSGLD", "pSGLD", "final")] if {"pCSGLD", "pSGLD"} <= set(agents) else []
    pairs += [(FOCUS, "pSGLD", f"steps {end // 2 + 1}-{end}")] if {FOCUS, "pSGLD"} <= set(agents) else []
    family = []
    for method, baseline, regret in pairs:
        frame = last if regret == "final" else last - half
        both = frame[[method, baseline]].dropna()
        if both.empty:
            continue
        family.append(Comparison(method, baseline, regret, both[method] - both[baseline],
                                 Paired(both[method].to_numpy(), both[baseline].to_numpy(),
                                        margin=MARGINS['final' if regret == 'final' else 'half'])))
    return family


def margin_reason(curves: pd.DataFrame) -> str:
    """The margin, why, and for scale how much one agent's final regret moves from seed to seed."""
    last = curves[curves.step == curves.step.max()].groupby("agent").cumulative_regret
    spread = (last.std() / last.mean())[last.count() > 1].dropna()
    reason = (f"absolute, in regret: +-{MARGINS['final']:g} on the final regret, +-{MARGINS['half']:g} on the regret "
              "added in the second half (about 7 and 2 poisonous mushrooms eaten), the smallest differences we would "
              "count as one agent beating another, the same whichever agent is the baseline")
    if "pSGLD" in spread:
        reason += (f"; for scale, pSGLD's final regret has a standard deviation of {100 * spread['pSGLD']:.1f} % of "
                   f"its mean over its {int(last.count()['pSGLD'])} seeds")
    return reason


def comparison_rows(family: list[Comparison], verdicts: list[Verdict]) -> list[str]:
    """The Markdown table of the family: per-seed differences, the simultaneous interval, margin, detectable,
    verdict."""
    rows = []
    for c, v in zip(family, verdicts):
        interval = (f"{v.difference:+.0f} {interval_text(v.low, v.high, '+.0f')}" if v.n > 1
                    else f"{v.difference:+.0f} (one seed: no interval)")
        detectable = f"{v.detectable:.0f}" if math.isfinite(v.detectable) else "-"
        rows.append([f"{c.method} - {c.baseline}", c.regret, ", ".join(f"{d:+.0f}" for d in c.differences), interval,
                     f"+-{v.margin:.0f}", detectable, v.verdict])
    return markdown_table(["method - baseline", "regret", "per seed", "difference [simultaneous 95 % interval]",
                           "margin", "detectable", "verdict"], rows, align="lllrrrl")


def detectable_range(family: list[Comparison], verdicts: list[Verdict]) -> str:
    """The sentence naming the smallest and largest of the family's detectable differences."""
    known = [(v.detectable, c) for c, v in zip(family, verdicts) if math.isfinite(v.detectable)]
    if not known:
        return ""
    (low, first), (high, last) = min(known, key=lambda k: k[0]), max(known, key=lambda k: k[0])
    return (f" The smallest difference each could detect (80 % power at the family's level): from {low:.0f} "
            f"({first.method} - {first.baseline}, {first.regret}) to {high:.0f} ({last.method} - {last.baseline}, "
            f"{last.regret}).")


def order_statement(table: pd.DataFrame, family: list[Comparison], verdicts: list[Verdict]) -> str:
    """The paper's order of the sampling agents beside what the verdicts of their pairs say, and the means'
    order, marked as no verdict (and as one seed's, where it is)."""
    sampling = [name for name in SAMPLING if name in set(table.agent)]
    means = table.set_index("agent")["mean"][sampling].sort_values()
    found, open_pairs = [], []
    for c, v in zip(family, verdicts):
        if c.regret != "final" or not {c.method, c.baseline} <= set(sampling):
            continue
        if v.verdict == "helps":
            found.append(f"{c.method} below {c.baseline}")
        elif v.verdict == "hurts":
            found.append(f"{c.baseline} below {c.method}")
        elif v.verdict == "equivalent":
            found.append(f"{c.method} level with {c.baseline}")
        else:
            open_pairs.append(f"{c.method} - {c.baseline}")
    seeds = table.set_index("agent").seeds[sampling]
    single = ", from one seed" if int(seeds.max()) < 2 else ""
    return (f"The paper's order of the sampling agents, lowest regret first: {', '.join(SAMPLING)}. Ours, by the "
            f"paired verdicts below: {'; '.join(found) if found else 'no pair resolved'}"
            + (f" ({', '.join(open_pairs)}: inconclusive)" if found and open_pairs else "")
            + f". Their means alone, lowest first{single} (an order of means, not a verdict): "
            + ", ".join(f"{name} {value:.0f}" for name, value in means.items()) + ".")


def reading(curves: pd.DataFrame, traces: pd.DataFrame, cfg: DictConfig,
            second_half: Verdict | None = None) -> list[str]:
    """What the curves and traces say about pICSGLD against pSGLD, in numbers: how long the two play the
    same mushrooms, where pICSGLD stands half-way and at the end, what each adds in the second half, and how
    often a pICSGLD chain climbs in energy (multiplier < 0) then. ``second_half``: the family's verdict on
    pICSGLD - pSGLD of the regret added in the second half, quoted where the reading sets the two side by side."""
    agents = set(curves.agent)
    if not {"pICSGLD", "pSGLD"} <= agents or traces.empty or "pICSGLD" not in set(traces.agent):
        return []
    end = int(curves.step.max())
    wide = curves.pivot_table(index=["seed", "step"], columns="agent", values="cumulative_regret")
    both = wide[["pICSGLD", "pSGLD"]].dropna()
    apart = both[both.pICSGLD != both.pSGLD].reset_index()
    same_until = int(apart.groupby("seed").step.min().min()) - 1 if len(apart) else end
    added = {a: (wide[a].xs(end, level="step") - wide[a].xs(end // 2, level="step")).mean()
             for a in ("pSGLD", "pCSGLD", "pICSGLD") if a in wide}
    d = (both.pICSGLD - both.pSGLD).groupby(level="step").mean()
    mine = traces[traces.agent == "pICSGLD"]
    moved = mine[(mine.multiplier_min < 1 - 1e-12) | (mine.multiplier_max > 1 + 1e-12)]
    late = mine[mine.step > end // 2]
    climbing = float((late.multiplier_min < 0).mean())
    warm = f"through the warm-up (the first {int(float(cfg.contour.warm) * end)} steps) theta stays uniform"
    if moved.empty:
        first = (f"- pICSGLD's multiplier never leaves 1 (its energy stays above the partitions' top): {warm}, and "
                 "after it no iteration falls in a partition, so pICSGLD is pSGLD update for update.")
    else:
        first = (f"- {warm[0].upper()}{warm[1:]}, the multiplier is 1 and pICSGLD is pSGLD update for update; its multiplier first "
                 f"leaves 1 at step {int(moved.step.min())}.")
    if same_until >= end:
        first += " The two take the same actions in every step of every seed."
    else:
        first += f" The two take the same actions until step {same_until} in every seed."
    last = (f"- In {climbing:.0%} of pICSGLD's steps after step {end // 2}, at least one of the step's chain updates "
            "has a negative multiplier")
    if climbing > 0:
        last += (": it moves up the energy, away from a fit of the buffer's rewards. That is the flattening ICSGLD "
                 "uses to leave a mode; here, where each action is the greedy one under the chains' fits, pICSGLD "
                 f"adds {added.get('pICSGLD', math.nan):.0f} regret over the second half against pSGLD's "
                 f"{added.get('pSGLD', math.nan):.0f}")
        last += (f": paired difference {second_half.describe()} (margin +-{second_half.margin:.0f}; Comparisons)."
                 if second_half is not None else ".")
    else:
        last += "."
    return ["", "## Reading the curves and traces", "", first,
            f"- pICSGLD - pSGLD, mean over seeds: {d.get(end // 2, float('nan')):+.0f} at step {end // 2}, "
            f"{d.iloc[-1]:+.0f} at step {end}; the last step at which it is negative: "
            f"{int(d[d < 0].index.max()) if (d < 0).any() else 'none'}.",
            f"- Regret added in steps {end // 2 + 1}-{end}, mean over seeds: "
            + ", ".join(f"{a} {v:.0f}" for a, v in added.items()) + ".",
            last]


PAPER_RANK = {"pICSGLD": "1", "pCSGLD": "2", "pSGLD": "3", "ConstSGD": "4-5", "Dropout": "4-5", "EpsGreedy": "6"}


def trace_summary(traces: pd.DataFrame, cfg: DictConfig) -> list[str]:
    """Per contour agent, over its seeds: where the energy sat, how often the multiplier left 1, theta at the end."""
    c = cfg.contour
    top = float(c.low) + (int(c.partitions) - 1) * float(c.width)
    rows = []
    last_step = traces.step.max()
    for agent, block in traces.groupby("agent", sort=False):
        late = block[block.step > last_step - 500]
        moved = ((block.multiplier_min < 1 - 1e-12) | (block.multiplier_max > 1 + 1e-12)).groupby(block.seed).sum()
        final = block[block.step == last_step]
        rows.append([agent, f"{block.flattened_fraction.mean():.4f} / {late.flattened_fraction.mean():.4f}",
                     f"{late.energy_median.median():.0f}", f"{moved.mean():.0f} of {last_step + 1}",
                     f"{block.multiplier_min.min():.3g}, {block.multiplier_max.max():.3g}",
                     f"{final.theta_max.mean():.3g}, {final.theta_top.mean():.3g}",
                     f"{block.weight_max_share.max():.3g}",
                     f"{(block[block.step > last_step // 2].multiplier_min < 0).mean():.0%}", block.seed.nunique()])
    return markdown_table(["agent", f"iterations with U < {top:g} (all steps / last 500)", "median U, last 500 steps",
                           "steps with a multiplier other than 1", "multiplier min, max",
                           "final theta: largest, top partition", "largest share of an importance weight",
                           "steps with a multiplier < 0, second half", "seeds"], rows, align="lrrrrrrrr")


def _plot_traces(traces: pd.DataFrame, thetas: pd.DataFrame, cfg: DictConfig, path: Path, scale: str) -> None:
    from studies.synthetic.plots import save_png_pdf

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = cfg.contour
    top = float(c.low) + (int(c.partitions) - 1) * float(c.width)
    agents = list(dict.fromkeys(traces.agent))
    figure, axes = plt.subplots(len(agents), 4, figsize=(16, 3.2 * len(agents)), squeeze=False)
    for row, agent in zip(axes, agents):
        block = traces[traces.agent == agent]
        for number, (seed, run) in enumerate(block.groupby("seed")):
            color = f"C{number}"
            row[0].plot(run.step, run.energy_median, lw=0.6, color=color, label=f"seed {seed}")
            row[1].plot(run.step, run.flattened_fraction, lw=0.6, color=color)
            row[2].plot(run.step, run.multiplier_max, lw=0.6, color=color)
            row[2].plot(run.step, run.multiplier_min, lw=0.6, color=color, ls=":")
        row[0].axhline(top, color="k", ls="--", lw=0.8, label=f"top partition from U = {top:g}")
        row[0].set(yscale="log", xlabel="step", ylabel="median energy U = N x MSE", title=agent)
        row[0].legend(fontsize=7)
        row[1].set(xlabel="step", ylabel=f"share of iterations with U < {top:g}", ylim=(-0.02, 1.02))
        row[2].set(xlabel="step", ylabel="multiplier: max (solid), min (dotted)")
        grid = thetas[(thetas.agent == agent) & (thetas.seed == thetas.seed.min())].pivot(
            index="partition", columns="step", values="theta")
        image = row[3].imshow(grid.clip(lower=1e-12).apply("log10").to_numpy(), aspect="auto", origin="lower",
                              extent=(grid.columns.min(), max(grid.columns.max(), grid.columns.min() + 1), -0.5,
                                      len(grid) - 0.5))
        figure.colorbar(image, ax=row[3], label="log10 theta")
        row[3].set(xlabel="step", ylabel="partition J", title=f"theta, seed {thetas.seed.min()}")
    figure.suptitle(f"Mushroom bandit: the contour agents ({scale})")
    figure.tight_layout()
    save_png_pdf(figure, path)
    plt.close(figure)


def report(results: Results, cfg: DictConfig, out: Path, scale: str) -> Path:
    from studies.synthetic.plots import save_png_pdf

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = {name: i for i, name in enumerate(cfg.agents)}
    out = Path(out)
    curves = results.curves.sort_values("agent", key=lambda a: a.map(order), kind="stable")
    table = final_regret(curves)
    steps = int(curves.step.max())
    seeds = sorted(curves.seed.unique())
    family = comparisons(curves)
    verdicts = compare_paired([c.paired for c in family])
    measured = f"Measured {results.measured}" if results.measured else "Measured (date not recorded)"
    write_text(out / "bandit.csv", curves.to_csv(index=False))
    write_text(out / "bandit_final.csv", table.assign(data=results.source, measured=results.measured)
                      .to_csv(index=False))
    lines = [f"# ICSGLD paper, Mushroom contextual bandit: cumulative regret ({scale.upper()} SCALE)", "",
             f"{measured}: {steps} steps of 20 mushrooms after 1024 random plays, seeds "
             f"{', '.join(map(str, seeds))}; data: {results.source}. Regret in expectation (5 per edible mushroom "
             "left, 15 per poisonous one eaten). The paper shows the curves only (its Figure 4); it publishes no "
             "numbers to set beside these, so its ranking (1 = lowest regret) stands beside our means; the paired "
             "comparisons below say which differences the seeds resolve. Command: "
             f"`make icsgld-bandit{' SCALE=smoke' if scale == 'smoke' else ''}`.", ""]
    per_agent = curves.groupby("agent", sort=False).seed.unique()
    if len({tuple(sorted(v)) for v in per_agent}) > 1:  # some agents were given more seeds (extend=true)
        groups: dict[tuple, list[str]] = {}
        for agent, agent_seeds in per_agent.items():
            groups.setdefault(tuple(sorted(agent_seeds)), []).append(agent)
        lines += ["Seeds differ between agents: " + "; ".join(
            f"{', '.join(agents)}: seeds {', '.join(map(str, key))}" for key, agents in groups.items()) +
            ". The extra seeds were added to a previous run with `python scripts/reproduce.py icsgld-bandit --seeds "
            "<seeds> agents=<agents> extend=true`; the paired comparisons below use every seed both agents have.", ""]
    rows = []
    for row in table.itertuples():
        error = f" +- {row.stderr:.0f}" if not math.isnan(row.stderr) else ""
        rows.append([row.agent, f"{row.mean:.0f}{error}", PAPER_RANK.get(row.agent, '-'), row.seeds])
    lines += markdown_table(["agent", "cumulative regret (mean +- s.e.)", "paper's Figure 4 rank", "seeds"], rows,
                            align="lrrr")
    if len([name for name in SAMPLING if name in set(table.agent)]) > 1:
        lines += ["", order_statement(table, family, verdicts)]
    if family:
        tested = [v for v in verdicts if v.n > 1]
        lines += ["", "## Comparisons", "",
                  method_statement(margin=margin_reason(curves)) + " Regret: lower is better; every agent of a seed "
                  "meets the same mushrooms and coin flips.", "",
                  *comparison_rows(family, verdicts), "",
                  f"Family: {len(tested)} comparisons with an interval, one Holm family: {tally(verdicts)}."
                  + (detectable_range(family, verdicts) if tested else " One seed: no interval, so no verdict.")]
    second_half = next((v for c, v in zip(family, verdicts) if c.regret != "final"), None)
    if len(results.traces):
        write_text(out / "bandit_trace.csv", results.traces.to_csv(index=False, float_format="%.9g"))
        write_text(out / "bandit_theta.csv", results.thetas.to_csv(index=False, float_format="%.9g"))
        _plot_traces(results.traces, results.thetas, cfg, out / "bandit_trace", scale)
        lines += ["", "## What the contour agents do", "",
                  "Traces of every step (bandit_trace.csv, theta every 100 steps in bandit_theta.csv; figure "
                  "bandit_trace.png):", ""] + trace_summary(results.traces, cfg)
        lines += reading(curves, results.traces, cfg, second_half)
    lines += ["", "## Settings", ""] + settings_rows(cfg, results.source)
    write_text(out / "bandit.md", "\n".join(lines) + "\n")
    figure, axis = plt.subplots(figsize=(6, 4))
    for agent, block in curves.groupby("agent", sort=False):
        mean = block.groupby("step").cumulative_regret.mean()
        axis.plot(mean.index, mean.values, label=agent)
    axis.set(xlabel="step (20 mushrooms each)", ylabel="cumulative regret", title=f"Mushroom bandit ({scale})")
    axis.legend()
    save_png_pdf(figure, out / "bandit")
    plt.close(figure)
    return out / "bandit.md"
