"""make part-sampling at smoke scale: the SGD model, its last layer and adapters sampled from its weights, the whole
network sampled; the table with its verdicts (studies/part/)."""

from __future__ import annotations

import numpy as np
import pytest

from csg.errors import CommandRefused
from studies.part import study
from studies.part.report import collect, report


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_smoke_study_runs_every_method_from_the_sgd_weights_and_reports_them(tmp_path):
    runs = study.run_all(tmp_path / "runs", [0], "smoke")
    assert sorted(runs) == sorted((method, 0) for method in study.METHODS)
    frame = collect(runs)
    by_method = frame.set_index("method")
    assert by_method.loc["sgd", "members"] == 1 and by_method.loc["sgd", "mutual_information"] == 0.0
    assert (by_method.loc[["last_layer", "adapters", "full"], "members"] == 2).all()
    assert (by_method.loc[["last_layer", "full"], "mutual_information"] > 0).all()
    # a part run stores its samples at the cost of the part: far less than the whole network's two samples
    assert by_method.loc["last_layer", "sample_bytes"] < 0.6 * by_method.loc["full", "sample_bytes"]
    # the exact reference's problem: the trunk's features and the members' heads give the run's own ensemble
    from studies.part.reference import head_problem, predictive

    problem = head_problem(runs["last_layer", 0], runs["sgd", 0])
    probs = predictive(problem.members, problem.test_x, problem.classes).mean(axis=0)
    nll = -np.log(probs[np.arange(len(problem.test_y)), problem.test_y]).mean()
    assert problem.members.shape == (2, 2010) and problem.temperature == 0.2
    assert nll == pytest.approx(by_method.loc["last_layer", "nll"], rel=1e-5)
    written = report(frame, tmp_path / "out", "smoke", "make part-sampling SCALE=smoke").read_text()
    assert "| cSGHMC last layer, rest frozen | " in written and written.count("(n = 1, no interval): inconclusive") == 8
    assert (tmp_path / "out" / "part_sampling.csv").is_file()


def test_every_command_of_the_study_is_checked_before_the_first_runs(tmp_path, monkeypatch):
    monkeypatch.setitem(study.EPOCHS["smoke"], "adapters", 0)  # the third method's command is refused
    with pytest.raises(CommandRefused, match="trainer.epochs"):
        study.run_all(tmp_path / "runs", [0], "smoke")
    assert not (tmp_path / "runs").exists()  # nothing ran, not even the SGD model
