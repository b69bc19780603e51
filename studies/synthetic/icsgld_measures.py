"""How a sample of the ICSGLD simulation (:mod:`studies.synthetic.icsgld_simulation`) is measured against
the 25-mode landscape: exact draws, bin and partition masses, and the distances.

The distance to the target is the notebooks' k-nearest-neighbour estimate of KL(p || q) (Perez-Cruz 2008)
between 50,000 exact draws from the target on [-2.5, 2.5]^2 and the samples, the contour samples weighted by
their importance weights theta(J)^zeta (:class:`KNNDivergence`); beside it, KL(q_hat || p)
of the weighted sample histogram against exact bin masses, and the masses of the 25 modes.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from csg.samplers.contour import EnergyPartition
from studies.targets import ICSGLDLandscape

LIMIT, BINS = 3.0, 60  # histogram on [-3, 3]^2, 0.1-wide bins
DOMAIN = 2.5  # the contour chains stay in [-2.5, 2.5]^2; the exact draws for the KL come from there


def true_bin_masses(target: ICSGLDLandscape, refine: int = 10) -> Tensor:
    """Exact probability of each histogram bin (flattened BINS x BINS), from the density on a refined grid."""
    fine = BINS * refine
    half_cell = LIMIT / fine
    _, _, p = target.grid_density(-LIMIT + half_cell, LIMIT - half_cell, fine)  # cell centres; p[y, x]
    return p.T.reshape(BINS, refine, BINS, refine).sum((1, 3)).flatten()


def exact_draws(target: ICSGLDLandscape, n: int, generator: torch.Generator) -> Tensor:
    """``n`` exact draws from the target restricted to [-2.5, 2.5]^2, by rejection from the uniform
    (acceptance exp(-(U - U_min)), U_min = -4 at the origin)."""
    accepted = []
    while sum(len(a) for a in accepted) < n:
        x = (torch.rand(200_000, 2, generator=generator, dtype=torch.float64) * 2 - 1) * DOMAIN
        keep = torch.rand(len(x), generator=generator, dtype=torch.float64) < torch.exp(-(target.energy(x) + 4.0))
        accepted.append(x[keep])
    return torch.cat(accepted)[:n]


def exact_density_of_states(target: ICSGLDLandscape, partition: EnergyPartition, points: int = 1000) -> Tensor:
    r"""The exact :math:`\theta_\star(i)`: the target's mass (on the chains' square) whose noisy energy
    :math:`U(x) + \sigma\xi` falls in partition i, as the samplers index it (the ends absorb the tails), from a
    ``points`` x ``points`` grid of cell centres and the normal CDF of the energy noise."""
    h = 2 * DOMAIN / points
    axis = torch.linspace(-DOMAIN + h / 2, DOMAIN - h / 2, points, dtype=torch.float64)
    u = target.energy(torch.cartesian_prod(axis, axis))
    mass = torch.exp(-(u - u.min()))
    edges = partition.low + partition.width * torch.arange(1, partition.partitions, dtype=torch.float64)
    sigma = max(target.energy_noise, 1e-12)
    theta = torch.zeros(partition.partitions, dtype=torch.float64)
    for block in range(0, len(u), 50_000):
        v, m = u[block:block + 50_000, None], mass[block:block + 50_000, None]
        below = torch.special.ndtr((edges[None, :] - v) / sigma)  # P(noisy U < each inner edge)
        theta += (m * torch.cat([torch.zeros_like(v), below, torch.ones_like(v)], 1).diff(dim=1)).sum(0)
    return theta / theta.sum()


class KNNDivergence:
    r"""KL(p || q) from samples (Perez-Cruz 2008, the authors' estimator):
    :math:`\frac{d}{n}\sum_i \log(s_i / r_i) + \log\frac{m}{n - 1}`, with :math:`r_i` the distance from
    the i-th of n draws of p to its nearest other draw and :math:`s_i` to its nearest of the m samples of q.
    Weighted samples (importance weights :math:`w_j`, total W) put the nearest sample's share of the mass in
    the last term: :math:`\frac{1}{n}\sum_i \log\frac{W}{(n - 1) w_{j(i)}}`, which is the unweighted term
    when every weight is 1. scipy's k-d tree (scipy comes with ArviZ) finds the neighbours."""

    def __init__(self, p_samples: Tensor):
        from scipy.spatial import cKDTree

        self.p = p_samples.numpy()
        self.r = cKDTree(self.p).query(self.p, k=2)[0][:, 1]

    def __call__(self, q_samples: Tensor, weights: Tensor | None = None) -> float:
        from scipy.spatial import cKDTree

        if len(q_samples) < 2:
            return float("nan")
        s, nearest = cKDTree(q_samples.numpy()).query(self.p, k=1)
        n, d = self.p.shape
        if weights is None:
            mass = math.log(len(q_samples) / (n - 1.0))
        else:
            w = weights.numpy()
            mass = float(np.mean(np.log(w.sum() / ((n - 1.0) * w[nearest]))))
        return float(d * np.mean(np.log(s / self.r)) + mass)


def bin_index(x: Tensor) -> tuple[Tensor, Tensor]:
    """(flat bin of each point, inside mask) for points of shape (..., 2)."""
    ij = torch.floor((x + LIMIT) / (2 * LIMIT / BINS)).long()
    inside = ((ij >= 0) & (ij < BINS)).all(-1)
    return ij[..., 0].clamp(0, BINS - 1) * BINS + ij[..., 1].clamp(0, BINS - 1), inside


def kl_divergence(histograms: Tensor, truth: Tensor) -> Tensor:
    """KL(p_hat || p) of each row of ``histograms`` (unnormalised) against ``truth``."""
    p_hat = histograms / histograms.sum(-1, keepdim=True).clamp_min(1e-300)
    terms = torch.where(p_hat > 0, p_hat * (p_hat.clamp_min(1e-300).log() - truth.log()), torch.zeros_like(p_hat))
    return terms.sum(-1)


def mode_masses(histograms: Tensor) -> Tensor:
    """Mass of each of the 25 modes (bins nearest to each integer point of [-2, 2]^2): (rows, 25)."""
    centres = -LIMIT + (torch.arange(BINS, dtype=torch.float64) + 0.5) * (2 * LIMIT / BINS)
    nearest = centres.round().clamp(-2, 2).long() + 2  # 0..4
    owner = (nearest[:, None] * 5 + nearest[None, :]).flatten()  # bin -> mode
    p = histograms / histograms.sum(-1, keepdim=True).clamp_min(1e-300)
    out = torch.zeros(p.shape[0], 25, dtype=p.dtype)
    return out.index_add_(1, owner, p)
