"""Every agent of the bandit config over its seeds, and the regret table and figure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from csg.atomic import atomic_write_text
from csg.bandit.agents import AgentSpec, Setting
from csg.bandit.mushroom import load_mushrooms
from csg.bandit.run import run_agent
from csg.bandit.settings import settings_rows
from csg.errors import ConfigError
from csg.experiments.aggregate import mean_and_stderr


@dataclass
class Results:
    curves: pd.DataFrame   # cumulative regret per agent, seed and step
    traces: pd.DataFrame   # the contour agents, one row per step (csg.bandit.agents.Agent._record)
    thetas: pd.DataFrame   # the contour agents' theta every THETA_EVERY steps
    source: str            # the data's


def agent_specs(cfg: DictConfig, names: list[str] | None = None) -> list[AgentSpec]:
    agents = OmegaConf.to_container(cfg.agents, resolve=True)
    unknown = sorted(set(names or []) - set(agents))
    if unknown:
        raise ConfigError("agents", ",".join(unknown), f"names among {', '.join(agents)}")
    return [AgentSpec(name=name, **settings) for name, settings in agents.items() if names is None or name in names]


def load_results(out: Path, cfg: DictConfig) -> Results:
    """The results a previous run wrote into ``out`` (``make icsgld-bandit-report``); a run that did not
    record its data's source names the one ``cfg.data`` finds now."""
    out = Path(out)
    if not (out / "bandit.csv").exists():
        raise ConfigError("--out", str(out), "a directory holding a previous run's bandit.csv")
    frames = [pd.read_csv(out / name) if (out / name).exists() else pd.DataFrame()
              for name in ("bandit.csv", "bandit_trace.csv", "bandit_theta.csv")]
    final = pd.read_csv(out / "bandit_final.csv")
    if "data" in final:
        return Results(*frames, str(final.data.iloc[0]))
    return Results(*frames, load_mushrooms(cfg.data.root, bool(cfg.data.download), str(cfg.data.source)).source)


def setting_of(cfg: DictConfig, steps: int) -> Setting:
    partition = OmegaConf.to_container(cfg.contour, resolve=True)
    if not isinstance(partition.get("lag", False), bool):
        raise ConfigError("contour.lag", partition["lag"], "true (the authors' previous-iteration J) or false")
    first = partition.get("first", 0)
    if not isinstance(first, int) or not 0 <= first <= int(partition["partitions"]) - 2:
        raise ConfigError("contour.first", first, f"a whole number from 0 to contour.partitions - 2 "
                          f"({int(partition['partitions']) - 2})")
    return Setting(capacity=int(cfg.capacity), batch_size=int(cfg.batch_size), hidden=int(cfg.hidden),
                   weight_decay=float(cfg.weight_decay), partition=partition,
                   warm_steps=int(float(partition["warm"]) * steps))


def run_all(cfg: DictConfig, scale: str, names: list[str] | None = None) -> Results:
    """Every agent over its seeds: curves, the contour agents' traces and thetas, and the data's source."""
    specs = agent_specs(cfg, names)  # bad names fail before anything runs
    data = load_mushrooms(cfg.data.root, bool(cfg.data.download), str(cfg.data.source))
    steps, seeds = (cfg.smoke.steps, cfg.smoke.seeds) if scale == "smoke" else (cfg.steps, cfg.seeds)
    setting = setting_of(cfg, int(steps))
    runs = [run_agent(spec, data, setting, steps=int(steps), contexts_per_step=int(cfg.contexts_per_step),
                      initial=int(cfg.initial), seed=int(seed))
            for spec in specs for seed in seeds]
    curves, traces, thetas = (pd.concat([f for f in frames if len(f)] or [pd.DataFrame()], ignore_index=True)
                              for frames in zip(*runs))
    curves["scale"] = scale
    return Results(curves, traces, thetas, data.source)


def combine(previous: Results, new: Results) -> Results:
    """``previous`` with ``new``'s runs added (more seeds of some agents); a run in both, same agent and seed,
    is ``new``'s. Refused across data sources or scales: their regrets are not comparable."""
    if previous.source != new.source or set(previous.curves.scale) != set(new.curves.scale):
        raise ConfigError("extend", True, f"runs of the same data and scale as the previous ones ({previous.source}, "
                          f"{', '.join(sorted(set(previous.curves.scale)))})")
    redone = set(zip(new.curves.agent, new.curves.seed))

    def merged(old: pd.DataFrame, added: pd.DataFrame) -> pd.DataFrame:
        if old.empty or added.empty:
            return added if old.empty else old
        kept = old[[pair not in redone for pair in zip(old.agent, old.seed)]]
        return pd.concat([kept, added], ignore_index=True)

    return Results(merged(previous.curves, new.curves), merged(previous.traces, new.traces),
                   merged(previous.thetas, new.thetas), new.source)


