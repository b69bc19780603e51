r"""The ceiling that a cycle count sets: the mode-weight error of M perfect, independent mode picks.

A cyclical chain whose every cycle lands in one mode and stays there estimates the mode weights by the shares
of its M cycles (x4: all chains' cycles, M = B / C either way); a constant-step chain that never leaves the mode
it started in is one pick (x4: four). Even if every pick were drawn from the exact weights w, the estimate
:math:`\hat w = X / M`, :math:`X \sim \mathrm{Multinomial}(M, w)`, is off by

.. math::
    E\left[\tfrac12 \sum_k |\hat w_k - w_k|\right] = \tfrac12 \sum_k E\,|X_k / M - w_k|,
    \qquad X_k \sim \mathrm{Binomial}(M, w_k),

which linearity of expectation makes exact for any number of modes: :func:`ceiling` sums each binomial's mean
absolute deviation (:func:`binomial_mad`, exact). No method whose chains are trapped between picks can do
better on average: only crossings within a cycle (or a chain) take the error below it.
"""

from __future__ import annotations

import numpy as np


def binomial_mad(picks: int, p: float) -> float:
    """E|X / M - p| for X ~ Binomial(M, p), exactly (the sum over the binomial's mass)."""
    from scipy import stats

    if picks < 1:
        raise ValueError(f"picks must be >= 1, got {picks}")
    x = np.arange(picks + 1)
    return float((stats.binom.pmf(x, picks, p) * np.abs(x / picks - p)).sum())


def ceiling(weights, picks: int) -> float:
    """The expected mode-weight error (total variation) of ``picks`` independent draws of a mode from ``weights``."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    return 0.5 * sum(binomial_mad(picks, p) for p in w)


def simulated_ceiling(weights, picks: int, repeats: int, rng: np.random.Generator) -> tuple[float, float]:
    """The same by simulation, with its standard error: the check of :func:`ceiling` (tests)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    counts = rng.multinomial(picks, w, size=repeats)
    errors = 0.5 * np.abs(counts / picks - w).sum(1)
    return float(errors.mean()), float(errors.std(ddof=1) / np.sqrt(repeats))
