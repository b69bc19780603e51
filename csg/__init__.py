"""csg: cyclical stochastic-gradient MCMC for Bayesian deep learning.

Rooms of the package:

- :mod:`csg.samplers`: SGLD and SGHMC as ``torch.optim.Optimizer`` subclasses;
- :mod:`csg.schedules`: cyclical (eq. 1 of Zhang et al. 2020), decreasing and constant step sizes;
- :mod:`csg.collection`: which epochs yield samples, and the sample files;
- :mod:`csg.training`: the loop around a sampler;
- :mod:`csg.evaluation`: metrics and the Bayesian model average;
- :mod:`csg.data`, :mod:`csg.models`: registries of data sets and models;
- :mod:`csg.run`: one run from a Hydra config (what ``train.py`` calls).
"""

__version__ = "0.1.0"

from csg import _torchvision_compat

_torchvision_compat.install()  # lets torchvision (and timm, torchmetrics) import next to a CPU-only torch
