"""Sampling accuracy against reference posteriors: the distances, the NUTS references, the samplers on them."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from studies.accuracy import chains, study
from studies.accuracy.reference import (ACCURACY_NUTS, ACCURACY_RECORD, TARGETS, Reference, ReferenceRejected, accept,
                                        load_data, numpyro_model)
from studies.nuts import run_nuts
from csg.evaluation import posterior_distance as distance
from tests.conftest import ROOT

REFERENCES = ROOT / "results" / "csgmcmc" / "reference"


# --- distances: exact on known inputs ---------------------------------------------------------------------------


def test_w2_of_gaussians_is_exact_on_known_cases():
    # 1-D: W2^2 = (m1 - m2)^2 + (s1 - s2)^2
    assert distance.gaussian_w2([1.0], [[4.0]], [-2.0], [[1.0]]) == pytest.approx(math.sqrt(9 + 1))
    # commuting (diagonal) covariances: the coordinates add
    assert distance.gaussian_w2([0, 0], np.diag([9.0, 1.0]), [0, 0], np.diag([1.0, 4.0])) == pytest.approx(
        math.sqrt(4 + 1))
    # a rotation of the same covariance: W2^2 = tr(S + S* - 2 (S*^1/2 S S*^1/2)^1/2), by hand for 90 degrees
    a, b = np.diag([4.0, 1.0]), np.diag([1.0, 4.0])
    assert distance.gaussian_w2([0, 0], a, [0, 0], b) == pytest.approx(math.sqrt(2 * (2 - 1) ** 2))
    rng = np.random.default_rng(0)
    m = rng.normal(size=5)
    s = np.cov(rng.normal(size=(50, 5)), rowvar=False)
    assert distance.gaussian_w2(m, s, m, s) == pytest.approx(0.0, abs=1e-6)


def test_mean_error_sd_ratio_agreement_and_total_variation():
    draws = np.array([[0.0, 10.0], [2.0, 14.0]])  # means (1, 12), sds (sqrt 2, sqrt 8)
    assert distance.standardised_mean_error(draws, np.array([0.0, 10.0]), np.array([0.5, 4.0])) == pytest.approx([2, 0.5])
    assert distance.sd_ratio(draws, np.array([math.sqrt(2), 2 * math.sqrt(8)])) == pytest.approx([1.0, 0.5])
    p = distance.two_class([0.9, 0.4, 0.5])
    q = distance.two_class([0.6, 0.6, 0.5])
    assert distance.predictive_agreement(p, q) == pytest.approx(2 / 3)  # the middle row flips
    assert distance.predictive_total_variation(p, q) == pytest.approx((0.3 + 0.2 + 0.0) / 3)


# --- the reference: NUTS ------------------------------------------------------------------------------------------


def test_nuts_recovers_a_conjugate_gaussian_posterior():
    """Bayesian linear regression with known noise: the posterior is N(A^-1 X^T y / s^2, A^-1),
    A = X^T X / s^2 + I / t^2."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.5 * rng.normal(size=30)
    noise, prior = 0.5, 2.0

    def model(x, y):
        w = numpyro.sample("w", dist.Normal(0.0, prior).expand([3]).to_event(1))
        numpyro.sample("y", dist.Normal(x @ w, noise), obs=y)

    run = run_nuts(replace(ACCURACY_NUTS, chains=2, warmup=300, samples=2000), model=model,
                   model_args=(jnp.asarray(x), jnp.asarray(y)), chain_method="vectorized")
    precision = x.T @ x / noise**2 + np.eye(3) / prior**2
    covariance = np.linalg.inv(precision)
    mean = covariance @ x.T @ y / noise**2
    w = run.draws["w"].reshape(-1, 3)
    sd = np.sqrt(np.diag(covariance))
    assert run.divergences == 0 and w.dtype == np.float64 and run.draws["w"].shape == (2, 2000, 3)
    # every draw of both chains takes at least one leapfrog step; the warm-up's are not counted unless asked for
    assert run.gradient_evaluations >= 2 * 2000 and run.warmup_gradient_evaluations is None
    assert (np.abs(w.mean(0) - mean) / sd).max() < 0.1  # 4000 draws: Monte Carlo error about sd / 50
    assert np.abs(w.std(0) / sd - 1).max() < 0.06
    assert distance.gaussian_w2(w.mean(0), np.cov(w, rowvar=False), mean, covariance) < 0.15 * sd.min()


