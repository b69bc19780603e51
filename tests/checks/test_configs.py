"""Every config composes, resolves and passes the input checks; the sampler configs say what the paper does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from csg.checks import config as checks
from csg.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SAMPLERS = sorted(p.stem for p in (CONFIGS / "sampler").glob("*.yaml") if p.stem != "custom")  # custom: a user's (test_own_components.py)


def composed(*overrides):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_the_papers_samplers_exist():
    # cSG-MCMC's eight, the ICSGLD paper's M-SGD ensemble, cyclical SWAG, (I)CSGHMC and reSGHMC, pSGLD, and the
    # constant-step SGLD and SGHMC baselines (issue 54)
    assert SAMPLERS == sorted(["sgd", "sgdm", "snapshot_sgd", "snapshot_sgdm", "sgld", "csgld", "sghmc", "csghmc",
                               "msgd", "cycswag", "icsghmc", "contour_sghmc", "resghmc", "psgld", "sgld_constant",
                               "sghmc_constant"])


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("data", ["mnist5k", "mnist"])
def test_every_sampler_and_data_config_validates(sampler, data):
    cfg = composed(f"sampler={sampler}", f"data={data}")
    checks.validate(cfg)
    OmegaConf.to_container(cfg, resolve=True)
    assert cfg.sampler.name == sampler


def test_sampler_semantics_follow_the_paper():
    for name in ("sgd", "sgdm", "snapshot_sgd", "snapshot_sgdm"):
        assert composed(f"sampler={name}").sampler.temperature == 0  # optimisers: never noise
    for name in ("snapshot_sgd", "snapshot_sgdm", "csgld", "csghmc"):
        cfg = composed(f"sampler={name}")
        assert cfg.sampler.schedule == "cyclical" and cfg.sampler.cycles == 4
    assert composed("sampler=csghmc").sampler.samples_per_cycle == 3
    assert composed("sampler=snapshot_sgd").sampler.samples_per_cycle == 1
    for name in ("sgld", "sghmc", "psgld"):
        cfg = composed(f"sampler={name}")
        assert cfg.sampler.explore == 0.75 and cfg.sampler.samples_per_cycle == 20 and cfg.sampler.temperature > 0


def test_recipe_values_can_be_overridden_per_sampler_key():
    cfg = composed("sampler=csgld", "sampler.lr0=0.05")
    assert cfg.sampler.lr0 == 0.05 and cfg.data.recipe.lr0 not in (0.05, None)
    assert composed("sampler=csgld").sampler.lr0 == cfg.data.recipe.lr0  # without the override: the recipe's


@pytest.mark.parametrize(
    "override, key",
    [
        ("sampler.momentum=0.5", "sampler.momentum"),  # csgld uses the SGLD rule
        ("sampler.lr_final=1.0", "sampler.lr_final"),  # must be below lr0
        ("trainer.device=gpu", "trainer.device"),
        ("logger.name=tensorboard", "logger.name"),
        ("evaluation.cycle_weights=bma", "evaluation.cycle_weights"),
        ("seed=abc", "seed"),
        ("seed=-1", "seed"),
        ("trainer.deterministic=maybe", "trainer.deterministic"),
        ("trainer.stack_chains=sometimes", "trainer.stack_chains"),
        ("sampler.contour.difference=central", "sampler.contour.difference"),
    ],
)
def test_more_bad_values_are_named(override, key):
    sampler = "sgld" if "lr_final" in override else "contour_sghmc" if "contour" in override else "csgld"
    with pytest.raises(ConfigError) as error:
        checks.validate(composed(f"sampler={sampler}", override))
    assert error.value.key == key


def test_psgld_is_li_et_als_preconditioned_sgld_with_its_own_keys():
    from csg.engine import distributed
    from csg.engine.build import build_likelihood, build_sampler
    from csg.engine.settings import run_settings
    from csg.samplers import PSGLD

    cfg = composed("sampler=psgld", "sampler.alpha=0.9", "sampler.eps=1e-4")
    checks.validate(cfg)
    settings = run_settings(cfg)
    sampler = build_sampler(settings, torch.nn.Linear(3, 2), 100, distributed.Layout(), torch.device("cpu"),
                            torch.Generator().manual_seed(0), likelihood=build_likelihood(settings.likelihood))
    assert isinstance(sampler, PSGLD) and cfg.sampler.schedule == "decreasing"
    group = sampler.param_groups[0]
    assert (group["alpha"], group["eps"], group["lr"], group["num_data"]) == (0.9, 1e-4, 1e-3, 100)
    for override, key in (("sampler.alpha=1.0", "sampler.alpha"), ("sampler.eps=0", "sampler.eps"),
                          ("sampler.momentum=0.9", "sampler.momentum"), ("+sampler.swag.rank=2", "sampler.swag")):
        with pytest.raises(ConfigError) as refused:
            checks.validate(composed("sampler=psgld", override))
        assert refused.value.key == key, override


def test_the_names_the_checks_read_before_torch_are_the_registries():
    # the checks know the built-in names without importing torch; the registries (which do) must say the same
    from csg.checks import config
    from csg.data import OOD_SETS, list_datasets
    from csg.models import list_models
    from csg.samplers import UPDATE_RULES

    assert list(config.DATASETS) == list_datasets() and list(config.MODELS) == list_models()
    assert config.OOD_SETS == OOD_SETS and config.UPDATE_RULES == tuple(UPDATE_RULES)
