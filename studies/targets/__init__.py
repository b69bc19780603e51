"""Analytic targets for the synthetic experiments, behind ``create_target(name, **kwargs)``.

- ``mog25``: the 25-Gaussian grid of cSG-MCMC Appendix A.1 (variance 0.03);
- ``mog25_wang``: Wang et al.'s 25-component grid, equal (0.2) or unequal (0.2 / i) variances;
- ``mixture1d``: Wang et al.'s 0.5 N(5, 1) + 0.5 N(-5, c^2);
- ``icsgld2d``: the ICSGLD paper's 2-D landscape.
"""

from csg.errors import ConfigError
from studies.targets.base import Target
from studies.targets.landscape import ICSGLDLandscape
from studies.targets.mixtures import GaussianMixture, grid_means, mixture1d, mog25, mog25_unequal

_TARGETS = {"mog25": mog25, "mog25_wang": mog25_unequal, "mixture1d": mixture1d, "icsgld2d": ICSGLDLandscape}


def list_targets() -> list[str]:
    return sorted(_TARGETS)


def create_target(name: str, **kwargs) -> Target:
    if name not in _TARGETS:
        raise ConfigError("target.name", name, f"one of {', '.join(list_targets())}")
    return _TARGETS[name](**kwargs)


__all__ = ["GaussianMixture", "ICSGLDLandscape", "Target", "create_target", "grid_means", "list_targets"]