@pytest.mark.parametrize("name", ["heart_logreg", "heart_mlp"])
def test_the_reference_model_is_the_posterior_the_samplers_target(name):
    """NumPyro's potential equals U = N * mean cross-entropy + (N wd / 2) |theta|^2 of the torch model at the
    same parameters (up to the prior's constant), with wd = 1 / (N s^2): the same likelihood and prior."""
    import jax.numpy as jnp
    from numpyro.infer.util import potential_energy

    from csg.models import create_model
    from studies.nuts import require_numpyro

    require_numpyro()  # JAX in double precision

    target = TARGETS[name]
    x, y, _ = load_data(target)
    torch.manual_seed(0)
    options = {"hidden": (target.hidden,)} if target.model == "mlp" else {}
    model = create_model(target.model, num_classes=2, input_shape=(x.shape[1],), **options).double()
    params = dict(model.named_parameters())
    for p in params.values():
        torch.nn.init.normal_(p, std=0.3)
    n, wd = len(y), target.weight_decay(len(y))
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    with torch.no_grad():
        u = float(n * torch.nn.functional.cross_entropy(model(xt), yt) + n * wd / 2 * sum((p**2).sum() for p in params.values()))
    sites = {k: jnp.asarray(v.detach().numpy()) for k, v in params.items()}  # the same names: see numpyro_model
    numpyro_u = float(potential_energy(numpyro_model(target), (jnp.asarray(x), jnp.asarray(y)), {}, sites))
    dimension = sum(p.numel() for p in params.values())
    constant = dimension * 0.5 * math.log(2 * math.pi * target.prior_variance)  # -log of the prior's normaliser
    assert numpyro_u == pytest.approx(u + constant, rel=1e-9)


def test_each_study_records_its_nuts_settings_as_its_committed_results_do():
    """The one settings class holds every study's fields; each study writes only its own, in its own order."""
    from studies.benchmark.reference import NETWORK_NUTS, NETWORK_RECORD

    written = Reference.load(REFERENCES / "heart_logreg.json").settings
    assert list(ACCURACY_NUTS.record(ACCURACY_RECORD).items()) == list(written.items())
    network = json.loads((ROOT / "results" / "benchmark" / "reference" / "reference_network.json").read_text())
    assert list(NETWORK_NUTS.record(NETWORK_RECORD).items()) == list(network["1"]["settings"].items())
    with pytest.raises(ValueError, match="^run_nuts needs one of model= and potential_fn=, got neither$"):
        run_nuts(ACCURACY_NUTS)


def test_a_reference_that_failed_its_checks_is_refused_in_one_line():
    accept("heart_logreg", {"rhat_max": 1.002, "ess_bulk_min": 900.0, "ess_tail_min": 800.0})
    with pytest.raises(ReferenceRejected) as error:
        accept("heart_mlp", {"rhat_max": 1.08, "ess_bulk_min": 35.0, "ess_tail_min": 50.0})
    message = str(error.value)
    assert "\n" not in message and "heart_mlp" in message and "R-hat 1.080" in message and "1.01" in message


# --- the samplers on the reference ---------------------------------------------------------------------------------


def test_the_table5_step_rule_recovers_the_data_configs_recipe():
    """configs/data/heart.yaml: L = 0.192 at the posterior mode, lr0 = 5.2, lr_final = 1.695, lr_constant = 2.6."""
    target = TARGETS["heart_logreg"]
    x, y, _ = load_data(target)
    from csg.models import create_model

    model = create_model("logreg", num_classes=2, input_shape=(x.shape[1],)).double()
    recipe = chains.table5_recipe(model, torch.from_numpy(x), torch.from_numpy(y), target.weight_decay(len(y)), 6000)
    assert recipe["lr0"] == pytest.approx(5.2, rel=0.02)
    assert recipe["lr_final"] == pytest.approx(1.695, rel=0.02)
    assert recipe["lr_constant"] == pytest.approx(2.6, rel=0.02)


def test_sgld_at_a_small_step_lands_on_the_logistic_regression_reference():
    """Constant-step SGLD at half Table 5's step, 2000 draws: the mean within about twice the Monte Carlo error
    of an exact sampler at this ESS (median standardised error < 0.15), the spread within 10%, W2 < 0.2 (14
    coordinates of sd 0.1 to 0.5, ESS about 80); at 7 times the step (1.75 / L, near the stability edge) the
    ESS is ten times higher but the draws are over-dispersed: the bias that ESS does not see."""
    target, reference = TARGETS["heart_logreg"], Reference.load(REFERENCES / "heart_logreg.json")
    x, y, _ = load_data(target)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    built = chains.compose("SGLD constant", target, ("trainer.epochs=2400", "trace.burnin=400", "trace.samples=2000"))
    chains.check_prior(built.config, target, len(y))
    small = chains.score(chains.run_chain(built, 0.5, 0, x, y), reference)
    assert small["mean_error_median"] < 0.15 and abs(small["sd_ratio_median"] - 1) < 0.1 and small["w2"] < 0.2
    assert small["agreement"] > 0.98 and small["tv"] < 0.02
    large = chains.score(chains.run_chain(built, 3.5, 0, x, y), reference)
    assert large["ess"] > 5 * small["ess"]
    assert large["sd_ratio_median"] > 1.2 and large["w2"] > 2 * small["w2"]


