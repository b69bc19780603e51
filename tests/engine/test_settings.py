"""Typed settings read once from the composed config at the boundary (issue 75): the evaluation's, from train.py's
configs as composed and from a run's saved config; and :func:`csg.components.select`, by which the modules below
the boundary read a config without importing omegaconf."""

from __future__ import annotations

import dataclasses

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from csg.components import has_target, select
from csg.errors import ConfigError
from csg.engine.settings import (Component, ContourSettings, EvaluationSettings, PriorSettings, ReplicaSettings,
                                 SwagSettings, TraceSettings, config_fingerprint, evaluation_settings, run_settings,
                                 schedule_settings, trace_settings)
from tests.conftest import ROOT


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


DEFAULT = dict(seed=0, chains=1, replica=False, importance=False, swag=None, cycle_weights="equal", ece_bins=15,
               reference=None, ood="none", params=None, rest="frozen")


@pytest.mark.parametrize("overrides, expected", [
    ([], {}),
    (["sampler=icsghmc"], dict(chains=4, importance=True)),
    (["sampler=resghmc", "sampler.chains=2"], dict(chains=2, replica=True)),
    (["sampler=cycswag"], dict(swag=SwagSettings(draws_per_cycle=10, rank=20, scale=0.5))),
    (["seed=3", "evaluation.cycle_weights=harmonic", "evaluation.ece_bins=10", "ood=notmnist",
      "evaluation.reference=ref.npz", "sampler.params=[fc.*,head]", "sampler.rest=sgd"],
     dict(seed=3, cycle_weights="harmonic", ece_bins=10, ood="notmnist", reference="ref.npz", params=("fc.*", "head"),
          rest="sgd")),
], ids=["default", "contour", "replica", "swag", "evaluation-and-part"])
def test_the_evaluation_settings_are_the_configs_values(overrides, expected):
    settings = evaluation_settings(_compose(*overrides))
    assert settings == EvaluationSettings(**{**DEFAULT, **expected})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.chains = 2


def test_equal_contour_weights_and_swag_without_draws_are_read_as_such():
    settings = evaluation_settings(OmegaConf.create({
        "seed": 0, "evaluation": {"cycle_weights": "equal", "ece_bins": 15},
        "sampler": {"contour": {"ensemble_weights": "equal"}, "swag": {"draws_per_cycle": 0, "rank": 20, "scale": 1}}}))
    assert not settings.importance and settings.swag is None  # the samples themselves, equally weighted


def test_a_saved_config_without_the_newer_keys_gives_the_settings_an_old_run_had():
    saved = OmegaConf.create({"seed": 1, "sampler": {"name": "csgld"}, "evaluation": {"cycle_weights": "equal",
                                                                                      "ece_bins": 15}})
    assert evaluation_settings(saved) == EvaluationSettings(seed=1)


def test_select_reads_a_config_by_key_as_omegaconf_does():
    cfg = OmegaConf.create({"model": {"name": "mlp", "num_classes": None, "width": "???", "deep": {"x": 1}},
                            "alias": "${model.name}", "broken": "${nowhere}"})
    for key in ("model.name", "model.num_classes", "model.width", "model.deep.x", "model.deep.y", "model.name.z",
                "data.root", "alias"):
        assert select(cfg, key, default="d") == OmegaConf.select(cfg, key, default="d"), key
    assert select(OmegaConf.to_container(cfg), "model.deep.x") == 1  # a plain mapping too
    with pytest.raises(Exception, match="nowhere"):  # an interpolation to nothing is the config's error, as before
        select(cfg, "broken")


def test_a_user_component_is_named_by_target_in_a_config_or_a_plain_mapping():
    cfg = OmegaConf.create({"model": {"_target_": "my_project.Net", "width": 3}, "data": {"name": "mnist"},
                            "sampler": {"optimizer": {"_target_": "???"}}})
    assert has_target(cfg.model) and has_target(cfg.sampler.optimizer)  # given later (???): still a user's
    assert has_target({"_target_": "my_project.Net"}) and not has_target(cfg.data) and not has_target(None)
    assert not has_target("my_project.Net")


def test_a_checkpoint_fingerprint_is_the_resolved_config_but_logging_and_checkpointing():
    from csg.reporting import flat_keys

    cfg = _compose("trainer.progress=false", "seed=4")
    fingerprint = config_fingerprint(cfg)
    every = flat_keys(OmegaConf.to_container(cfg, resolve=True))
    assert fingerprint["seed"] == 4 and fingerprint["sampler.lr0"] == every["sampler.lr0"]  # resolved values
    assert list(fingerprint) == [k for k in every if not k.startswith(("logger.", "hydra.", "callbacks"))
                                 and k not in ("trainer.progress", "trainer.log_every_n_steps",
                                               "trainer.log_every_n_epochs", "trainer.threads")
                                 and not k.startswith("trainer.checkpoint.")]


@pytest.mark.parametrize("sampler", ["csghmc", "sgld", "sghmc_constant"])
def test_the_schedule_settings_give_the_schedule_the_config_gives(sampler):
    from csg.engine.build import build_schedule
    from csg.schedules import schedule_for

    cfg = _compose(f"sampler={sampler}", "trace.enabled=true", "trace.burnin=7")
    settings = schedule_settings(cfg)
    assert (settings.schedule, settings.lr0, settings.cycles, settings.epochs, settings.samples_per_cycle) == (
        cfg.sampler.schedule, cfg.sampler.lr0, cfg.sampler.cycles, cfg.trainer.epochs, cfg.sampler.samples_per_cycle)
    assert set(settings.options) == {k for k in ("lr_final", "gamma", "hold_sampling_lr", "lr_milestones",
                                                 "sampling_lr", "lr_factor") if k in cfg.sampler}
    total = 40 * cfg.trainer.epochs
    ours, theirs = build_schedule(settings, total), schedule_for(cfg.sampler, total)
    assert [(ours.lr(k), ours.sampling(k)) for k in range(0, total, 7)] == [
        (theirs.lr(k), theirs.sampling(k)) for k in range(0, total, 7)]
    assert trace_settings(cfg) == TraceSettings(enabled=True, burnin=7, samples=cfg.trace.samples)
    with pytest.raises(TypeError):
        settings.options["lr_final"] = 1.0  # frozen all the way down


