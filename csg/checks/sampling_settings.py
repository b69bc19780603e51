"""The checks of the settings that say how much a run samples and under which prior: the sampling stage's own step
(``sampler.sampling_lr``), a prior set as a variance (``prior.variance``) and a budget over all chains
(``trainer.epochs_all_chains``), and the share of the training split held out for tuning (``data.holdout``). Each key may be missing: a run saved before it existed."""

from __future__ import annotations

import math

from omegaconf import DictConfig, OmegaConf

from csg.errors import ConfigError

__all__ = ["check_budget", "check_holdout", "check_prior", "check_sampling_step"]


def _get(cfg: DictConfig, key: str):
    return OmegaConf.select(cfg, key, throw_on_missing=False)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_sampling_step(cfg: DictConfig) -> None:
    """``sampler.sampling_lr``: null, or with the cyclical schedule a fraction of lr0 in (0, 1]."""
    step = _get(cfg, "sampler.sampling_lr")
    if step is not None and (_get(cfg, "sampler.schedule") != "cyclical" or not _number(step) or not 0 < step <= 1):
        raise ConfigError("sampler.sampling_lr", step, "null, or with sampler.schedule=cyclical a number in (0, 1]: "
                          "the sampling stage's step as a fraction of lr0")


def check_prior(cfg: DictConfig) -> None:
    """``prior.variance``: null, or a finite number > 0."""
    variance = _get(cfg, "prior.variance")
    if variance is not None and (not _number(variance) or variance <= 0):
        raise ConfigError("prior.variance", variance, "null or a finite number > 0")


def check_budget(cfg: DictConfig) -> None:
    """``trainer.epochs_all_chains``: null, or a positive multiple of ``sampler.chains``, with ``trainer.epochs``
    left to it."""
    budget, chains = _get(cfg, "trainer.epochs_all_chains"), _get(cfg, "sampler.chains") or 1
    if budget is None:
        return
    if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
        raise ConfigError("trainer.epochs_all_chains", budget, "null or a positive integer")
    if budget % chains:
        raise ConfigError("trainer.epochs_all_chains", budget, f"a multiple of sampler.chains={chains}")
    if _get(cfg, "trainer.epochs") != budget // chains:
        raise ConfigError("trainer.epochs", _get(cfg, "trainer.epochs"), f"unset with trainer.epochs_all_chains="
                          f"{budget} (each of sampler.chains={chains} then runs {budget // chains} epochs)")


def check_holdout(cfg: DictConfig) -> None:
    """``data.holdout``: missing, 0, or a share in (0, 1) of the training split held out as the test split."""
    share = _get(cfg, "data.holdout")
    if share is not None and share != 0 and (not _number(share) or not 0 < share < 1):
        raise ConfigError("data.holdout", share, "0 or a number in (0, 1): the share of the training split held out "
                          "and scored as the test split")
