"""Every agent of the bandit config over its seeds (:func:`run_all`), or the runs a previous call wrote
(:func:`load_results`): the regret curves, the contour agents' traces and thetas. The report:
:mod:`studies.bandit.report`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from csg.errors import ConfigError
from studies.bandit.agents import AgentSpec, Setting
from studies.bandit.mushroom import load_mushrooms
from studies.bandit.run import run_agent
from studies.experiments.aggregate import mean_and_stderr


@dataclass
class Results:
    curves: pd.DataFrame   # cumulative regret per agent, seed and step
    traces: pd.DataFrame   # the contour agents, one row per step (studies.bandit.agents.Agent._record)
    thetas: pd.DataFrame   # the contour agents' theta every THETA_EVERY steps
    source: str            # the data's
    measured: str | None = None  # the date of the runs (None: not recorded); a new run's is today


def agent_specs(cfg: DictConfig, names: list[str] | None = None) -> list[AgentSpec]:
    agents = OmegaConf.to_container(cfg.agents, resolve=True)
    unknown = sorted(set(names or []) - set(agents))
    if unknown:
        raise ConfigError("agents", ",".join(unknown), f"names among {', '.join(agents)}")
    return [AgentSpec(name=name, **settings) for name, settings in agents.items() if names is None or name in names]


def load_results(out: Path, cfg: DictConfig) -> Results:
    """The results a previous run wrote into ``out`` (``make icsgld-bandit-report``); a run that did not
    record its data's source names the one ``cfg.data`` finds now, and one that did not record its date in
    bandit_final.csv keeps the date its bandit.md states."""
    out = Path(out)
    if not (out / "bandit.csv").exists():
        raise ConfigError("--out", str(out), "a directory holding a previous run's bandit.csv")
    frames = [pd.read_csv(out / name) if (out / name).exists() else pd.DataFrame()
              for name in ("bandit.csv", "bandit_trace.csv", "bandit_theta.csv")]
    final = pd.read_csv(out / "bandit_final.csv")
    measured = str(final.measured.iloc[0]) if "measured" in final and final.measured.notna().any() else None
    if measured is None and (out / "bandit.md").exists():  # a run written before the CSV kept its date
        found = re.search(r"^Measured (\d{4}-\d{2}-\d{2}[^:]*):", (out / "bandit.md").read_text(), re.MULTILINE)
        measured = found.group(1) if found else None
    if "data" in final:
        return Results(*frames, str(final.data.iloc[0]), measured)
    return Results(*frames, load_mushrooms(cfg.data.root, bool(cfg.data.download), str(cfg.data.source)).source,
                   measured)


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
    return Results(curves, traces, thetas, data.source, str(date.today()))


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

    dates = sorted({d for d in (previous.measured, new.measured) if d})
    return Results(merged(previous.curves, new.curves), merged(previous.traces, new.traces),
                   merged(previous.thetas, new.thetas), new.source, " and ".join(dates) or None)


def final_regret(curves: pd.DataFrame) -> pd.DataFrame:
    """Per agent: mean, standard error and number of seeds of the cumulative regret at the last step."""
    last = curves[curves.step == curves.step.max()]
    table = mean_and_stderr(last, ["agent"], "cumulative_regret").rename(columns={"n": "seeds"})
    return table.astype({"seeds": int})[["agent", "mean", "seeds", "stderr"]]
