r"""Replica exchange (parallel tempering) between chains at different temperatures: reSGLD / reSGHMC.

Chains :math:`i < j` at temperatures :math:`T_i < T_j` swap their positions with probability
:math:`\min(1, S)`,

.. math::
    \log S = \Big(\frac{1}{T_i} - \frac{1}{T_j}\Big)\big(\hat U_i - \hat U_j\big) - c,

where :math:`\hat U` are (noisy) energy estimates and :math:`c \ge 0` the bias correction of
Deng et al. (2020, "Non-convex learning via replica exchange SGLD"): for Gaussian energy noise of
variance :math:`\sigma^2` per estimate, :math:`c = (1/T_i - 1/T_j)^2\sigma^2` makes the expected
:math:`S` that of the exact energies (:func:`bias_correction`). With exact energies and ``c = 0``
this is the Metropolis swap of parallel tempering.
"""

from __future__ import annotations

import torch
from torch import Tensor


def bias_correction(temperature_low: float, temperature_high: float, energy_variance: float) -> float:
    """:math:`(1/T_i - 1/T_j)^2 \\sigma^2`: the correction for energy estimates of variance ``energy_variance``."""
    return (1.0 / temperature_low - 1.0 / temperature_high) ** 2 * energy_variance


def swap_log_ratio(energy_low: Tensor, energy_high: Tensor, temperature_low: float, temperature_high: float,
                   correction: float = 0.0) -> Tensor:
    """:math:`\\log S` of swapping a chain at ``temperature_low`` with one at ``temperature_high``."""
    return (1.0 / temperature_low - 1.0 / temperature_high) * (energy_low - energy_high) - correction


@torch.no_grad()
def replica_exchange(positions: Tensor, energies: Tensor, temperatures: list[float], *, correction: float | list[float] = 0.0,
                     offset: int = 0, generator: torch.Generator | None = None) -> Tensor:
    """Propose swaps between neighbouring temperatures and apply the accepted ones in place.

    ``positions``: (repeats, K, dim), chain k at ``temperatures[k]`` (increasing); ``energies``:
    (repeats, K). Pairs (k, k + 1) with k = offset, offset + 2, ... are proposed (alternate
    ``offset`` between 0 and 1 to reach every pair). ``correction``: c of each pair, or one for all.
    Returns the accepted mask (repeats, number of pairs); ``energies`` are swapped along.
    """
    k = list(range(offset, len(temperatures) - 1, 2))
    if not k:
        return torch.zeros(positions.shape[0], 0, dtype=torch.bool, device=positions.device)
    corrections = correction if isinstance(correction, list) else [correction] * (len(temperatures) - 1)
    low, high = torch.tensor(k, device=positions.device), torch.tensor(k, device=positions.device) + 1
    log_s = torch.stack([swap_log_ratio(energies[:, i], energies[:, i + 1], temperatures[i], temperatures[i + 1],
                                        corrections[i]) for i in k], dim=1)
    uniform = torch.rand(log_s.shape, generator=generator, dtype=log_s.dtype, device=log_s.device)
    accepted = uniform.log() < log_s
    for column, (i, j) in enumerate(zip(low.tolist(), high.tolist())):
        rows = accepted[:, column]
        if rows.any():
            positions[rows, i], positions[rows, j] = positions[rows, j].clone(), positions[rows, i].clone()
            energies[rows, i], energies[rows, j] = energies[rows, j].clone(), energies[rows, i].clone()
    return accepted
