"""Do cycles pay on multimodal posteriors (issue 36): targets, metrics, budgets, the study and the reference check."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from csg.studies.accuracy.multimodal import chains, metrics, study
from csg.studies.accuracy.multimodal.reference import ReferenceRejected, check
from csg.studies.accuracy.multimodal.targets import StepNetwork, create
from tests.conftest import ROOT

REFERENCES = ROOT / "results" / "csgmcmc" / "reference"


# --- the targets --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mixture2d", "mixture10d"])
def test_exact_draws_give_the_exact_mode_weights_and_variances(name):
    target = create(name)
    draws = target.sample(20_000, torch.Generator().manual_seed(0))
    prepared = study.Prepared(name, target, None, None, target.weights.numpy(), np.ones(target.dim), 1.0, [], None, 0.0)
    estimate = study.mode_weights(prepared, draws.numpy(), np.ones(len(draws)))
    assert metrics.mode_weight_error(estimate, target.weights.numpy()) < 0.01  # E[r_k(x)] = w_k
    assert len(set(target.weights.tolist())) == 5 and len(set(target.variances.tolist())) == 5  # unequal
    nearest = target.component(draws)  # the modes are well apart: each draw near its own component
    for k in range(5):
        mine = draws[nearest == k]
        assert mine.var(0).mean().item() == pytest.approx(target.variances[k].item(), rel=0.1)
    one_mode = target.means[2] + 0.01 * torch.randn(500, target.dim, generator=torch.Generator().manual_seed(1))
    estimate = study.mode_weights(prepared, one_mode.numpy(), np.ones(500))
    assert metrics.mode_weight_error(estimate, target.weights.numpy()) == pytest.approx(1 - target.weights[2].item(), abs=1e-4)


def test_the_network_is_the_numpyro_model_and_its_gradient_is_right():
    from numpyro.infer.util import potential_energy

    from csg.studies.accuracy.reference import require_numpyro

    require_numpyro()
    import jax.numpy as jnp

    target = StepNetwork()
    theta = torch.randn(2, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    constant = sum(0.5 * math.log(2 * math.pi * s**2) for s in target.prior_sd) + len(target.y) * 0.5 * math.log(
        2 * math.pi * target.noise**2)
    for row in theta:
        u = float(potential_energy(target.numpyro_model(), (), {}, {"theta": jnp.asarray(row.numpy())}))
        assert u == pytest.approx(target.energy(row).item() + constant, rel=1e-9)
    numeric = torch.func.jacrev(lambda t: target.energy(t).sum())(theta)
    assert torch.allclose(target.grad(theta), numeric)


# --- the metrics --------------------------------------------------------------------------------------------------


def test_mode_weight_error_mmd_w2_and_predictive_tv_on_known_cases():
    assert metrics.mode_weight_error([1, 0], [0.5, 0.5]) == pytest.approx(0.5)
    assert metrics.mode_weight_error([2, 6], [0.25, 0.75]) == pytest.approx(0.0)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(400, 2)), rng.normal(size=(400, 2))
    bandwidth = metrics.median_bandwidth(y)
    same, shifted = metrics.mmd(x, y, bandwidth), metrics.mmd(x + 2.0, y, bandwidth)
    assert same < 0.07 < 0.5 < shifted
    # weights are counts: a weight of 2 is the same as the point twice
    twice = metrics.mmd(np.concatenate([x[:50], x[:50]]), y, bandwidth)
    assert metrics.mmd(x[:50], y, bandwidth, x_weights=np.full(50, 2.0)) != pytest.approx(twice)  # unbiased within
    assert metrics.mmd(x[:50], y, bandwidth, x_weights=np.full(50, 2.0)) == pytest.approx(metrics.mmd(x[:50], y, bandwidth))
    # W2 of a sample and its translate by c is |c|, whatever the assignment of the subsample
    points = rng.normal(size=(200, 3))
    assert metrics.w2(points + [3.0, 4.0, 0.0], points, 200, rng) == pytest.approx(5.0)
    # resampling by weights: all the weight on one point is that point
    weights = np.zeros(200)
    weights[7] = 1.0
    assert metrics.w2(points, points[7:8].repeat(200, 0), 100, rng, x_weights=weights) == pytest.approx(0.0)
    fits = rng.normal(size=(300, 5))
    assert metrics.predictive_tv(fits, fits, 0.3) == pytest.approx(0.0, abs=1e-12)
    assert metrics.predictive_tv(fits, fits + 10.0, 0.3) == pytest.approx(1.0, abs=1e-3)


# --- budgets and the study ----------------------------------------------------------------------------------------


def test_every_method_spends_the_same_gradient_budget():
    for budget in (1600, 20_000):
        assert {chains.gradient_evaluations(m, budget) for m in chains.METHODS} == {budget}
    assert chains.chain_steps(chains.BY_NAME["ICSGLD x4"], 20_000) == 5000
    assert chains.chain_steps(chains.BY_NAME["cSGLD"], 20_000) == 20_000
    for cyclical, baseline in chains.PAIRS:
        assert chains.BY_NAME[cyclical].cyclical and not chains.BY_NAME[baseline].cyclical
        assert chains.BY_NAME[cyclical].chains == chains.BY_NAME[baseline].chains


def test_a_tiny_study_writes_its_columns_curves_and_verdicts(tmp_path):
    from csg.studies.accuracy.multimodal import report

    protocol = chains.Protocol(budget=800, factors=(1 / 3,), checkpoints=(0.5, 1.0))
    result = study.run_study(REFERENCES, ("mixture2d",), seeds=(0, 1), protocol=protocol, log=lambda line: None)
    runs = result.runs
    assert {"target", "method", "step", "seed", "budget_share", "gradient_evaluations", "draws", *study.METRICS} <= set(runs)
    assert set(runs.method) == {m.name for m in chains.METHODS} | {"exact"}
    final = runs[runs.budget_share == 1.0]
    assert (final[final.method != "exact"].gradient_evaluations == 800).all()
    draws = final.groupby("method").draws.mean()
    # one draw per 20 gradients after the 10% burn-in, however many chains share the budget
    assert draws["SGLD"] == draws["SGLD x4"] == draws["SGHMC x4"] == draws["CSGLD"] == draws["ICSGLD x4"] == 36
    assert draws["reSGLD x4"] == 36 / 4 and draws["cSGLD"] < draws["SGLD"]  # the T = 1 replica; sampling stages
    assert final.mode_error.notna().all() and final.predictive_tv.isna().all()
    assert (runs[runs.budget_share == 0.5].draws <= final.draws.values).all()
    verdicts = study.verdicts(runs)
    assert len(verdicts) == 4 * 3 and set(verdicts.verdict) <= {"helps", "hurts", "equivalent", "inconclusive"}
    assert (verdicts.margin == study.MARGIN * verdicts.baseline_excess).all()  # the exact row is there for all three
    path = report.write(result, tmp_path, REFERENCES)
    text = path.read_text()
    assert "## Verdicts" in text and "| mixture2d | mode-weight error | cSGLD | SGLD |" in text
    assert "## Which method is best?" in text and "one Holm family" in text
    written = pd.read_csv(tmp_path / "accuracy_multimodal_verdicts.csv")
    assert set(written.family) == {"cycles", "best"} and (written.family == "cycles").sum() == 12
    for name in ("accuracy_multimodal.csv", "accuracy_multimodal_runs.csv", "accuracy_multimodal.png"):
        assert (tmp_path / name).exists()
    again = study.run_study(REFERENCES, ("mixture2d",), seeds=(0, 1), protocol=protocol, log=lambda line: None).runs
    assert np.allclose(again.mode_error, runs.mode_error, equal_nan=True)  # seeded: the same numbers


def _runs(values: dict[str, np.ndarray]) -> pd.DataFrame:
    """A study's runs at the full budget, one step per method: ``values[method][seed]`` of the mode-weight error."""
    rows = [{"target": "t", "method": method, "step": math.nan if method == "exact" else 0.1, "seed": seed,
             "budget_share": 1.0, "gradient_evaluations": 800, "draws": 36, "finite": True, "mode_error": value,
             "mmd": math.nan, "w2": math.nan, "predictive_tv": math.nan}
            for method, per_seed in values.items() for seed, value in enumerate(per_seed)]
    return pd.DataFrame(rows)


