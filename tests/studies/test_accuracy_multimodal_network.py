"""The network in the multimodal study: its reference is read, not recomputed; its runs have no W2."""

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from csg.errors import ConfigError
from studies.accuracy.multimodal import study


def test_the_committed_reference_is_accepted_and_complete():
    facts = json.loads(study.NETWORK_REFERENCE.read_text())
    assert facts["accepted"]
    weights, core = np.array(facts["weights"]), np.array(facts["core_exact"])
    assert len(core) == len(weights) + 1 == len(facts["modes"]["means"]) + 1
    assert abs(weights.sum() - 1) < 1e-9 and abs(core.sum() - 1) < 1e-9 and np.all(core[:-1] <= weights)
    assert max(facts["weights_se"] + facts["core_exact_se"]) <= 0.02 and facts["importance"]["difference"] <= 0.02


def test_a_reference_that_was_not_accepted_keeps_the_network_out(tmp_path):
    path = tmp_path / "network_multimodal.json"
    path.write_text(json.dumps({"accepted": False}))
    with pytest.raises(ConfigError, match="no accepted reference"):
        study.prepare_network(path)


def test_the_study_refuses_a_missing_reference_before_any_group_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(study, "NETWORK_REFERENCE", tmp_path / "absent.json")
    started = []
    monkeypatch.setattr(study, "run_group", lambda *args, **kwargs: started.append(args))
    with pytest.raises(ConfigError, match="no accepted reference"):
        study.run_study(replace(study.SMOKE, targets=("barrier4", "network")), log=lambda line: None)
    assert started == []


def test_the_network_group_scores_mode_weights_against_the_reference_and_has_no_w2(monkeypatch):
    monkeypatch.setattr(study.barriers, "barrier_table", lambda name, *rest: pd.DataFrame(
        [{"target": name, "from": 0, "to": 1, "energy_from": 0.0, "path_max": 10.0, "barrier": 10.0}]))  # the string
    # method takes 30 s; the energies set the contour methods' partitions (none of them runs here)
    protocol = replace(study.SMOKE, targets=("network",), seeds=(1000, 1001), network_budgets=(400,),
                       methods=("SGLD", "cSGLD"))
    tables = study.run_group(("network",), study.protocol_of(("network",), protocol), log=lambda line: None)
    runs = tables["runs"]
    assert set(runs.method) == {"SGLD", "cSGLD"} and set(runs.budget) == {400}     # no exact floor: no sampler
    assert runs.w2.isna().all() and runs.mode_error.between(0, 1).all()
    weights = json.loads(study.NETWORK_REFERENCE.read_text())["weights"]
    one_pick = 0.5 * sum(2 * w * (1 - w) for w in weights)                          # E|X - w| of one pick, halved
    assert math.isclose(runs[runs.cycles == 1].ceiling.iloc[0], one_pick, rel_tol=1e-9)