def final_regret(curves: pd.DataFrame) -> pd.DataFrame:
    """Per agent: mean, standard error and number of seeds of the cumulative regret at the last step."""
    last = curves[curves.step == curves.step.max()]
    table = mean_and_stderr(last, ["agent"], "cumulative_regret").rename(columns={"n": "seeds"})
    return table.astype({"seeds": int})[["agent", "mean", "seeds", "stderr"]]


def paired_differences(curves: pd.DataFrame) -> list[str]:
    """Markdown rows of final-regret differences between the sampling agents, paired by seed, and the same
    difference half-way."""
    end = int(curves.step.max())
    last, half = (curves[curves.step == step].pivot(index="seed", columns="agent", values="cumulative_regret")
                  for step in (end, end // 2))
    pairs = [("pICSGLD", "pSGLD"), ("pICSGLD", "pCSGLD"), ("pCSGLD", "pSGLD")]
    rows = []
    for first, second in pairs:
        if first in last and second in last and len(last[[first, second]].dropna()) > 1:
            d, h = ((frame[first] - frame[second]).dropna() for frame in (last, half))
            rows.append(f"| {first} - {second} | {', '.join(f'{v:+.0f}' for v in d)} | {d.mean():+.0f} +- "
                        f"{d.std() / math.sqrt(len(d)):.0f} | {h.mean():+.0f} +- {h.std() / math.sqrt(len(h)):.0f} |")
    return rows


def reading(curves: pd.DataFrame, traces: pd.DataFrame, cfg: DictConfig) -> list[str]:
    """What the curves and traces say about pICSGLD against pSGLD, in numbers: how long the two play the
    same mushrooms, where pICSGLD stands half-way and at the end, what each adds in the second half, and how
    often a pICSGLD chain climbs in energy (multiplier < 0) then."""
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
    more = added.get("pICSGLD", 0.0) - added.get("pSGLD", 0.0)
    close = 0.05 * max(abs(added.get("pSGLD", 0.0)), 1.0)  # within 5% of pSGLD's: about as much
    compare = "more" if more > close else "less" if more < -close else "about as much"
    last = (f"- In {climbing:.0%} of pICSGLD's steps after step {end // 2}, at least one of the step's chain updates "
            "has a negative multiplier")
    if climbing > 0:
        last += (": it moves up the energy, away from a fit of the buffer's rewards. That is the flattening ICSGLD "
                 "uses to leave a mode; here, where each action is the greedy one under the chains' fits, it goes "
                 f"with pICSGLD adding {compare} regret {'as' if compare == 'about as much' else 'than'} pSGLD over the "
                 "second half.")
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
    lines = [f"| agent | iterations with U < {top:g} (all steps / last 500) | median U, last 500 steps | steps with a "
             "multiplier other than 1 | multiplier min, max | final theta: largest, top partition | largest share of "
             "an importance weight | steps with a multiplier < 0, second half | seeds |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    last_step = traces.step.max()
    for agent, block in traces.groupby("agent", sort=False):
        late = block[block.step > last_step - 500]
        moved = ((block.multiplier_min < 1 - 1e-12) | (block.multiplier_max > 1 + 1e-12)).groupby(block.seed).sum()
        final = block[block.step == last_step]
        lines.append(f"| {agent} | {block.flattened_fraction.mean():.4f} / {late.flattened_fraction.mean():.4f} | "
                     f"{late.energy_median.median():.0f} | {moved.mean():.0f} of {last_step + 1} | "
                     f"{block.multiplier_min.min():.3g}, {block.multiplier_max.max():.3g} | {final.theta_max.mean():.3g}, "
                     f"{final.theta_top.mean():.3g} | {block.weight_max_share.max():.3g} | "
                     f"{(block[block.step > last_step // 2].multiplier_min < 0).mean():.0%} | {block.seed.nunique()} |")
    return lines


def _plot_traces(traces: pd.DataFrame, thetas: pd.DataFrame, cfg: DictConfig, path: Path, scale: str) -> None:
    from csg.synthetic.plots import save_png_pdf

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
    from csg.synthetic.plots import save_png_pdf

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = {name: i for i, name in enumerate(cfg.agents)}
    out = Path(out)
    curves = results.curves.sort_values("agent", key=lambda a: a.map(order), kind="stable")
    table = final_regret(curves)
    table["rank"] = table["mean"].rank(method="min").astype(int)
    steps = int(curves.step.max())
    seeds = sorted(curves.seed.unique())
    atomic_write_text(out / "bandit.csv", curves.to_csv(index=False))
    atomic_write_text(out / "bandit_final.csv", table.assign(data=results.source).to_csv(index=False))
    lines = [f"# ICSGLD paper, Mushroom contextual bandit: cumulative regret ({scale.upper()} SCALE)", "",
             f"Measured {date.today()}: {steps} steps of 20 mushrooms after 1024 random plays, seeds "
             f"{', '.join(map(str, seeds))}; data: {results.source}. Regret in expectation (5 per edible mushroom "
             "left, 15 per poisonous one eaten). The paper shows the curves only (its Figure 4); it publishes no "
             "numbers to set beside these, so its ranking (1 = lowest regret) stands beside ours. Command: "
             f"`make icsgld-bandit{' SCALE=smoke' if scale == 'smoke' else ''}`.", "",
             "| agent | cumulative regret (mean +- s.e.) | our rank | paper's Figure 4 rank | seeds |",
             "|---|---:|---:|---:|---:|"]
    per_agent = curves.groupby("agent", sort=False).seed.unique()
    if len({tuple(sorted(v)) for v in per_agent}) > 1:  # some agents were given more seeds (extend=true)
        groups: dict[tuple, list[str]] = {}
        for agent, agent_seeds in per_agent.items():
            groups.setdefault(tuple(sorted(agent_seeds)), []).append(agent)
        lines[-2:-2] = ["Seeds differ between agents: " + "; ".join(
            f"{', '.join(agents)}: seeds {', '.join(map(str, key))}" for key, agents in groups.items()) +
            ". The extra seeds were added to a previous run with `python scripts/reproduce.py icsgld-bandit --seeds "
            "<seeds> agents=<agents> extend=true`; the paired differences below use every seed both agents have.", ""]
    for row in table.itertuples():
        error = f" +- {row.stderr:.0f}" if not math.isnan(row.stderr) else ""
        lines.append(f"| {row.agent} | {row.mean:.0f}{error} | {row.rank} | {PAPER_RANK.get(row.agent, '-')} | "
                     f"{row.seeds} |")
    sampling = [name for name in ("pICSGLD", "pCSGLD", "pSGLD") if name in set(table.agent)]
    if len(sampling) > 1:
        order = table.set_index("agent")["mean"][sampling].sort_values().index
        lines += ["", f"The paper's order of the sampling agents, lowest regret first: {', '.join(sampling)}; ours: "
                  f"{', '.join(order)}."]
    paired = paired_differences(curves)
    if paired:
        lines += ["", "Paired by seed (every agent of a seed meets the same mushrooms and coin flips): the difference of "
                  "final regrets, mean +- s.e. over seeds (negative: the first agent's regret is lower).", "",
                  f"| difference | per seed | mean +- s.e. | at step {steps // 2}, mean +- s.e. |", "|---|---|---:|---:|"] + paired
    if len(results.traces):
        atomic_write_text(out / "bandit_trace.csv", results.traces.to_csv(index=False, float_format="%.9g"))
        atomic_write_text(out / "bandit_theta.csv", results.thetas.to_csv(index=False, float_format="%.9g"))
        _plot_traces(results.traces, results.thetas, cfg, out / "bandit_trace", scale)
        lines += ["", "## What the contour agents do", "",
                  "Traces of every step (bandit_trace.csv, theta every 100 steps in bandit_theta.csv; figure "
                  "bandit_trace.png):", ""] + trace_summary(results.traces, cfg) + reading(curves, results.traces, cfg)
    lines += ["", "## Settings", ""] + settings_rows(cfg, results.source)
    atomic_write_text(out / "bandit.md", "\n".join(lines) + "\n")
    figure, axis = plt.subplots(figsize=(6, 4))
    for agent, block in curves.groupby("agent", sort=False):
        mean = block.groupby("step").cumulative_regret.mean()
        axis.plot(mean.index, mean.values, label=agent)
    axis.set(xlabel="step (20 mushrooms each)", ylabel="cumulative regret", title=f"Mushroom bandit ({scale})")
    axis.legend()
    save_png_pdf(figure, out / "bandit")
    plt.close(figure)
    return out / "bandit.md"
