"""Every agent of the bandit config over its seeds, and the regret table and figure."""

from __future__ import annotations

import math
from datetime import date
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from csg.atomic import atomic_write_text
from csg.bandit.agents import AgentSpec
from csg.bandit.mushroom import load_mushrooms
from csg.bandit.run import run_agent
from csg.errors import ConfigError
from csg.experiments.aggregate import mean_and_stderr


def agent_specs(cfg: DictConfig, names: list[str] | None = None) -> list[AgentSpec]:
    agents = OmegaConf.to_container(cfg.agents, resolve=True)
    unknown = sorted(set(names or []) - set(agents))
    if unknown:
        raise ConfigError("--agents", ",".join(unknown), f"names among {', '.join(agents)}")
    return [AgentSpec(name=name, **settings) for name, settings in agents.items() if names is None or name in names]


def run_all(cfg: DictConfig, scale: str, names: list[str] | None = None) -> tuple[pd.DataFrame, str]:
    """(curves of every agent and seed, the data's source)."""
    specs = agent_specs(cfg, names)  # bad names fail before anything runs
    data = load_mushrooms(cfg.data.root, bool(cfg.data.download), str(cfg.data.source))
    steps, seeds = (cfg.smoke.steps, cfg.smoke.seeds) if scale == "smoke" else (cfg.steps, cfg.seeds)
    partition = OmegaConf.to_container(cfg.contour, resolve=True)
    frames = [run_agent(spec, data, steps=int(steps), contexts_per_step=int(cfg.contexts_per_step),
                        initial=int(cfg.initial), capacity=int(cfg.capacity), batch_size=int(cfg.batch_size),
                        hidden=int(cfg.hidden), partition=partition, seed=int(seed))
              for spec in specs for seed in seeds]
    curves = pd.concat(frames, ignore_index=True)
    curves["scale"] = scale
    return curves, data.source


def final_regret(curves: pd.DataFrame) -> pd.DataFrame:
    """Per agent: mean, standard error and number of seeds of the cumulative regret at the last step."""
    last = curves[curves.step == curves.step.max()]
    table = mean_and_stderr(last, ["agent"], "cumulative_regret").rename(columns={"n": "seeds"})
    return table.astype({"seeds": int})[["agent", "mean", "seeds", "stderr"]]


def report(curves: pd.DataFrame, out: Path, scale: str, source: str) -> Path:
    from csg.synthetic.plots import save_png_pdf

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    table = final_regret(curves)
    steps = int(curves.step.max())
    seeds = sorted(curves.seed.unique())
    atomic_write_text(out / "bandit.csv", curves.to_csv(index=False))
    atomic_write_text(out / "bandit_final.csv", table.to_csv(index=False))
    lines = [f"# ICSGLD paper, Mushroom contextual bandit: cumulative regret ({scale.upper()} SCALE)", "",
             f"Measured {date.today()}: {steps} steps of 20 mushrooms after 1024 random plays, seeds "
             f"{', '.join(map(str, seeds))}; data: {source}. Regret in expectation (5 per edible mushroom left, "
             "15 per poisonous one eaten). The paper shows the curves only (its Figure 4: pICSGLD lowest, then "
             "pCSGLD and pSGLD, the variational and greedy agents highest); it publishes no numbers to set beside "
             f"these. Command: `make icsgld-bandit{' SCALE=smoke' if scale == 'smoke' else ''}`.", "",
             "| agent | cumulative regret (mean +- s.e.) | seeds |", "|---|---:|---:|"]
    for row in table.itertuples():
        error = f" +- {row.stderr:.0f}" if not math.isnan(row.stderr) else ""
        lines.append(f"| {row.agent} | {row.mean:.0f}{error} | {row.seeds} |")
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
