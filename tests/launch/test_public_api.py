"""csg.build, csg.check_command and csg.register_study: the public API research code uses instead of csg's
machinery (the studies go through it, as a user would)."""

from __future__ import annotations

import sys

import pytest
import torch
from omegaconf import OmegaConf

import csg
from csg.errors import CommandRefused, ConfigError
from csg.launch import studies as registry


def test_build_gives_the_data_and_model_train_py_would_train(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    built = csg.build(["trainer.epochs=2", "data.batch_size=50"])
    x, y = next(iter(built.data.train))
    assert x.shape[0] == 50 and built.model(x).shape == (50, built.data.num_classes)
    assert built.config.trainer.epochs == 2 and built.ood is None  # the embedded default: ood=none
    with pytest.raises(Exception, match="read-only|ReadonlyConfigError"):
        built.config.trainer.epochs = 3
    assert list(tmp_path.iterdir()) == []  # built, not run: nothing written


def test_build_and_check_command_refuse_as_train_py_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert csg.check_command(["trainer.epochs=2"]) is None
    message = csg.check_command(["sampler.temperature=-1"])
    assert message is not None and "sampler.temperature" in message and "\n" not in message
    with pytest.raises(CommandRefused, match="sampler.temperature"):
        csg.build(["sampler.temperature=-1"])
    with pytest.raises(ConfigError, match="overrides"):
        csg.build("trainer.epochs=2")


def test_a_registered_study_is_checked_and_run_under_its_own_key(tmp_path, monkeypatch):
    import studies  # noqa: F401  (csg's own register first, into the registry the test then restores)

    monkeypatch.setattr(registry, "_STUDIES", dict(registry.registered_studies()))
    ran = []

    def check(cfg):
        if cfg.synthetic.name == "table4":
            raise ConfigError("synthetic", cfg.synthetic.name, "a study this test allows")

    csg.register_study("synthetic", check, lambda cfg, run_dir: ran.append((cfg.synthetic.name, run_dir.name)))
    monkeypatch.chdir(tmp_path)
    message = csg.check_command(["synthetic=table4"])
    assert message is not None and "a study this test allows" in message
    assert csg.run_study(OmegaConf.create({"synthetic": {"name": "mine"}}), tmp_path / "run") is None
    assert ran == [("mine", "run")] and (tmp_path / "run").is_dir()
    with pytest.raises(ConfigError, match="a study this test allows"):  # checked again in the run directory
        csg.run_study(OmegaConf.create({"synthetic": {"name": "table4"}}), tmp_path / "refused")
    assert ran == [("mine", "run")] and not (tmp_path / "refused").exists()
    with pytest.raises(ValueError, match="top-level config key"):
        csg.register_study("my.study", check, print)


def test_the_studies_register_their_key_through_their_entry_point(monkeypatch):
    """csg's entry point imports the modules of the ``csg.studies`` entry-point group (the clone's studies/,
    installed by make install as csg-studies); their import registers ``synthetic``."""
    monkeypatch.setattr(registry, "_STUDIES", {})
    monkeypatch.delenv(registry.MODULES, raising=False)
    monkeypatch.delitem(sys.modules, "studies", raising=False)
    assert registry.study_checks() == {}
    registry.import_registered()
    assert "synthetic" in registry.study_checks() and torch.__version__
