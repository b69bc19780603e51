r"""The network's mode weights by importance sampling from a defensive mixture of Student-t proposals.

The network's posterior :math:`p(\theta) \propto e^{-U(\theta)}` lives in 7 dimensions, where importance sampling
is cheap and exact in the limit: draws :math:`\theta_i \sim q` weighted by :math:`w_i = e^{-U(\theta_i)} / q(\theta_i)`
give the self-normalised estimate of any share :math:`P(A) = E_p[1_A]`,

.. math::
    \hat P(A) = \frac{\sum_i w_i 1_A(\theta_i)}{\sum_i w_i},\qquad
    \widehat{\mathrm{se}}^2 = \frac{\sum_i w_i^2 (1_A(\theta_i) - \hat P(A))^2}{(\sum_i w_i)^2}

(the delta method; Owen, *Monte Carlo theory, methods and examples*, Eq. 9.8). The delta method needs the
weights' variance to be finite, which a Pareto :math:`\hat k` above 0.5 says it is not (the tail of the weights
decays like :math:`w^{-1/k}`); :func:`estimate` therefore reports as the s.e. the spread of independent batches
(:func:`batch_errors`: the draws, independent given the proposal, split into ``batches`` runs of their own, each
self-normalised; s.e. = sd / sqrt(batches)) and keeps the delta method's beside it (``*_se_delta``) for the
comparison. The proposal :math:`q`
(:func:`proposal`) is a mixture of multivariate Student-t densities (heavy tails, so that :math:`w` stays bounded
where :math:`q` is a little too narrow), one at each minimum found with its Laplace covariance :math:`H^{-1}`
inflated, plus a *defensive* component (Hesterberg 1995) as wide as the prior, so that no region of the prior is
left without proposals. Whether the weights can be trusted is read off the Pareto :math:`\hat k` of their tail
(PSIS, Vehtari et al. 2024, through ArviZ's ``psislw``, ArviZ 0.x's ``arviz.psislw`` or 1.x's
``arviz_stats.base.array_stats.psislw``, arviz-stats being ArviZ 1.x's own dependency: below 0.7 the estimate
converges at the usual rate) and Kish's effective sample size :math:`(\sum w)^2 / \sum w^2`.

The shares are those the study's chains estimate (:class:`.landscapes.NetworkRows`, whose :meth:`regions` this
module calls): the mode of a point is the argmax over the main minima's Gaussian fits of
:math:`-\tfrac12 d_k^2 - \tfrac12 \log\det\Sigma_k`, its core the fit's 99 % ellipsoid. Why not a library: the
proposal, the weights and the estimator are a dozen lines of tensor algebra; ArviZ supplies the diagnostic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from studies.accuracy.multimodal.landscapes import NetworkRows


def laplace(target, minima: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Hessians of U at ``minima`` (K, dim) and their inverses, the Laplace covariances: (K, dim, dim) each."""
    hessians = np.stack([torch.autograd.functional.hessian(lambda z: target.energy(z[None])[0],
                                                           torch.as_tensor(m, dtype=torch.float64)).numpy()
                         for m in minima])
    hessians = 0.5 * (hessians + hessians.transpose(0, 2, 1))
    return hessians, np.linalg.inv(hessians)


@dataclass
class StudentMixture:
    """A mixture of multivariate Student-t densities: centres (K, dim), Cholesky factors of the scales (K, dim,
    dim), mixture weights (K,), integer degrees of freedom ``df`` (so that the chi-square draws are sums of
    squared normals from one seeded generator)."""

    centres: Tensor
    chol: Tensor
    weights: Tensor
    df: int

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        k = torch.multinomial(self.weights, n, replacement=True, generator=generator)
        z = torch.randn(n, self.centres.shape[1], generator=generator, dtype=torch.float64)
        u = torch.randn(n, self.df, generator=generator, dtype=torch.float64).pow(2).sum(-1)
        return self.centres[k] + torch.einsum("nij,nj->ni", self.chol[k], z) / (u / self.df).sqrt()[:, None]

    def log_density(self, x: Tensor) -> Tensor:
        dim, df = self.centres.shape[1], self.df
        whiten = torch.linalg.inv(self.chol).transpose(-1, -2)                              # z = (x - m) @ whiten
        z = torch.einsum("nd,kde->nke", x, whiten) - torch.einsum("kd,kde->ke", self.centres, whiten)
        q = z.pow(2).sum(-1)
        half_logdet = torch.log(torch.diagonal(self.chol, dim1=-2, dim2=-1)).sum(-1)
        const = math.lgamma((df + dim) / 2) - math.lgamma(df / 2) - 0.5 * dim * math.log(df * math.pi)
        each = const - half_logdet - 0.5 * (df + dim) * torch.log1p(q / df)
        return torch.logsumexp(each + self.weights.log(), -1)


