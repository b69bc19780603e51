"""make uci-regression (studies/uci): its runs, the deep ensemble's mixture, the table with the published numbers
beside ours, and the verdicts, on a budget cut to seconds (issue 60)."""

from __future__ import annotations

import pandas as pd
import pytest

from studies.uci import report as uci_report
from studies.uci import study


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(study.EPOCHS["smoke"], "yacht", 4)
    monkeypatch.setitem(study.SPLITS["smoke"], "yacht", 2)
    monkeypatch.setattr(study, "ENSEMBLE_SEEDS", (0, 1))
    monkeypatch.setattr(uci_report, "ENSEMBLE_SEEDS", (0, 1))


def test_the_benchmark_runs_every_method_and_reports_beside_the_published_numbers(tiny, tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    study.run_all(runs, "smoke", ("yacht",))
    frame = uci_report.collect(runs)
    assert sorted(frame.method.unique()) == sorted(study.METHODS) and set(frame.split) == {0, 1}
    ensemble, sgd = (frame[frame.method == m].set_index("split") for m in ("ensemble", "sgd"))
    assert (ensemble.gradient_evaluations == 2 * sgd.gradient_evaluations).all()  # its budget counted in full
    written = uci_report.report(frame, out, "smoke", "make uci-regression SCALE=smoke")
    text = written.read_text()
    assert "| yacht | 2 |" in text and "1.02 ± 0.05" in text  # PBP's yacht RMSE beside ours
    assert "| energy | no offline copy |" in text and "| boston | not run |" in text
    assert "paired by split" in text and "| yacht | cSGHMC | SGHMC |" in text
    assert "| yacht | cSGHMC | cSGHMC, T = 0 |" in text  # the noise-off control of the same cycles
    control = (runs / "yacht" / "split00" / "csghmc_t0" / ".hydra" / "config.yaml").read_text()
    assert "temperature: 0" in control and "cycles: 4" in control
    assert pd.read_csv(out / "runs.csv").shape[0] == len(frame)
    again = uci_report.rewrite(out)  # --report-only: the same report from runs.csv
    assert again.read_text() == text


def test_published_numbers_are_read_as_printed():
    numbers = uci_report.published()
    boston = numbers[(numbers.method == "PBP") & (numbers.set == "boston")]
    assert set(boston.metric) == {"rmse", "log_likelihood"}
    assert list(boston[boston.metric == "log_likelihood"]["mean"]) == ["-2.57"]
    ensembles = numbers[(numbers.method == "Deep ensembles (5)") & (numbers.metric == "log_likelihood")]
    assert ensembles.set_index("set").loc["naval", "mean"] == "5.63"  # its table's NLL -5.63, negated
