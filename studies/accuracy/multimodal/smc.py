r"""Tempered sequential Monte Carlo from a Gaussian prior to the posterior: the network reference's check.

A check of an importance-sampling reference has to fail where importance sampling fails: a region that the
proposals never reach. Tempered SMC (Del Moral, Doucet and Jasra 2006; Chopin and Papaspiliopoulos 2020, ch. 17)
weights nothing by a proposal density: its particles start as prior draws and follow the
path :math:`\pi_\beta(\theta) \propto p_0(\theta)\, e^{-\beta L(\theta)}`, :math:`L = U - U_0` the likelihood's
energy, :math:`\beta` from 0 to 1. At each stage

1. the next :math:`\beta` is the one whose incremental weights :math:`e^{-(\beta' - \beta) L}` keep an effective
   sample size of ``ess`` x the particles (bisection), and their mean multiplies the evidence estimate;
2. the particles are resampled (systematic) by those weights;
3. each makes ``moves`` random-walk Metropolis-Hastings steps that leave :math:`\pi_{\beta'}` invariant: the
   proposal is :math:`N(\theta, s^2 \Sigma_{c(\theta)})`, :math:`\Sigma_c` the covariance of the cluster
   :math:`c(\theta)` that the point falls in (k-means of the stage's particles in prior-sd units, fixed during
   the stage), with the Hastings ratio of the two clusters' densities where the proposal lands in another
   cluster; :math:`s` adapts between stages towards an acceptance of 0.3. Optional independence jumps from a
   fixed density :math:`g` (accepted with :math:`\min(1, \pi_\beta(\theta') g(\theta) / \pi_\beta(\theta)
   g(\theta'))`) carry particles between distant regions that :math:`g` covers; they too leave
   :math:`\pi_{\beta'}` invariant, so they change how fast the particles settle, not what they estimate, and a
   region that :math:`g` misses keeps its particles (a jump out of it needs :math:`g(\theta) > 0` there).

The particles' mass in a region is then an estimate of its posterior probability, consistent as the particles
grow; independent runs (fresh prior draws, their own resampling and moves) give its Monte Carlo error by their
spread. It is structurally different from the importance estimates it checks: no proposal density enters any
weight, and a region the particles reach early in the path (where :math:`\pi_\beta` is nearly the prior) keeps
its mass unless the likelihood removes it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor


def _next_beta(like: Tensor, beta: float, ess: float) -> float:
    """The largest beta' in (beta, 1] whose incremental weights keep an ESS of at least ``ess`` x particles."""
    target = ess * len(like)

    def kish(b: float) -> float:
        log_w = -(b - beta) * like
        w = (log_w - log_w.max()).exp()
        return float(w.sum() ** 2 / (w * w).sum())

    if kish(1.0) >= target:
        return 1.0
    low, high = beta, 1.0
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if kish(mid) >= target else (low, mid)
    return max(low, beta + 1e-12)


