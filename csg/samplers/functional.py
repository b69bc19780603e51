"""Pure multi-tensor SG-MCMC update rules, in the form of ``torch.optim``'s functional API.

Each function updates a list of parameters in place from their gradients and
hyper-parameters. No state lives here: the optimizer classes in
:mod:`csg.samplers` own the param groups, the momentum buffers and the noise
generator, and call these rules.

Parameterisation (the authors' code, ruqizhang/csgmcmc): ``grads`` are the
gradients of the MEAN mini-batch loss; ``lr`` multiplies them directly; the
noise scale carries the data-set size N and the temperature T. With
U(theta) = N * mean_loss + (N * wd / 2) * |theta|^2 and eta = lr / N the rules
below are SGLD / SGHMC on exp(-U / T) with step eta.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def normal_like(tensors: list[Tensor], generator: torch.Generator | None = None) -> list[Tensor]:
    """One standard-normal draw per tensor (a tensor of the same shape, device and dtype)."""
    return [
        torch.randn(t.shape, generator=generator, device=t.device, dtype=t.dtype) for t in tensors
    ]


def sgld_noise_std(lr: float, temperature: float, num_data: float) -> float:
    """Standard deviation of the SGLD noise: sqrt(2 lr T / N)."""
    return math.sqrt(2.0 * lr * temperature / num_data)


def sghmc_noise_std(lr: float, momentum: float, temperature: float, num_data: float) -> float:
    """Standard deviation of the SGHMC noise: sqrt(2 lr alpha T / N), alpha = 1 - momentum."""
    return math.sqrt(2.0 * lr * (1.0 - momentum) * temperature / num_data)


def sgld(
    params: list[Tensor],
    grads: list[Tensor],
    *,
    lr: float,
    weight_decay: float,
    noise_std: float,
    generator: torch.Generator | None = None,
) -> None:
    """SGLD step (Welling & Teh 2011; cSG-MCMC paper, Section 2)::

        theta <- theta - lr * (g + wd * theta) + noise_std * xi,   xi ~ N(0, I)

    ``noise_std == 0`` is plain SGD with weight decay, and draws nothing.
    """
    if weight_decay != 0.0:
        torch._foreach_mul_(params, 1.0 - lr * weight_decay)
    torch._foreach_add_(params, grads, alpha=-lr)
    if noise_std > 0.0:
        torch._foreach_add_(params, normal_like(params, generator), alpha=noise_std)


def sghmc(
    params: list[Tensor],
    grads: list[Tensor],
    velocities: list[Tensor],
    *,
    lr: float,
    momentum: float,
    weight_decay: float,
    noise_std: float,
    generator: torch.Generator | None = None,
) -> None:
    """SGHMC step in velocity form (Chen et al. 2014; cSG-MCMC paper, Section 2)::

        v     <- momentum * v - lr * (g + wd * theta) + noise_std * xi
        theta <- theta + v

    ``momentum`` is 1 - alpha, alpha the friction. ``noise_std == 0`` is
    heavy-ball SGD with weight decay, and draws nothing.
    """
    torch._foreach_mul_(velocities, momentum)
    torch._foreach_add_(velocities, grads, alpha=-lr)
    if weight_decay != 0.0:
        torch._foreach_add_(velocities, params, alpha=-lr * weight_decay)
    if noise_std > 0.0:
        torch._foreach_add_(velocities, normal_like(params, generator), alpha=noise_std)
    torch._foreach_add_(params, velocities)
