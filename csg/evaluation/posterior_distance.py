r"""How far a sampler's draws are from a reference posterior (:mod:`studies.accuracy.reference`).

In parameter space (identified models only, e.g. logistic regression), from the draws' moments
(m, S) against the reference's (m*, S*), with s* = sqrt(diag S*):

- standardised error of the posterior mean, per coordinate: :math:`|m_i - m^*_i| / s^*_i`;
- ratio of posterior standard deviations, per coordinate: :math:`s_i / s^*_i`;
- the 2-Wasserstein distance between the Gaussians N(m, S) and N(m*, S*) (Dowson and Landau 1982):
  :math:`W_2^2 = \lVert m - m^*\rVert^2 + \operatorname{tr}\big(S + S^* - 2 (S^{*1/2} S S^{*1/2})^{1/2}\big)`.

In function space (any model; Izmailov et al. 2021, Section 6), from the predictive distributions
p(. | x) and p*(. | x) at the evaluation inputs:

- agreement: the share of inputs whose most probable class is the same under both;
- total variation: the mean over inputs of :math:`\tfrac12 \sum_c |p(c \mid x) - p^*(c \mid x)|`.

Every function takes NumPy arrays, torch tensors (on any device, with or without gradients) and nested lists
alike (:func:`as_array`), and computes in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["as_array", "gaussian_w2", "predictive_agreement", "predictive_total_variation", "sd_ratio",
           "standardised_mean_error", "two_class"]


def as_array(values: Any) -> np.ndarray:
    """``values`` as a float64 NumPy array: a torch tensor is detached and copied to the CPU first (NumPy cannot
    read one that needs gradients or lives on a GPU), an array or a list is converted as NumPy does."""
    if hasattr(values, "detach") and hasattr(values, "cpu"):  # a torch tensor, without importing torch here
        values = values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64)


def standardised_mean_error(draws: np.ndarray, reference_mean: np.ndarray, reference_sd: np.ndarray) -> np.ndarray:
    """``|mean(draws) - reference_mean| / reference_sd`` per coordinate; ``draws`` is (draws, coordinates)."""
    return np.abs(as_array(draws).mean(0) - as_array(reference_mean)) / as_array(reference_sd)


def sd_ratio(draws: np.ndarray, reference_sd: np.ndarray) -> np.ndarray:
    """sd(draws) / reference_sd per coordinate (1 is exact; below 1 under-disperses)."""
    return as_array(draws).std(0, ddof=1) / as_array(reference_sd)


def _sqrtm_psd(matrix: np.ndarray) -> np.ndarray:
    """The symmetric square root of a symmetric positive semi-definite matrix (negative round-off clipped)."""
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2)
    return (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T


def gaussian_w2(mean: np.ndarray, covariance: np.ndarray, reference_mean: np.ndarray,
                reference_covariance: np.ndarray) -> float:
    """The 2-Wasserstein distance between N(mean, covariance) and N(reference_mean, reference_covariance)."""
    mean, reference_mean = np.atleast_1d(as_array(mean)), np.atleast_1d(as_array(reference_mean))
    covariance = np.atleast_2d(as_array(covariance))
    reference_covariance = np.atleast_2d(as_array(reference_covariance))
    root = _sqrtm_psd(reference_covariance)
    cross = _sqrtm_psd(root @ covariance @ root)
    squared = np.sum((mean - reference_mean) ** 2) + np.trace(covariance + reference_covariance - 2 * cross)
    return float(np.sqrt(max(squared, 0.0)))


def predictive_agreement(probabilities: np.ndarray, reference: np.ndarray) -> float:
    """The share of rows of (inputs, classes) probability arrays whose arg-max class agrees."""
    return float(np.mean(np.argmax(as_array(probabilities), -1) == np.argmax(as_array(reference), -1)))


def predictive_total_variation(probabilities: np.ndarray, reference: np.ndarray) -> float:
    """The mean over rows of the total variation between two (inputs, classes) probability arrays."""
    return float(np.mean(0.5 * np.abs(as_array(probabilities) - as_array(reference)).sum(-1)))


def two_class(p1: np.ndarray) -> np.ndarray:
    """(inputs, 2) probabilities from p(y = 1 | x)."""
    p1 = as_array(p1)
    return np.stack([1.0 - p1, p1], axis=-1)
