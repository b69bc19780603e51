"""Regression through csg-train, csg.train and csg.Posterior: a user's real-valued data, the Gaussian likelihoods
and a user's own, every kind of sampler, and the one-line refusals (issue 60)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hydra import compose, initialize_config_dir

from csg.errors import ConfigError
from tests.conftest import ROOT

CONFIGS = ROOT / "configs"
REGRESSION = ["data=custom", "data._target_=tests.own_components.sine", "data.standardize_targets=true",
              "data.batch_size=32", "data.eval_batch_size=80", "model=mlp", "model.hidden=[32]", "data.recipe.lr0=0.1",
              "likelihood=gaussian_precision", "trainer.epochs=24", "sampler.cycles=2", "sampler.samples_per_cycle=2",
              "logger=none", "trainer.progress=false", "trainer.device=cpu"]


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _run(tmp_path, *overrides: str, name: str = "run"):
    from csg.launch.run import run

    run_dir = tmp_path / name
    own_model = any(o.startswith("model=") for o in overrides)  # then without the MLP's keys
    base = [o for o in REGRESSION if not (own_model and o.startswith("model"))]
    return run(_cfg(*base, *overrides), run_dir), run_dir


def _states(run_dir, chain=""):
    folder = run_dir / "samples" / chain
    return [torch.load(p, weights_only=True)["state_dict"] for p in sorted(folder.glob("*.pt"))]


class _CountedLikelihoods:
    """``csg.likelihoods.create_likelihood``, counting the likelihoods it builds."""

    def __init__(self, create):
        self.create, self.built = create, 0

    def __call__(self, *args, **kwargs):
        self.built += 1
        return self.create(*args, **kwargs)


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory):
    """A regression run by csg.train (csg-train's run, in this process): its metrics and run directory; how many
    likelihoods the whole command built (its checks, its chain, its loop and its evaluation) is in the metrics'
    ``likelihoods_built``."""
    import csg
    import csg.likelihoods

    with pytest.MonkeyPatch.context() as patch:
        counted = _CountedLikelihoods(csg.likelihoods.create_likelihood)
        patch.setattr(csg.likelihoods, "create_likelihood", counted)
        posterior = csg.train([*REGRESSION, f"hydra.run.dir={tmp_path_factory.mktemp('regression') / 'run'}"])
    return {**posterior.metrics, "likelihoods_built": counted.built}, posterior.run_dir


def test_a_run_builds_its_likelihood_once(regression_run):
    # csg.train: the run (its checks, chain, loop and evaluation) builds one; Posterior.load of its directory, one
    assert regression_run[0]["likelihoods_built"] == 2


def test_a_users_regression_trains_and_its_posterior_predicts_in_the_original_units(regression_run):
    from csg import Posterior
    from csg.posterior import RegressionPosterior
    from tests.own_components import sine

    metrics, run_dir = regression_run
    _, test = sine()
    x, y = test.tensors
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert saved["task"] == "regression" and abs(saved["target_scale"]["shift"][0] - 10) < 2
    ensemble = metrics["ensemble"]
    assert ensemble["num_samples"] == 4
    assert ensemble["rmse"] < 0.6 * float(y.std())  # in the targets' units (5 x the standardised ones)
    assert 0.7 < ensemble["coverage_95"] <= 1.0 and math.isfinite(ensemble["log_likelihood"])
    precisions = [float(state["likelihood_log_precision"].exp()) for state in _states(run_dir)]
    assert len(set(precisions)) == 4 and all(p > 1.5 for p in precisions)  # sampled, and above the prior's mean 1

    posterior = Posterior.load(run_dir, trust_code=True)
    assert isinstance(posterior, RegressionPosterior)
    evaluated = posterior.evaluate()
    assert all(math.isclose(evaluated[key], ensemble[key], rel_tol=1e-9, abs_tol=1e-12) for key in ensemble)
    mine = posterior.evaluate([(x[:40], y[:40]), (x[40:], y[40:])])  # the user's loader, targets in their units
    assert math.isclose(mine["rmse"], ensemble["rmse"], rel_tol=1e-5)
    prediction = posterior.predict(x)
    assert prediction.mean.shape == (80, 1)
    assert torch.allclose(prediction.variance, prediction.aleatoric + prediction.epistemic)
    assert bool((prediction.epistemic > 0).all())
    assert math.isclose(float((prediction.mean[:, 0] - y.double()).square().mean().sqrt()), ensemble["rmse"],
                        rel_tol=1e-5)
    low, high = prediction.interval(0.9)
    assert bool(((low < prediction.mean) & (prediction.mean < high)).all())
    means, variances = posterior.predict_members(x)
    assert means.shape == (4, 80, 1) and torch.allclose(means.mean(0), prediction.mean)
    with pytest.raises(ConfigError, match="level=1.5 is not allowed"):
        prediction.interval(1.5)
    # issue 74: the run's own test loader serves standardised targets; evaluated as the user's, RMSE was 5x off
    own = posterior.evaluate(posterior.data.test)
    assert math.isclose(own["rmse"], ensemble["rmse"], rel_tol=1e-9)
    # a wrong target width: one line naming the argument, not a traceback
    with pytest.raises(ConfigError, match=r"y='targets of shape \(80, 2\)' is not allowed: \(80, 1\)"):
        prediction.log_prob(torch.zeros(80, 2))
    assert prediction.log_prob(y).shape == (80,)  # (batch,) for one column
    with pytest.raises(ConfigError, match=r"loader='targets of shape \(80, 3\)' is not allowed: \(80, 1\)"):
        posterior.evaluate([(x, torch.zeros(80, 3))])
    with pytest.raises(ConfigError, match="a target row per input; batch 0 has 80 inputs and targets of shape"):
        posterior.evaluate([(x, torch.zeros(79))])


def test_csg_train_run_and_from_states_give_the_same_posterior(regression_run, tmp_path):
    import csg
    from csg.likelihoods import GaussianPrecision
    from csg.data.splits import TargetScale
    from csg.models import create_model

    metrics, run_dir = regression_run
    direct, _ = _run(tmp_path)  # csg-train's run function, as train.py calls it
    assert direct["ensemble"] == metrics["ensemble"]  # the same run, bit for bit
    saved = json.loads((run_dir / "metrics.json").read_text())
    scale = TargetScale(tuple(saved["target_scale"]["shift"]), tuple(saved["target_scale"]["scale"]))
    own = csg.Posterior.from_states(lambda: create_model("mlp", num_classes=1, input_shape=(2,), hidden=[32]),
                                    _states(run_dir), input_shape=(2,), likelihood=GaussianPrecision(),
                                    target_scale=scale)
    from tests.own_components import sine

    x = sine()[1].tensors[0]
    posterior = csg.Posterior.load(run_dir, trust_code=True)
    assert torch.allclose(own.predict(x).mean, posterior.predict(x).mean, atol=1e-9)
    path = own.save(tmp_path / "own.safetensors")
    again = csg.Posterior.load(path, model=lambda: create_model("mlp", num_classes=1, input_shape=(2,), hidden=[32]))
    assert torch.allclose(again.predict(x).variance, own.predict(x).variance)


@pytest.mark.parametrize("overrides", [
    ["sampler=sgld"], ["sampler=csgld", "likelihood=heteroscedastic"], ["sampler=contour_sghmc"],
    ["sampler=contour_sghmc", "sampler.samples_per_cycle=4", "sampler.energy.refresh_every_epochs=1"],
    ["sampler.params=[3.*,likelihood_*]", "sampler.rest=sgd"],
    ["likelihood=custom", "likelihood._target_=tests.own_components.StudentT", "+likelihood.dof=5"],
    ["model=custom", "model._target_=tests.own_components.tiny_net", "+model.hidden=16",
     "likelihood=heteroscedastic"],
], ids=["sgld", "csgld-heteroscedastic", "contour", "contour-control-variate", "part", "own-likelihood",
        "own-model"])
def test_every_kind_of_sampler_samples_a_regression(tmp_path, overrides):
    metrics, _ = _run(tmp_path, *overrides)
    assert metrics["ensemble"]["rmse"] < 4.0 and math.isfinite(metrics["ensemble"]["log_likelihood"])


def test_stacked_chains_step_the_precision_as_chains_one_after_another(tmp_path, monkeypatch):
    import csg.launch.run
    import csg.likelihoods

    counted = _CountedLikelihoods(csg.likelihoods.create_likelihood)
    monkeypatch.setattr(csg.likelihoods, "create_likelihood", counted)
    read = _CountedLikelihoods(csg.launch.run.run_settings)  # the typed settings: read once per run, as the likelihood
    monkeypatch.setattr(csg.launch.run, "run_settings", read)
    chains = ["sampler.chains=2", "trainer.epochs=8", "sampler.samples_per_cycle=1"]
    _, alone = _run(tmp_path, *chains, name="alone")
    assert counted.built == 1  # two chains, their loops and the evaluation share the run's likelihood
    assert read.built == 1  # and the run's settings
    _, stacked = _run(tmp_path, *chains, "trainer.stack_chains=true", name="stacked")
    assert counted.built == 2
    for chain in ("chain00", "chain01"):
        for first, second in zip(_states(alone, chain), _states(stacked, chain), strict=True):
            assert torch.allclose(first["likelihood_log_precision"], second["likelihood_log_precision"], atol=1e-5)
            assert torch.allclose(first["1.weight"], second["1.weight"], atol=1e-4)


def test_items_read_one_by_one_give_the_tensors_run(tmp_path):
    short = ["trainer.epochs=8", "sampler.samples_per_cycle=1"]
    _, tensors = _run(tmp_path, *short, name="tensors")
    _, items = _run(tmp_path, *short, "data._target_=tests.own_components.sine_items", name="items")
    for first, second in zip(_states(tensors), _states(items), strict=True):
        assert all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize("flaw, fragment", [
    ("nan_target", "finite regression targets within float32's range (|y| < 3.4e38); train[5] has NaN, inf or a "
                   "value beyond it"),
    ("huge_target", "train[3] has NaN, inf or a value beyond it"),  # issue 74: refused only after training began
    ("int_target", "regression targets: one real number (or a 1-D float tensor) per item; the train set's targets "
                   "are int64 of shape (160,) for 160 items"),
    ("widths", "train and test targets of one width: train's have 1 columns, test's 2"),
    ("ragged_items", "Datasets whose targets all have one width: the train set has [1, 2] columns"),
])
def test_regression_data_a_model_cannot_use_is_refused_in_one_line(flaw, fragment):
    from csg.data import build_data

    with pytest.raises(ConfigError) as refused:
        build_data("custom", batch_size=10, _target_="tests.own_components.flawed_regression", flaw=flaw,
                   task="regression")
    assert str(refused.value).startswith("data._target_=") and fragment in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("overrides, fragment", [
    (["data._target_=tests.own_components.blobs"], "regression targets: one real number"),
    (["likelihood=categorical"], "float32 (real-valued targets: a regression likelihood, likelihood=gaussian"),
    (["likelihood.shape=-2"], "likelihood.shape=-2 is not allowed: a finite number > 0"),
    (["likelihood=custom", "likelihood._target_=tests.own_components.blobs"], "a csg.likelihoods.Likelihood"),
    # issue 74: found before training, not after it (or never)
    (["likelihood=custom", "likelihood._target_=tests.own_components.SummingNll"],
     "likelihood._target_='SummingNll()' is not allowed: a likelihood whose nll gives one value per example, shape "
     "(batch,): on a batch of 3 it gave ()"),
    (["likelihood=custom", "likelihood._target_=tests.own_components.NoPredictive"],
     "likelihood._target_='NoPredictive()' is not allowed: a likelihood with a predictive(output, params)"),
    (["likelihood=custom", "likelihood._target_=tests.own_components.NanNll"],
     "likelihood._target_='NanNll()' is not allowed: a likelihood whose nll is finite at zero outputs"),
    (["likelihood=custom", "likelihood._target_=tests.own_components.InfinitePrior"],
     "likelihood._target_='InfinitePrior()' is not allowed: a likelihood whose prior_energy is finite"),
])
def test_a_likelihood_that_does_not_fit_the_data_is_refused_in_one_line(tmp_path, overrides, fragment):
    from csg.launch.run import run

    with pytest.raises(ConfigError) as refused:
        run(_cfg(*REGRESSION, *overrides), tmp_path / "run")
    assert fragment in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert not (tmp_path / "run").exists()


def test_a_regression_likelihood_on_labelled_classes_is_refused():
    from csg.engine.limits import check_task
    from csg.engine.settings import run_settings

    cfg = run_settings(_cfg("likelihood=gaussian"))
    with pytest.raises(ConfigError, match="likelihood.name='gaussian' is not allowed: a classification likelihood "
                                          "for data.name=mnist5k, whose targets are class labels"):
        check_task(cfg, "regression", "classification")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["32", "bf16-mixed"])
def test_a_regression_trains_on_the_gpu_captured_and_its_posterior_predicts_there(tmp_path, precision):
    """The sampled precision on the device: the captured CUDA-graph step (SGHMC, trainer.compile=auto) and mixed
    precision, and the posterior's mixture from the device's outputs."""
    import csg

    posterior = csg.train([*REGRESSION[:-1], "trainer.device=cuda", f"trainer.precision={precision}",
                           f"hydra.run.dir={tmp_path / 'run'}"])
    assert posterior.metrics["device"] == "cuda:0"
    ensemble = posterior.metrics["ensemble"]
    assert math.isfinite(ensemble["log_likelihood"]) and ensemble["rmse"] < 4.0
    states = _states(posterior.run_dir)
    assert len({float(state["likelihood_log_precision"]) for state in states}) == len(states)
    again = csg.Posterior.load(posterior.run_dir, device="cuda", trust_code=True).evaluate()
    assert math.isclose(again["rmse"], ensemble["rmse"], rel_tol=1e-4)


def test_a_preempted_regression_resumes_bit_for_bit(tmp_path):
    """SIGTERM inside training, then the same command: the uninterrupted run's samples (the precision too)."""
    from csg.errors import Preempted

    short = ["trainer.epochs=8", "sampler.samples_per_cycle=1", "trainer.checkpoint.every_n_epochs=1"]
    full, full_dir = _run(tmp_path, *short, name="full")
    with pytest.raises(Preempted):
        _run(tmp_path, *short, "+callbacks.stop._target_=tests.own_components.SigtermAfterEpoch", name="cut")
    assert (tmp_path / "cut" / "checkpoint.pt").is_file() and len(_states(tmp_path / "cut")) < 2
    resumed, cut_dir = _run(tmp_path, *short, name="cut")
    for first, second in zip(_states(full_dir), _states(cut_dir), strict=True):
        assert all(torch.equal(first[k], second[k]) for k in first)
    assert resumed["ensemble"] == full["ensemble"]


def test_the_readmes_boston_command_gives_a_sane_ensemble_at_every_seed_of_five(tmp_path):
    """`csg-train data=boston likelihood=gaussian_precision` as the README writes it (issue 74): at seeds 0-4 the
    ensemble's test RMSE is within 1.5 x its best member's. At the former lr0 0.05, 6 of seeds 0-9 were thrown out at
    a warm restart, so any 5 of them hold at least one that failed (tests/engine/test_restart_check.py shows the stop);
    all ten were measured for issue 74, five keep the suite within its time."""
    import csg

    torch.set_num_threads(1)
    for seed in range(5):
        metrics = csg.train(["data=boston", "likelihood=gaussian_precision", f"seed={seed}", "logger=none",
                             "trainer.progress=false", "trainer.threads=1",
                             f"hydra.run.dir={tmp_path / str(seed)}"]).metrics
        best = min(sample["rmse"] for sample in metrics["per_sample"])
        assert metrics["ensemble"]["rmse"] <= 1.5 * best, (seed, metrics["ensemble"]["rmse"], best)


def test_targets_far_from_unit_scale_are_named_when_the_run_starts_and_when_it_diverges(tmp_path, caplog):
    """issue 74: a fixed-noise Gaussian on targets in their own units (sd 77) diverged with advice to lower lr0 only."""
    from csg.errors import DivergenceError

    far = ["data.standardize_targets=false", "+data.scale=400", "likelihood=gaussian", "data.recipe.lr0=2.0"]
    with caplog.at_level("WARNING"), pytest.raises(DivergenceError) as stopped:
        _run(tmp_path, *far)
    assert "the regression targets are not standardised and their standard deviation is " in str(stopped.value)
    assert "data.standardize_targets=true" in str(stopped.value) and "\n" not in str(stopped.value)
    assert any("data.standardize_targets=true" in record.getMessage() for record in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING"):
        _run(tmp_path, "data.standardize_targets=true", "+data.scale=400", name="scaled")
    assert not any("not standardised" in record.getMessage() for record in caplog.records)


def test_harmonic_cycle_weights_re_evaluate_a_regression_run(regression_run):
    """issue 74: evaluation.cycle_weights=harmonic on a regression run was a traceback (a class-label gather)."""
    from csg.posterior.evaluate import evaluate_run

    _, run_dir = regression_run
    harmonic = evaluate_run(run_dir, ["evaluation.cycle_weights=harmonic"], trust_code=True)
    weights = [s["weight"] for s in harmonic["per_sample"]]
    assert sum(weights) == pytest.approx(1.0) and (run_dir / "evaluation_harmonic.json").is_file()
    assert weights[0] == pytest.approx(weights[1]) and weights[2] == pytest.approx(weights[3])  # one weight a cycle
    assert weights[0] != pytest.approx(weights[2]) and math.isfinite(harmonic["ensemble"]["rmse"])
