r"""Likelihoods: the data term of the potential every sampler samples (the ``likelihood`` config group).

:class:`Categorical` (the default: classification), :class:`Gaussian` (a fixed noise), :class:`GaussianPrecision`
(a noise precision sampled under a Gamma prior) and :class:`Heteroscedastic` (a variance per input), or a
user's own :class:`Likelihood` by ``_target_``. :func:`create_likelihood` builds one by name; the math of each is
in its module and in docs/likelihoods.md. The names are imported on first use, so that the config checks
(:mod:`csg.likelihoods.settings`) refuse a command without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["LIKELIHOODS", "PREFIX", "Categorical", "Gaussian", "GaussianPrecision", "Heteroscedastic", "Likelihood",
           "attach", "create_likelihood", "own_parameters", "parameter_names"]

_HOMES = {"PREFIX": "base", "Likelihood": "base", "attach": "base", "own_parameters": "base",
          "parameter_names": "base", "Categorical": "categorical", "Gaussian": "gaussian",
          "GaussianPrecision": "gaussian", "Heteroscedastic": "gaussian"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"csg.likelihoods.{_HOMES[name]}"), name)
    if name == "LIKELIHOODS":
        from csg.likelihoods.categorical import Categorical
        from csg.likelihoods.gaussian import Gaussian, GaussianPrecision, Heteroscedastic

        return {"categorical": Categorical, "gaussian": Gaussian, "gaussian_precision": GaussianPrecision,
                "heteroscedastic": Heteroscedastic}
    raise AttributeError(f"module 'csg.likelihoods' has no attribute {name!r}")


def create_likelihood(name: str = "categorical", **options: Any):
    """The built-in likelihood ``name`` with its keys, checked (a one-line ConfigError naming the key)."""
    from csg.likelihoods.settings import check_options

    check_options(name, options)
    return __getattr__("LIKELIHOODS")[name](**options)
