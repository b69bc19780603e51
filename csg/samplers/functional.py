r"""Pure multi-tensor SG-MCMC update rules, in the form of ``torch.optim``'s functional API.

Each function updates a list of parameters in place from their gradients,
hyper-parameters and standard-normal draws. No state and no random number
generation live here: the optimizer classes in :mod:`csg.samplers` own the
param groups, the momentum buffers and the noise generator, draw the noise
(:func:`standard_normal`) and call these rules.

A hyper-parameter may be a Python number or a 0-d tensor on the parameters'
device. Tensors let a captured step (a CUDA graph, :mod:`csg.engine.step.single`) change the
step size without capturing again, and let ``torch.compile`` fuse the rule
into a few kernels without recompiling when the step size changes.

Parameterisation (the authors' code, ruqizhang/csgmcmc): ``grads`` are the
gradients of the MEAN mini-batch loss; ``lr`` multiplies them directly; the
noise scale carries the data-set size N and the temperature T. With
:math:`U(\theta) = N\,\overline{\ell}(\theta) + \tfrac{N\,\mathrm{wd}}{2}\lVert\theta\rVert^2` and
:math:`\eta = \mathrm{lr}/N` the rules
below are SGLD / SGHMC on exp(-U / T) with step eta.
"""

from __future__ import annotations

import math

from typing import TypeAlias

import torch
from torch import Tensor

Hyper: TypeAlias = "float | Tensor"  # a step's hyperparameter: a number, or a tensor (compiled steps, chains)


def standard_normal(tensors: list[Tensor], generator: torch.Generator | None = None) -> list[Tensor]:
    """Standard-normal draws shaped like ``tensors`` (one param group's: one device and dtype).

    On an accelerator, views into ONE draw of their total size: one kernel per step, not one per tensor.
    On the CPU, one draw per tensor: a fresh block the size of all parameters (44 MB for a ResNet-18)
    would come from the operating system at every step, page faults and all, where per-tensor blocks are
    reused. Either way the eager, compiled and captured steps take the same numbers.
    """
    if tensors[0].device.type == "cpu":
        return [torch.randn(t.shape, generator=generator, dtype=t.dtype) for t in tensors]
    sizes = [t.numel() for t in tensors]
    flat = torch.randn(sum(sizes), generator=generator, device=tensors[0].device, dtype=tensors[0].dtype)
    return [chunk.view(t.shape) for chunk, t in zip(flat.split(sizes), tensors)]


def sgld_noise_std(lr: float, temperature: float, num_data: float) -> float:
    """Standard deviation of the SGLD noise: sqrt(2 lr T / N)."""
    return math.sqrt(2.0 * lr * temperature / num_data)


def sghmc_noise_std(lr: float, momentum: float, temperature: float, num_data: float) -> float:
    """Standard deviation of the SGHMC noise: sqrt(2 lr alpha T / N), alpha = 1 - momentum."""
    return math.sqrt(2.0 * lr * (1.0 - momentum) * temperature / num_data)


def _add_scaled_(tensors: list[Tensor], others: list[Tensor], scale: Hyper) -> None:
    """tensors += scale * others (``alpha=`` for a number; one product for a tensor scale)."""
    if isinstance(scale, Tensor):
        torch._foreach_add_(tensors, torch._foreach_mul(others, scale))
    else:
        torch._foreach_add_(tensors, others, alpha=scale)


def sgld(
    params: list[Tensor],
    grads: list[Tensor],
    *,
    lr: Hyper,
    weight_decay: Hyper,
    noise_std: Hyper,
    noise: list[Tensor] | None = None,
) -> None:
    """SGLD step (Welling & Teh 2011; cSG-MCMC paper, Section 2)::

        theta <- theta - lr * (g + wd * theta) + noise_std * xi,   xi = noise ~ N(0, I)

    ``noise=None`` (temperature 0) is plain SGD with weight decay.
    """
    if isinstance(weight_decay, Tensor) or weight_decay != 0.0:
        torch._foreach_mul_(params, 1.0 - lr * weight_decay)
    _add_scaled_(params, grads, -lr)
    if noise is not None:
        _add_scaled_(params, noise, noise_std)


def sghmc(
    params: list[Tensor],
    grads: list[Tensor],
    velocities: list[Tensor],
    *,
    lr: Hyper,
    momentum: Hyper,
    weight_decay: Hyper,
    noise_std: Hyper,
    noise: list[Tensor] | None = None,
) -> None:
    """SGHMC step in velocity form (Chen et al. 2014; cSG-MCMC paper, Section 2)::

        v     <- momentum * v - lr * (g + wd * theta) + noise_std * xi,   xi = noise ~ N(0, I)
        theta <- theta + v

    ``momentum`` is 1 - alpha, alpha the friction. ``noise=None`` (temperature 0) is heavy-ball SGD with
    weight decay.
    """
    torch._foreach_mul_(velocities, momentum)
    _add_scaled_(velocities, grads, -lr)
    if isinstance(weight_decay, Tensor) or weight_decay != 0.0:
        _add_scaled_(velocities, params, -lr * weight_decay)
    if noise is not None:
        _add_scaled_(velocities, noise, noise_std)
    torch._foreach_add_(params, velocities)
