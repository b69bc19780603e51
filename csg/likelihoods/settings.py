"""The ``likelihood`` group's names and keys, checked before torch is imported (a refusal is quick): a composed
config's group by :func:`csg.checks.likelihood.check_likelihood`, a built-in's keys by :func:`check_options`.

tests/likelihoods/test_likelihoods.py holds :data:`NAMES` and :data:`KEYS` equal to the registry's classes.
"""

from __future__ import annotations

import math
from typing import Any

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