def test_the_verdicts_come_from_one_holm_family_with_a_margin_from_the_exact_row():
    rng = np.random.default_rng(3)
    base = 0.2 + 0.02 * rng.standard_normal(8)
    values = {"exact": np.full(8, 0.02) + 0.001 * rng.standard_normal(8),  # room above exact: about 0.18
              "SGLD": base, "cSGLD": base + 0.1 + 0.005 * rng.standard_normal(8),     # clearly worse
              "SGHMC": base, "cSGHMC": base + 0.02 + 0.2 * rng.standard_normal(8),    # noisy
              "SGLD x4": base, "cSGLD x4": base + 0.001 * rng.standard_normal(8)}      # tight, inside +-0.045
    runs = _runs(values)
    verdicts = study.verdicts(runs).set_index("method")
    assert list(verdicts.index) == ["cSGLD", "cSGHMC", "cSGLD x4"]  # the pairs both of whose methods ran
    assert verdicts.verdict.to_dict() == {"cSGLD": "hurts", "cSGHMC": "inconclusive", "cSGLD x4": "equivalent"}
    excess = base.mean() - values["exact"].mean()
    assert verdicts.margin["cSGLD x4"] == pytest.approx(0.25 * excess)
    assert verdicts.detectable_share["cSGHMC"] == pytest.approx(verdicts.detectable["cSGHMC"] / excess)
    assert verdicts.detectable_share["cSGHMC"] > 1 > verdicts.detectable_share["cSGLD"]
    assert verdicts.p_holm["cSGLD"] == pytest.approx(3 * verdicts.p_value["cSGLD"])  # one family of three
    # the same pair alone in a family: tested at 5 % instead of 5 % / 3, a narrower interval
    alone = study.verdicts(_runs({k: values[k] for k in ("exact", "SGHMC", "cSGHMC")})).iloc[0]
    assert alone.high - alone.low < verdicts.high["cSGHMC"] - verdicts.low["cSGHMC"]
    # without an exact row there is no margin: the tight pair is no longer equivalent
    bare = study.verdicts(_runs({k: v for k, v in values.items() if k != "exact"})).set_index("method")
    assert bare.margin.isna().all() and bare.verdict["cSGLD x4"] == "inconclusive"