def proposal(minima: np.ndarray, covariances: np.ndarray, log_mass: np.ndarray, prior_sd: np.ndarray,
             inflate: float = 1.5, df: int = 5, defensive: float = 0.05) -> StudentMixture:
    r"""Student-t components at ``minima`` with scales ``inflate``^2 x their Laplace covariances, weighted half by
    their Laplace masses :math:`e^{-U_k} |H_k|^{-1/2}` (``log_mass``) and half equally; plus the defensive
    component, a t centred at 0 with the prior's scales diag(prior_sd^2), of weight ``defensive``."""
    mass = np.exp(log_mass - log_mass.max())
    weights = (1 - defensive) * (0.5 * mass / mass.sum() + 0.5 / len(mass))
    centres = np.concatenate([minima, np.zeros((1, minima.shape[1]))])
    scales = np.concatenate([inflate**2 * covariances, np.diag(np.asarray(prior_sd) ** 2)[None]])
    return StudentMixture(torch.as_tensor(centres, dtype=torch.float64),
                          torch.linalg.cholesky(torch.as_tensor(scales, dtype=torch.float64)),
                          torch.as_tensor(np.append(weights, defensive), dtype=torch.float64), df)


def self_normalised(log_weights: np.ndarray, indicators: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The self-normalised estimates of the columns of ``indicators`` (n, m) and their delta-method s.e."""
    w = np.exp(log_weights - log_weights.max())
    w /= w.sum()
    estimate = w @ indicators
    se = np.sqrt((w[:, None] ** 2 * (indicators - estimate) ** 2).sum(0))
    return estimate, se


def region_marks(rows: NetworkRows, theta: Tensor) -> np.ndarray:
    """The indicators (n, 2K + 1) of the points ``theta``: the K modes, the K cores and outside every core."""
    mode, inside, _ = rows.regions(theta)
    region = torch.nn.functional.one_hot(mode, rows.modes).double()
    core = region * inside[:, None].double()
    return torch.cat([region, core, 1 - core.sum(1, keepdim=True)], 1).numpy()


def sample_weighted(target, q: StudentMixture, rows: NetworkRows, n: int, generator: torch.Generator,
                    chunk: int = 2**16) -> tuple[np.ndarray, np.ndarray]:
    """``n`` draws of ``q``: their log weights -U - log q, and their indicators (:func:`region_marks`)."""
    log_w, marks = [], []
    with torch.no_grad():
        for start in range(0, n, chunk):
            theta = q.sample(min(chunk, n - start), generator)
            log_w.append((-target.energy(theta) - q.log_density(theta)).numpy())
            marks.append(region_marks(rows, theta))
    return np.concatenate(log_w), np.concatenate(marks)


def batch_errors(log_weights: np.ndarray, indicators: np.ndarray, batches: int) -> tuple[np.ndarray, np.ndarray]:
    """The self-normalised estimates of ``batches`` consecutive, equal batches of the draws (batches, m), and the
    s.e. of the estimate from all draws that their spread gives: sd / sqrt(batches). The draws of a fixed proposal
    are independent, so each batch is an independent importance-sampling run of its own."""
    if batches < 2 or len(log_weights) < batches:
        raise ValueError(f"batch_errors: batches must lie in [2, {len(log_weights)}], got {batches}")
    size = len(log_weights) // batches
    each = np.stack([self_normalised(log_weights[b * size:(b + 1) * size], indicators[b * size:(b + 1) * size])[0]
                     for b in range(batches)])
    return each, each.std(0, ddof=1) / np.sqrt(batches)


def estimate(log_weights: np.ndarray, marks: np.ndarray, modes: int, batches: int = 10) -> dict:
    """Mode weights, core shares (K + 1) and their s.e. from ``batches`` independent batches (the delta method's
    beside them, ``*_se_delta``); PSIS k-hat, Kish's ESS, log evidence (module docstring)."""
    import arviz as az

    values, delta = self_normalised(log_weights, marks)
    _, se = batch_errors(log_weights, marks, batches)
    if hasattr(az, "psislw"):  # ArviZ 0.x: psislw of the log weights
        _, khat = az.psislw(log_weights - log_weights.max())
    else:  # 1.x: arviz_stats' array interface, which takes the log-likelihood (the log weights' negative)
        from arviz_stats.base import array_stats

        _, khat = array_stats.psislw(-(log_weights - log_weights.max()))
    w = np.exp(log_weights - log_weights.max())
    return {"weights": values[:modes].tolist(), "weights_se": se[:modes].tolist(),
            "core_exact": values[modes:].tolist(), "core_exact_se": se[modes:].tolist(),
            "weights_se_delta": delta[:modes].tolist(), "core_exact_se_delta": delta[modes:].tolist(),
            "batches": int(batches), "khat": float(khat), "ess": float(w.sum() ** 2 / (w * w).sum()),
            "draws": int(len(log_weights)), "log_evidence": float(np.log(w.mean()) + log_weights.max())}


def mixed(first: StudentMixture, second: StudentMixture, share: float) -> StudentMixture:
    """``(1 - share) first + share second`` (the same degrees of freedom)."""
    return StudentMixture(torch.cat([first.centres, second.centres]), torch.cat([first.chol, second.chol]),
                          torch.cat([(1 - share) * first.weights, share * second.weights]), first.df)


def adapt(target, start: StudentMixture, betas: tuple[float, ...], draws: int, components: int, inflate: float,
          defensive: float, seed: int) -> StudentMixture:
    r"""Annealed adaptive importance sampling (population Monte Carlo, Cappe et al. 2004, on a tempering ladder): for
    each :math:`\beta` of ``betas`` (rising to 1), draw from the current proposal, weight by
    :math:`e^{-\beta U} / q`, resample by weight, and fit a Gaussian mixture of ``components`` (scikit-learn) whose
    components, as t densities with ``inflate``^2 x their covariances, make the next proposal, mixed with ``start``
    at ``defensive``. The flat posteriors of small :math:`\beta` reach the broad regions that no minimum marks (both
    units near-linear); each step narrows the proposal towards :math:`p`. The estimate uses fresh draws of the
    last proposal, so the adaptation biases nothing."""
    q, generator, rng = start, torch.Generator().manual_seed(seed), np.random.default_rng(seed)
    for r, beta in enumerate(betas):
        theta = q.sample(draws, generator)
        with torch.no_grad():
            log_w = (-beta * target.energy(theta) - q.log_density(theta)).numpy()
        w = np.exp(log_w - log_w.max())
        picked = theta.numpy()[rng.choice(draws, size=draws // 4, p=w / w.sum())]
        q = mixed(fitted_t(picked, components, inflate, start.df, seed + r), start, defensive)
    return q


def fitted_t(points: np.ndarray, components: int, inflate: float, df: int, seed: int) -> StudentMixture:
    """A Gaussian mixture of ``components`` fitted to ``points`` (scikit-learn, EM), as t densities with
    ``inflate``^2 x its covariances."""
    from sklearn.mixture import GaussianMixture

    fit = GaussianMixture(components, covariance_type="full", reg_covar=1e-6, random_state=seed).fit(points)
    return StudentMixture(torch.as_tensor(fit.means_), torch.linalg.cholesky(torch.as_tensor(inflate**2 * fit.covariances_)),
                          torch.as_tensor(fit.weights_), df)