def test_a_prior_other_than_the_references_is_refused():
    from csg.errors import ConfigError

    target = TARGETS["heart_logreg"]
    built = chains.compose("SGLD", target, ("data.recipe.weight_decay=1e-3",))
    with pytest.raises(ConfigError, match="data.recipe.weight_decay"):
        chains.check_prior(built.config, target, 270)


def test_the_study_writes_both_protocols_and_its_findings(tmp_path):
    from studies.accuracy import report

    overrides = ("trainer.epochs=300", "trace.burnin=50", "trace.samples=250")
    result = study.run_study(REFERENCES, ("heart_logreg",), (0, 1), factors=(0.5, 1.0), methods=("SGLD", "cSGLD"),
                             overrides=overrides, log=lambda line: None)
    runs, summary = result.runs, result.summary
    assert len(runs) == 2 * 2 * 2 and runs.finite.all()
    assert set(summary.protocol) == {"Table 5", "tuned"} and (summary[summary.protocol == "Table 5"].factor == 1).all()
    for method, block in runs.groupby("method"):  # the tuned factor is the one with the smallest mean W2
        best = block.groupby("factor").w2.mean().idxmin()
        assert summary[(summary.method == method) & (summary.protocol == "tuned")].factor.item() == best
    report.write(result, tmp_path, REFERENCES, "smoke")
    text = (tmp_path / "accuracy.md").read_text()
    assert "## heart_logreg" in text and "lowest mean w2" in text and "w2(cSGLD) - w2(SGLD)" in text
    assert "Holm" in text and "hence no margin" in text
    assert (tmp_path / "accuracy.png").exists() and (tmp_path / "accuracy.csv").exists()
    written = __import__("pandas").read_csv(tmp_path / "accuracy_verdicts.csv")
    assert set(written.family) == {"cycles", "best"} and set(written.verdict) <= {"helps", "hurts", "inconclusive"}
    again = study.summarise(__import__("pandas").read_csv(tmp_path / "accuracy_runs.csv"))  # --report-only's path
    assert np.allclose(again.w2, summary.w2)


def _runs(w2: dict[tuple[str, float], np.ndarray]) -> "pd.DataFrame":
    """A study's runs on heart_logreg: ``w2[(method, factor)][seed]``, the other metrics constant."""
    import pandas as pd

    rows = [{"target": "heart_logreg", "method": method, "factor": factor, "seed": seed, "lr0": factor, "finite": True,
             "steps": 600, "w2": value, **{m: 1.0 for m in study.METRICS if m != "w2"}}
            for (method, factor), per_seed in w2.items() for seed, value in enumerate(per_seed)]
    return pd.DataFrame(rows)


def test_the_cycles_verdicts_are_one_holm_family_of_distinct_comparisons_without_a_margin():
    rng = np.random.default_rng(5)
    base = 0.1 + 0.01 * rng.standard_normal(6)
    noise = rng.standard_normal(6)
    noise = (noise - noise.mean()) / noise.std(ddof=1)  # mean 0, sd 1: each mean difference is its shift
    w2 = {("SGLD", 1.0): base, ("cSGLD", 1.0): base + 0.05 + 0.002 * noise,            # clearly worse
          ("SGHMC", 1.0): base, ("cSGHMC", 1.0): base + 0.01 + 0.05 * noise,           # noisy
          ("SGLD constant", 1.0): base, ("SGHMC constant", 1.0): base - 0.0001 + 0.0001 * noise[::-1]}  # tight
    runs = _runs(w2)
    summary = study.summarise(runs)
    verdicts = study.verdicts(runs, summary)
    assert list(zip(verdicts.protocol, verdicts.method)) == [("Table 5", "cSGLD"), ("Table 5", "cSGHMC"),
                                                             ("tuned", "cSGLD"), ("tuned", "cSGHMC")]
    assert list(verdicts.verdict) == ["hurts", "inconclusive"] * 2
    assert list(verdicts.same_as) == ["", "", "Table 5", "Table 5"]  # one factor: the tuned steps are Table 5's
    first = verdicts.iloc[0]
    assert first.p_holm == pytest.approx(2 * first.p_value)  # a family of the 2 distinct comparisons, not 4
    assert verdicts.margin.isna().all()  # no exact sampler's W2: no margin
    # the best method: SGHMC constant's tiny edge over SGLD constant is no verdict, and with no margin not equivalent
    leaders = study.leaders(runs, summary)
    w2_leader = leaders[(leaders.metric == "w2") & (leaders.protocol == "Table 5")].set_index("baseline")
    assert set(w2_leader.method) == {"SGHMC constant"} and len(w2_leader) == 5
    assert w2_leader.verdict["cSGLD"] == "helps" and w2_leader.verdict["SGLD constant"] == "inconclusive"
    assert set(leaders[leaders.metric == "ess_per_1000"].verdict) == {"inconclusive"}  # every ESS the same
