r"""Distances between a sampler's draws and the target.

- **mode-weight error**: the total variation between the estimated and the true weights of the modes,
  :math:`\frac12\sum_k |\hat w_k - w_k|` (0: every mode has its mass; 1: all mass on wrong modes);
- **W2**: the 2-Wasserstein distance between two equally large uniform samples, exactly, by the optimal
  assignment (:func:`scipy.optimize.linear_sum_assignment`). Two exact samples of n draws are not at distance 0:
  W2 between two independent exact samples is the floor, reported beside it.
"""

from __future__ import annotations

import numpy as np


def mode_weight_error(estimated: np.ndarray, exact: np.ndarray) -> float:
    """(1/2) sum_k |estimated_k - exact_k|, the weights normalised first."""
    estimated, exact = np.asarray(estimated, dtype=np.float64), np.asarray(exact, dtype=np.float64)
    return float(0.5 * np.abs(estimated / estimated.sum() - exact / exact.sum()).sum())


def w2(x: np.ndarray, y: np.ndarray) -> float:
    """W2 between the uniform distributions on the rows of ``x`` and of ``y`` (as many rows each)."""
    from scipy.optimize import linear_sum_assignment
    from scipy.spatial.distance import cdist

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) != len(y):
        raise ValueError(f"W2 between equally large samples, got {len(x)} and {len(y)} draws")
    cost = cdist(x, y, "sqeuclidean")
    rows, cols = linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].mean()))