def _systematic(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    positions = (rng.random() + np.arange(len(weights))) / len(weights)
    return np.minimum(np.searchsorted(np.cumsum(weights), positions), len(weights) - 1)


def _clusters(theta: Tensor, prior_sd: Tensor, count: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """k-means centres (in prior-sd units) of the particles, and each cluster's covariance's Cholesky factor and
    log determinant (original units); a cluster of fewer than 10 x dim particles takes the covariance of all."""
    from sklearn.cluster import KMeans

    scaled = (theta / prior_sd).numpy()
    fit = KMeans(count, n_init=1, random_state=seed).fit(scaled)
    dim = theta.shape[1]
    whole = torch.cov(theta.T) + 1e-10 * torch.eye(dim, dtype=theta.dtype)
    covariances = []
    for c in range(count):
        members = theta[torch.from_numpy(fit.labels_ == c)]
        cov = torch.cov(members.T) + 1e-10 * torch.eye(dim, dtype=theta.dtype) if len(members) >= 10 * dim else whole
        covariances.append(cov)
    chol = torch.linalg.cholesky(torch.stack(covariances))
    return torch.as_tensor(fit.cluster_centers_, dtype=theta.dtype), chol, 2 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)


def _assign(theta: Tensor, prior_sd: Tensor, centres: Tensor) -> Tensor:
    return torch.cdist(theta / prior_sd, centres).argmin(-1)


def tempered_smc(energy, prior_sd, particles: int, moves: int, clusters: int, seed: int, ess: float = 0.5,
                 jump=None, jumps: int = 0, max_stages: int = 1000, watch=None) -> dict:
    r"""One run of tempered SMC (module docstring) on :math:`e^{-U}`, ``energy`` U of (n, dim) tensors, whose
    prior part is :math:`U_0 = \tfrac12 |\theta / \text{prior\_sd}|^2` (a centred Gaussian prior); each stage's
    ``moves`` random-walk steps are followed by ``jumps`` independence Metropolis-Hastings steps from ``jump`` (a
    density with ``sample`` and ``log_density``, such as :class:`.importance.StudentMixture`), if given. Returns
    the final particles (particles, dim), ``log_evidence`` (an estimate of :math:`\log \int e^{-U}`, comparable
    with importance sampling's), the ``betas`` and the mean acceptances of the two kinds of move; ``watch(beta,
    particles, acceptance)``, if given, sees every stage."""
    generator, rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
    prior_sd = torch.as_tensor(np.asarray(prior_sd, dtype=float))
    dim = len(prior_sd)

    def split(x: Tensor) -> tuple[Tensor, Tensor]:
        """U_0 and L = U - U_0."""
        prior = 0.5 * (x / prior_sd).pow(2).sum(-1)
        with torch.no_grad():
            return prior, energy(x) - prior

    def log_q(mean: Tensor, to: Tensor, chol: Tensor, logdet: Tensor, scale: float) -> Tensor:
        """log N(to; mean, scale^2 chol chol^T) up to a constant (rows: their own chol and logdet)."""
        z = torch.linalg.solve_triangular(chol, (to - mean)[..., None], upper=False)[..., 0] / scale
        return -0.5 * z.pow(2).sum(-1) - 0.5 * logdet

    def metropolis(proposal: Tensor, log_ratio: Tensor) -> float:
        nonlocal theta, prior, like
        prior_p, like_p = split(proposal)
        log_alpha = (prior + beta * like) - (prior_p + beta * like_p) + log_ratio
        accept = torch.rand(particles, generator=generator, dtype=torch.float64).log() < torch.nan_to_num(log_alpha, nan=-math.inf)
        theta = torch.where(accept[:, None], proposal, theta)
        prior, like = torch.where(accept, prior_p, prior), torch.where(accept, like_p, like)
        return float(accept.double().mean())

    theta = torch.randn(particles, dim, generator=generator, dtype=torch.float64) * prior_sd
    prior, like = split(theta)
    beta, log_z, betas, walked, jumped = 0.0, 0.0, [0.0], [], []
    scale = 2.38 / math.sqrt(dim)
    while beta < 1.0:
        if len(betas) > max_stages:
            raise RuntimeError(f"tempered SMC: beta {beta:.3g} after {max_stages} stages")
        new = _next_beta(like, beta, ess)
        log_w = -(new - beta) * like
        log_z += float(torch.logsumexp(log_w, 0)) - math.log(particles)
        w = (log_w - log_w.max()).exp()
        pick = torch.from_numpy(_systematic((w / w.sum()).numpy(), rng))
        theta, prior, like, beta = theta[pick], prior[pick], like[pick], new
        betas.append(beta)
        centres, chol, logdet = _clusters(theta, prior_sd, clusters, seed + len(betas))
        rates = []
        for _ in range(moves):
            here = _assign(theta, prior_sd, centres)
            proposal = theta + scale * torch.einsum("nij,nj->ni", chol[here], torch.randn(theta.shape, generator=generator, dtype=torch.float64))
            there = _assign(proposal, prior_sd, centres)
            rates.append(metropolis(proposal, log_q(proposal, theta, chol[there], logdet[there], scale)
                                    - log_q(theta, proposal, chol[here], logdet[here], scale)))
        walked.append(float(np.mean(rates)))
        scale *= math.exp(walked[-1] - 0.3)
        for _ in range(jumps if jump is not None else 0):
            with torch.no_grad():
                proposal = jump.sample(particles, generator)
                jumped.append(metropolis(proposal, jump.log_density(theta) - jump.log_density(proposal)))
        if watch is not None:
            watch(beta, theta, walked[-1])
    log_prior_norm = 0.5 * dim * math.log(2 * math.pi) + float(torch.log(prior_sd).sum())
    return {"particles": theta, "log_evidence": log_z + log_prior_norm, "betas": betas,
            "walk_acceptance": float(np.mean(walked)), "jump_acceptance": float(np.mean(jumped)) if jumped else float("nan")}
