"""Stochastic gradient Hamiltonian Monte Carlo as a ``torch.optim.Optimizer``."""

from __future__ import annotations

import torch

from csg.samplers import functional as F
from csg.samplers.base import SGMCMCOptimizer


class SGHMC(SGMCMCOptimizer):
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen et al. 2014), velocity form.

    Samples :math:`p(\theta) \propto \exp(-U(\theta)/T)` with
    :math:`U(\theta) = N \cdot \overline{\ell}(\theta) + \tfrac{N\,\mathrm{wd}}{2}\lVert\theta\rVert^2`
    (see :class:`csg.samplers.SGLD`). Call ``loss.backward()`` on the MEAN
    mini-batch loss, then :meth:`step`, which applies

    .. math::
        v &\leftarrow m\,v - \mathrm{lr}\,(g + \mathrm{wd}\,\theta)
              + \mathcal{N}\!\left(0,\ \tfrac{2\,\mathrm{lr}\,(1-m)\,T}{N}\right) \\
        \theta &\leftarrow \theta + v

    with momentum :math:`m = 1 - \alpha` (:math:`\alpha` the friction), the
    update of the cSG-MCMC paper's Section 2 with the noise estimate
    :math:`\hat\gamma = 0` and of the authors' code. The velocity buffer is
    created as zeros at the first step and never reset, also across the
    restarts of a cyclical schedule. ``temperature=0`` is heavy-ball SGD.

    Args:
        params: parameters or param groups.
        lr: step size on the mean-loss gradient.
        num_data: N, the number of training examples.
        temperature: T >= 0.
        momentum: m = 1 - alpha in [0, 1), default 0.9. (The authors' CIFAR
            code uses alpha = 0.9, i.e. ``momentum=0.1``.)
        weight_decay: wd >= 0.
        generator: optional ``torch.Generator`` for the noise.

    State: ``self.state[p]["momentum_buffer"]`` holds v.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        *,
        num_data: float,
        temperature: float = 1.0,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        generator: torch.Generator | None = None,
    ):
        defaults = dict(
            lr=lr, num_data=num_data, temperature=temperature, momentum=momentum, weight_decay=weight_decay
        )
        super().__init__(params, defaults, generator)

    capturable_rule = True

    def _hyperparameters(self, group):
        return {"lr": group["lr"], "momentum": group["momentum"], "weight_decay": group["weight_decay"],
                "noise_std": F.sghmc_noise_std(group["lr"], group["momentum"], group["temperature"], group["num_data"])}

    def _update(self, group, params, grads, hyper, noise):
        velocities = []
        for p in params:
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            velocities.append(state["momentum_buffer"])
        self._rule(F.sghmc)(params, grads, velocities, noise=noise, **hyper)
