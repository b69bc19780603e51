"""The online loop of the Mushroom bandit and its cumulative-regret curves."""

from __future__ import annotations

import logging
import time

import pandas as pd
import torch

from studies.bandit.agents import Agent, AgentSpec, Setting
from studies.bandit.mushroom import Mushrooms, expected_regret, rewards

log = logging.getLogger(__name__)


def run_agent(spec: AgentSpec, data: Mushrooms, setting: Setting, *, steps: int, contexts_per_step: int, initial: int,
              seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """One agent for ``steps`` steps: ``initial`` random plays fill the buffer, then every step it acts on
    ``contexts_per_step`` mushrooms drawn with replacement, stores them (the buffer keeps the last
    ``setting.capacity``) and trains. Returns the cumulative expected regret after every step and, for the
    contour agents (empty for the others), their trace (one row per step; step 0 is the training after the
    initial plays) and theta every ``THETA_EVERY`` steps."""
    stream = torch.Generator().manual_seed(seed)  # the same mushrooms and coin flips for every agent
    agent = Agent(spec, data.contexts.shape[1], setting, seed=seed + 17)

    def draw(n: int):
        index = torch.randint(0, len(data.poisonous), (n,), generator=stream)
        return data.contexts[index], data.poisonous[index], rewards(data.poisonous[index], stream)

    x, _, r = draw(initial)
    a = torch.randint(0, 2, (initial,), generator=stream)
    buffer = [x, a, r.gather(1, a[:, None]).squeeze(1)]
    agent.train(*buffer)
    rows, total, started = [], 0.0, time.perf_counter()
    for step in range(steps):
        x, poisonous, r = draw(contexts_per_step)
        actions = agent.act(x)
        total += float(expected_regret(poisonous, actions).sum())
        buffer = [torch.cat([old, new])[-setting.capacity:] for old, new in
                  zip(buffer, (x, actions, r.gather(1, actions[:, None]).squeeze(1)))]
        agent.train(*buffer)
        rows.append({"agent": spec.name, "seed": seed, "step": step + 1, "cumulative_regret": total})
    log.info("%s seed %d: cumulative regret %.0f after %d steps (%.1f s)", spec.name, seed, total, steps,
             time.perf_counter() - started)
    trace = pd.DataFrame(agent.trace).assign(agent=spec.name, seed=seed)
    return pd.DataFrame(rows), trace, pd.DataFrame(agent.thetas).assign(agent=spec.name, seed=seed)