def test_the_run_settings_are_the_configs_values_read_once_and_frozen():
    cfg = _compose("sampler=icsghmc", "sampler.chains=2", "prior.variance=0.25", "trainer.epochs=7",
                   "model.weights=w.pt", "ood=notmnist")
    settings = run_settings(cfg, fingerprint=True)
    assert settings.schedule == schedule_settings(cfg) and settings.trace == trace_settings(cfg)
    assert settings.evaluation == evaluation_settings(cfg)
    assert settings.fingerprint == config_fingerprint(cfg)
    assert settings.prior == PriorSettings(variance=0.25, decay=cfg.sampler.weight_decay)
    as_given = run_settings(_compose("sampler.params=[0,fc]", "sampler.weight_decay=100", "prior.variance=2"))
    assert as_given.sampler.params == (0, "fc") and as_given.evaluation.params == (0, "fc")  # named as given
    assert repr(as_given.prior) == "PriorSettings(variance=2, decay=100)"  # as the config holds them, for a message
    assert as_given.prior.arguments() == {"variance": 2.0, "decay": 100.0}
    sampler = settings.sampler
    assert (sampler.update_rule, sampler.lr0, sampler.temperature, sampler.momentum, sampler.chains) == (
        cfg.sampler.update_rule, cfg.sampler.lr0, cfg.sampler.temperature, cfg.sampler.momentum, 2)
    contour = cfg.sampler.contour
    assert sampler.contour == ContourSettings(
        low=contour.low, width=contour.width, partitions=contour.partitions, zeta=contour.zeta,
        sa_step=contour.sa_step, multiplier_clip=tuple(contour.multiplier_clip), difference=contour.difference,
        interacting=contour.interacting, weight_exponent=contour.weight_exponent,
        ensemble_weights=contour.ensemble_weights)
    assert sampler.replica is None and settings.adapter is None and settings.trainer.epochs == 7
    assert settings.model == Component("model", dict(OmegaConf.to_container(cfg.model, resolve=True)))
    assert (settings.model.key, settings.model.label, settings.ood.name) == ("model.name", cfg.model.name, "notmnist")
    assert settings.model.options() == {k: v for k, v in OmegaConf.to_container(cfg.model).items() if k != "name"}
    settings.model.options()["weights"] = "changed.pt"  # options are copies: the settings stay as read
    assert settings.model.values["weights"] == "w.pt" and run_settings(cfg).fingerprint == {}
    assert isinstance(settings.schedule.options.get("lr_milestones", ()), tuple)  # nested values frozen too
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.sampler = None
    with pytest.raises(TypeError):
        settings.model.values["name"] = "mlp"
    given = _compose("sampler=resghmc", "sampler.replica.swap_every=3").sampler.replica
    assert run_settings(_compose("sampler=resghmc", "sampler.replica.swap_every=3")).sampler.replica == \
        ReplicaSettings(temperatures=tuple(given.temperatures), step_sizes=tuple(given.step_sizes),
                        correction=given.correction, swap_every=3)


def test_a_users_component_stays_a_path_until_the_builder_resolves_it():
    import sys

    settings = run_settings(_compose("model=custom", "model._target_=no_such_package.nets.Net", "+model.width=8"))
    assert "no_such_package" not in sys.modules  # read, not imported: a saved run is checked before its code runs
    assert settings.model.custom and settings.model.key == "model._target_"
    assert settings.model.label == "no_such_package.nets.Net" == settings.model.target_path()
    assert settings.model.options(drop=("_target_", "name", "weights")) == {"width": 8}
    with pytest.raises(ConfigError, match="model._target_=None is not allowed: the dotted path of a callable"):
        Component("model", {"_target_": "???"}).target_path()  # a mandatory value never given
    with pytest.raises(ConfigError, match="sampler.optimizer._target_=' ' is not allowed"):
        Component("sampler.optimizer", {"_target_": " "}).target_path()


def test_a_key_no_builder_reads_need_not_resolve_where_a_saved_run_is_loaded(monkeypatch):
    """A saved run's ``${oc.env:...}`` set on the training machine (a study label, a cluster's data root) does not
    stop its settings being read elsewhere: keys are read one by one, the data's beyond its name only where the data
    are read, and the whole config only for a run's checkpoint fingerprint."""
    from omegaconf.errors import InterpolationResolutionError

    monkeypatch.delenv("CSG_TEST_UNSET", raising=False)
    cfg = _compose()
    OmegaConf.set_struct(cfg, False)
    cfg.study, cfg.data.root = "${oc.env:CSG_TEST_UNSET}", "${oc.env:CSG_TEST_UNSET}/data"
    settings = run_settings(cfg, data=False)
    assert settings.data.values == {"name": cfg.data.name} and settings.schedule == schedule_settings(cfg)
    with pytest.raises(InterpolationResolutionError):
        run_settings(cfg)  # the data's root, where the data are read
    with pytest.raises(InterpolationResolutionError):
        run_settings(cfg, data=False, fingerprint=True)
