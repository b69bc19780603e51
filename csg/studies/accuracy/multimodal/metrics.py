r"""Distances between a sampler's (weighted) draws and a reference posterior.

- **mode-weight error**: the total variation between the estimated and the true weights of the modes,
  :math:`\frac12\sum_k |\hat w_k - w_k|` (0: every mode has its mass; 1: all mass on wrong modes). For a
  mixture :math:`\hat w_k` is the (weighted) mean of the responsibilities :math:`r_k(x)`, an unbiased estimate
  of :math:`w_k` from exact draws (:mod:`.targets`); for the network, the share of draws in mode k's region;
- **MMD** (Gretton et al. 2012) with the Gaussian kernel :math:`k(x, y) = \exp(-|x - y|^2 / (2\ell^2))`,
  :math:`\ell` the median distance between reference draws, from the unbiased estimate of
  :math:`\mathrm{MMD}^2 = E k(x, x') + E k(y, y') - 2 E k(x, y)` with sample weights (pairs i != j within a
  sample); reported as :math:`\sqrt{\max(\mathrm{MMD}^2, 0)}`;
- **W2**: the 2-Wasserstein distance between two equally large uniform samples, exactly, by the optimal
  assignment (:func:`scipy.optimize.linear_sum_assignment`); weighted draws are first resampled
  (systematic resampling). Two exact samples of n draws are not at distance 0: :func:`w2` of two independent
  exact samples is the floor, reported beside it;
- **predictive TV** (regression): the mean over test inputs of
  :math:`\frac12\int |p(y \mid x) - p^*(y \mid x)|\,dy`, each predictive the mixture
  :math:`\frac1S\sum_s N(y \mid f_s(x), s^2)` over the draws (a trapezoid rule on a fine grid of y).
"""

from __future__ import annotations

import numpy as np


def mode_weight_error(estimated: np.ndarray, exact: np.ndarray) -> float:
    """(1/2) sum_k |estimated_k - exact_k|, the weights normalised first."""
    estimated, exact = np.asarray(estimated, dtype=np.float64), np.asarray(exact, dtype=np.float64)
    return float(0.5 * np.abs(estimated / estimated.sum() - exact / exact.sum()).sum())


def _normalised(weights: np.ndarray | None, n: int) -> np.ndarray:
    w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=np.float64)
    return w / w.sum()


def median_bandwidth(reference: np.ndarray, limit: int = 1000) -> float:
    """The median distance between (up to ``limit``) reference draws."""
    from scipy.spatial.distance import pdist

    return float(np.median(pdist(np.asarray(reference)[:limit])))


def mmd(x: np.ndarray, y: np.ndarray, bandwidth: float, x_weights: np.ndarray | None = None) -> float:
    """sqrt(max(MMD^2, 0)) between draws ``x`` (weighted) and reference draws ``y``, unbiased within samples."""
    from scipy.spatial.distance import cdist

    def kernel(a, b):
        return np.exp(-cdist(a, b, "sqeuclidean") / (2 * bandwidth**2))

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    a, b = _normalised(x_weights, len(x)), _normalised(None, len(y))

    def within(z, w):
        k = kernel(z, z)
        return (w @ k @ w - (w**2 * np.diag(k)).sum()) / (1 - (w**2).sum())

    squared = within(x, a) + within(y, b) - 2 * a @ kernel(x, y) @ b
    return float(np.sqrt(max(squared, 0.0)))


def systematic_resample(weights: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n indices drawn by systematic resampling of ``weights``."""
    cumulative = np.cumsum(_normalised(weights, len(weights)))
    cumulative[-1] = 1.0
    return np.searchsorted(cumulative, (rng.random() + np.arange(n)) / n)


def w2(x: np.ndarray, y: np.ndarray, n: int, rng: np.random.Generator, x_weights: np.ndarray | None = None) -> float:
    """W2 between n draws of ``x`` (resampled by ``x_weights``, or a random subset) and n of ``y``."""
    from scipy.optimize import linear_sum_assignment
    from scipy.spatial.distance import cdist

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = min(n, len(y), len(x) if x_weights is None else n)
    xi = systematic_resample(x_weights, n, rng) if x_weights is not None else rng.choice(len(x), n, replace=False)
    yi = rng.choice(len(y), n, replace=False)
    cost = cdist(x[xi], y[yi], "sqeuclidean")
    rows, cols = linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].mean()))


def predictive_tv(fits: np.ndarray, reference_fits: np.ndarray, noise: float, weights: np.ndarray | None = None,
                  points: int = 400) -> float:
    """Mean over inputs of the TV between the predictives of ``fits`` and ``reference_fits`` ((draws, inputs))."""
    fits, reference_fits = np.asarray(fits, dtype=np.float64), np.asarray(reference_fits, dtype=np.float64)
    low = min(fits.min(), reference_fits.min()) - 5 * noise
    high = max(fits.max(), reference_fits.max()) + 5 * noise
    grid = np.linspace(low, high, points)

    def density(f, w):  # (inputs, points)
        z = (grid[None, None, :] - f[:, :, None]) / noise
        return np.einsum("s,sip->ip", w, np.exp(-0.5 * z**2)) / (noise * np.sqrt(2 * np.pi))

    gap = np.abs(density(fits, _normalised(weights, len(fits))) - density(reference_fits, _normalised(None, len(reference_fits))))
    return float(np.mean(0.5 * np.trapezoid(gap, grid, axis=1)))