def test_best_is_said_only_where_the_leader_helps_against_every_other():
    from csg.studies.accuracy.multimodal import report

    rng = np.random.default_rng(4)
    base = 0.3 + 0.02 * rng.standard_normal(6)
    values = {"exact": np.full(6, 0.02), "SGLD": base, "SGHMC": base + 0.01 + 0.2 * rng.standard_normal(6),
              "reSGLD x4": base - 0.2 + 0.002 * rng.standard_normal(6)}
    leaders = study.leaders(_runs(values))
    assert set(leaders.method) == {"reSGLD x4"} and set(leaders.baseline) == {"SGLD", "SGHMC"}
    text = "\n".join(report._leader_lines(leaders))
    assert "not separated from 1 of the 2 others (SGHMC)" in text and "lower than SGLD" in text and "**best**" not in text
    values["SGHMC"] = base + 0.05 + 0.002 * rng.standard_normal(6)
    text = "\n".join(report._leader_lines(study.leaders(_runs(values))))
    assert "lowest mean reSGLD x4" in text and "**best**, it helps against all 2 others" in text


# --- the network's reference check --------------------------------------------------------------------------------


def _summary(**changes):
    summary = {"nuts": {"rhat_max": 1.003, "ess_bulk_min": 2000.0, "ess_tail_min": 1800.0},
               "weights": [0.5, 0.3, 0.2], "weights_se": [0.01, 0.01, 0.01],
               "tempering": {"rhat_max": 1.004, "ess_bulk_min": 900.0, "ess_tail_min": 950.0,
                             "weights": [0.49, 0.31, 0.2], "weights_se": [0.01, 0.01, 0.01], "predictive_tv": 0.01}}
    for key, value in changes.items():
        part, _, field = key.partition("__")
        summary[part][field] = value
    return summary


def test_a_reference_that_fails_a_check_is_refused_in_one_line():
    check(_summary())
    for bad, words in ((_summary(nuts__rhat_max=1.2), "NUTS chains disagree (R-hat 1.200"),
                       (_summary(tempering__ess_bulk_min=50.0), "parallel tempering runs disagree"),
                       (_summary(tempering__rhat_max=1.2), "allowed < 1.1"),
                       (_summary(tempering__weights=[0.3, 0.5, 0.2]), "mode 0's weight 0.500 (NUTS) against 0.300"),
                       (_summary(tempering__predictive_tv=0.05), "predictive TV between NUTS and tempering 0.050")):
        with pytest.raises(ReferenceRejected) as error:
            check(bad)
        assert "\n" not in str(error.value) and words in str(error.value) and "nothing was written" in str(error.value)
