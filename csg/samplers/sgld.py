"""Stochastic gradient Langevin dynamics as a ``torch.optim.Optimizer``."""

from __future__ import annotations

import torch

from csg.samplers import functional as F
from csg.samplers.base import SGMCMCOptimizer


class SGLD(SGMCMCOptimizer):
    r"""Stochastic gradient Langevin dynamics (Welling & Teh 2011).

    Samples :math:`p(\theta) \propto \exp(-U(\theta)/T)` with

    .. math::
        U(\theta) = N \cdot \overline{\ell}(\theta) + \tfrac{N\,\mathrm{wd}}{2} \lVert\theta\rVert^2,

    where :math:`\overline{\ell}` is the mean loss over the training set (the
    negative log-likelihood per example) and the weight-decay term is a Gaussian
    prior of precision :math:`N\,\mathrm{wd}`. Call ``loss.backward()`` on the
    MEAN mini-batch loss, then :meth:`step`, which applies

    .. math::
        \theta \leftarrow \theta - \mathrm{lr}\,(g + \mathrm{wd}\,\theta)
                 + \mathcal{N}\!\left(0,\ \tfrac{2\,\mathrm{lr}\,T}{N}\right)

    (the cSG-MCMC authors' parameterisation; with :math:`\eta = \mathrm{lr}/N`
    it is :math:`\theta - \eta\nabla U + \mathcal{N}(0, 2\eta T)`).
    ``temperature=0`` is plain SGD with weight decay.

    Args:
        params: parameters or param groups, as for any ``torch.optim.Optimizer``.
        lr: step size on the mean-loss gradient.
        num_data: N, the number of training examples.
        temperature: T >= 0 (1 is the Bayesian posterior).
        weight_decay: wd >= 0 (prior precision N * wd).
        generator: optional ``torch.Generator`` for the noise.

    Example::

        sampler = SGLD(model.parameters(), lr=1e-2, num_data=len(train_set))
        for x, y in loader:
            sampler.zero_grad()
            F.cross_entropy(model(x), y).backward()
            sampler.step()
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        *,
        num_data: float,
        temperature: float = 1.0,
        weight_decay: float = 0.0,
        generator: torch.Generator | None = None,
    ):
        defaults = dict(lr=lr, num_data=num_data, temperature=temperature, weight_decay=weight_decay)
        super().__init__(params, defaults, generator)

    capturable_rule = True

    def _hyperparameters(self, group):
        return {"lr": group["lr"], "weight_decay": group["weight_decay"],
                "noise_std": F.sgld_noise_std(group["lr"], group["temperature"], group["num_data"])}

    def _update(self, group, params, grads, hyper, noise):
        self._rule(F.sgld)(params, grads, noise=noise, **hyper)
