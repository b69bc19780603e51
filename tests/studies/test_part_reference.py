"""The part-sampling study's exact reference of a last layer (NUTS on the frozen trunk's features), its timing
accounting (a part run costs its SGD pretraining too) and its report written again from the CSVs alone."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from studies.part import reference
from studies.part.report import MARKDOWN, report, rewrite, with_cost


def _problem(features: int = 1, classes: int = 2, n: int = 30, temperature: float = 0.5, seed: int = 0,
             members: np.ndarray | None = None) -> reference.HeadProblem:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features))
    y = (x[:, 0] + 0.7 * rng.standard_normal(n) > 0).astype(np.int64) if classes == 2 else rng.integers(0, classes, n)
    dimension = classes * (features + 1)
    return reference.HeadProblem(train_x=x, train_y=y, test_x=x[:10], test_y=y[:10], num_data=n, weight_decay=0.05,
                                 temperature=temperature, classes=classes, start=np.zeros(dimension),
                                 members=np.zeros((4, dimension)) if members is None else members)


def _numpy_potential(problem: reference.HeadProblem, theta: np.ndarray) -> float:
    probs = reference.predictive(theta, problem.train_x, problem.classes)[0]
    nll = -np.log(probs[np.arange(len(problem.train_y)), problem.train_y]).sum()
    return (nll + 0.5 * problem.num_data * problem.weight_decay * theta @ theta) / problem.temperature


def test_the_closed_form_hessian_is_the_potentials():
    problem = _problem(features=2, classes=3, seed=1)
    theta = np.random.default_rng(2).standard_normal(problem.dimension) * 0.5
    step, eye = 1e-4, np.eye(problem.dimension)
    numeric = np.array([[(_numpy_potential(problem, theta + step * (eye[i] + eye[j]))
                          - _numpy_potential(problem, theta + step * (eye[i] - eye[j]))
                          - _numpy_potential(problem, theta - step * (eye[i] - eye[j]))
                          + _numpy_potential(problem, theta - step * (eye[i] + eye[j]))) / (4 * step**2)
                         for j in range(problem.dimension)] for i in range(problem.dimension)])
    np.testing.assert_allclose(reference.hessian(problem, theta), numeric, rtol=1e-4, atol=1e-3)


def test_the_nuts_reference_of_a_tiny_head_matches_quadrature_and_tells_collapsed_members():
    """A two-class head on one feature: the likelihood depends on the differences (w2 - w1, b2 - b1) alone, whose
    posterior a grid integrates exactly; the sums follow their prior. NUTS must agree within Monte Carlo error. Then
    :func:`compare`: members drawn from the posterior sit near the exact yardstick; members stuck at one point
    spread far less than the posterior (sd ratio near 0) and carry no mutual information."""
    pytest.importorskip("numpyro")
    problem = _problem()
    budget = replace(reference.PART_NUTS, chains=4, warmup=150, samples=300)
    draws, facts = reference.reference_draws(problem, budget)
    assert facts["rhat_max"] < 1.01 and facts["ess_bulk_min"] >= 400 and facts["divergences"] == 0
    flat = draws.reshape(-1, 4)  # w1, w2, b1, b2
    dw, db, sw = flat[:, 1] - flat[:, 0], flat[:, 3] - flat[:, 2], flat[:, 0] + flat[:, 1]
    prior_var = problem.temperature / (problem.num_data * problem.weight_decay)  # of each weight, tempered
    grid = np.linspace(-8, 8, 801)
    a, b = np.meshgrid(grid, grid, indexing="ij")
    z = a[..., None] * problem.train_x[:, 0] + b[..., None]
    log_lik = np.where(problem.train_y == 1, -np.logaddexp(0, -z), -np.logaddexp(0, z)).sum(-1)
    log_post = log_lik / problem.temperature - (a**2 + b**2) / (2 * 2 * prior_var)
    weight = np.exp(log_post - log_post.max())
    weight /= weight.sum()
    for sample, values in ((dw, a), (db, b)):
        mean = (weight * values).sum()
        sd = math.sqrt((weight * (values - mean) ** 2).sum())
        assert abs(sample.mean() - mean) < 4 * sd / math.sqrt(facts["ess_bulk_min"])
        assert abs(sample.std() / sd - 1) < 0.15
    assert abs(sw.std() / math.sqrt(2 * prior_var) - 1) < 0.15  # the sums: their prior alone

    def members(heads):
        return reference.HeadProblem(**{**problem.__dict__, "members": heads})

    good = reference.compare(members(flat[::100][:12]), draws)
    stuck = flat.mean(0) + 1e-4 * np.random.default_rng(0).standard_normal((12, 4))
    bad = reference.compare(members(stuck), draws)
    assert good["members"] == bad["members"] == 12
    assert good["logsd_csg"] < 2 * good["logsd_exact"] + 0.3 and good["zmean_csg"] < 2 * good["zmean_exact"] + 0.2
    assert bad["sd_ratio_csg"] < 0.01 and bad["logsd_csg"] > 5 and bad["mi_csg"] < 1e-6 < good["mi_csg"]


def _frame(seeds=range(3)) -> pd.DataFrame:
    rows = []
    for seed in seeds:
        for method, own, members in (("sgd", 20.0 + seed, 1), ("last_layer", 4.0, 12), ("adapters", 7.0, 12),
                                     ("full", 40.0, 12)):
            rows.append({"method": method, "seed": seed, "test_error_pct": 6.0 - (method == "full") + 0.1 * seed,
                         "nll": 0.26 - 0.05 * (method == "full") + 0.001 * seed, "ece": 0.03,
                         "mutual_information": 0.0 if method == "sgd" else 0.01, "members": members, "train_s": own,
                         "sample_bytes": 1000, "epochs": 100})
    return pd.DataFrame(rows)


def test_a_part_run_costs_its_pretraining_too():
    frame = with_cost(_frame()).set_index(["method", "seed"])
    assert frame.loc[("last_layer", 2), "pretrain_s"] == 22.0 and frame.loc[("last_layer", 2), "cost_s"] == 26.0
    assert frame.loc[("adapters", 0), "cost_s"] == 27.0
    assert frame.loc[("full", 1), "cost_s"] == 40.0 and frame.loc[("sgd", 1), "pretrain_s"] == 0.0
    missing = with_cost(_frame()[lambda f: ~((f.method == "sgd") & (f.seed == 1))]).set_index(["method", "seed"])
    assert math.isnan(missing.loc[("last_layer", 1), "cost_s"])  # no pretraining measured: no cost, never 4 s


def _references(seeds=range(3)) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"seed": s, "temperature": 0.2, "weights": 2010, "members": 12, "reference_draws": 800,
                          "tv_csg": 0.01 + 0.001 * rng.random(), "tv_exact": 0.002, "tv_start": 0.012,
                          "mi_csg": 0.001, "mi_exact": 0.004, "mi_reference": 0.0045, "mi_logerr_csg": 1.5,
                          "mi_logerr_exact": 0.1, "zmean_csg": 1.0, "zmean_exact": 0.23, "logsd_csg": 2.0,
                          "logsd_exact": 0.1, "sd_ratio_csg": 0.15, "error_reference_pct": 6.0, "nll_reference": 0.25,
                          "nuts_chains": 4, "nuts_warmup": 100, "nuts_samples": 200, "nuts_seconds": 100.0,
                          "divergences": 0, "gradient_evaluations": 10, "map_converged": True, "rhat_max": 1.005,
                          "ess_bulk_min": 500.0, "ess_tail_min": 450.0} for s in seeds])


def test_the_report_counts_the_pretraining_and_is_written_again_from_its_csvs(tmp_path):
    written = report(_frame(), tmp_path, "full", "make part-sampling", _references()).read_text()
    # last layer: its cost in epochs (100 of SGD, 100 of its own, against 100), and per seed (20 + s + 4) / 40
    assert "it is 100 of SGD pretraining and 100 of its own" in written and "against the whole network's 100" in written
    assert "0.60x to 0.65x the whole network's per seed" in written
    assert "The exact reference" in written and "T = 0.2" in written and "margin 0.001" in written
    assert "11 comparisons" not in written  # two families: 8 against the baselines, 3 against the reference
    assert "The last layer against its exact conditional posterior: 3 comparisons" in written
    # the weights' mean error and the TV against exact draws have no verdict (a point near the mode beats any 12
    # exact draws on both)
    assert "mean error in posterior sd: csg" not in written and "Seeds checked: 0, 1, 2" in written
    assert "TV to the exact posterior's: csg's members against as many exact draws" not in written
    (tmp_path / MARKDOWN).unlink()
    assert rewrite(tmp_path).read_text() == written
