"""The ``likelihood`` group's names and keys, checked before torch is imported (a refusal is quick).

tests/likelihoods/test_likelihoods.py holds :data:`NAMES` and :data:`KEYS` equal to the registry's classes.
"""

from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from csg.components import has_target, locate, target_of
from csg.errors import ConfigError

NAMES = ("categorical", "gaussian", "gaussian_precision", "heteroscedastic")
KEYS = {"categorical": (), "gaussian": ("noise_std",), "gaussian_precision": ("shape", "rate", "init_precision"),
        "heteroscedastic": ("min_variance",)}
TASKS = ("classification", "regression")


def check_options(name: Any, options: dict[str, Any]) -> None:
    """A built-in likelihood's ``name`` and keys (each a finite number > 0); one-line ConfigError otherwise."""
    if name not in NAMES:
        raise ConfigError("likelihood.name", name, f"one of {', '.join(NAMES)}, or likelihood=custom with a _target_")
    for key, value in options.items():
        if key not in KEYS[name]:
            allowed = ", ".join(KEYS[name]) or "none"
            raise ConfigError(f"likelihood.{key}", value, f"a key of likelihood={name} ({allowed})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"likelihood.{key}", value, "a finite number > 0")


def check_likelihood(cfg: DictConfig) -> None:
    """``likelihood``: a built-in name with its keys, or an importable ``_target_`` (a config without the group,
    a run saved before it, is categorical)."""
    node = cfg.get("likelihood")
    if has_target(node):
        locate(target_of(cfg, "likelihood._target_"), "likelihood._target_")
    elif node is not None:
        check_options(node.get("name"), {k: v for k, v in OmegaConf.to_container(node).items() if k != "name"})
