"""Weights of the samples in the Bayesian model average."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Sequence

import torch

log = logging.getLogger(__name__)


def equal_weights(num_samples: int) -> list[float]:
    """1/n for every sample: what the paper uses in practice (Section 5.2)."""
    return [1.0 / num_samples] * num_samples


def importance_weights(log_weights: Sequence[float]) -> list[float]:
    r"""Self-normalised importance weights :math:`w_i \propto e^{\ell_i}` from log weights :math:`\ell_i`
    (contour samplers: :math:`\ell_i = \kappa\log\theta(J_i)`, ICSGLD paper Section 3); a sample with
    :math:`\ell_i = -\infty` gets weight 0. All :math:`-\infty`: equal weights, with a warning."""
    values = torch.tensor(list(log_weights), dtype=torch.float64)
    if not torch.isfinite(values).any():
        log.warning("every sample has importance weight 0: equal weights instead")
        return equal_weights(len(values))
    return torch.softmax(values, 0).tolist()


def harmonic_mean_weights(log_likelihoods: Sequence[float], cycles: Sequence[int]) -> list[float]:
    r"""Per-sample weights from the cycle weights of the paper's Appendix F, equation (33).

    Cycle m holds samples :math:`\theta^{(m)}_1..\theta^{(m)}_{K_m}`; its weight is the
    harmonic-mean estimate of its marginal likelihood,

    .. math::
        \hat w_m = \Big[\frac{1}{K_m}\sum_{j} \frac{1}{p(\mathcal D\mid\theta^{(m)}_j)}\Big]^{-1},

    normalised over cycles, and each sample of cycle m gets :math:`\hat w_m / K_m`, so
    the prediction is :math:`\sum_m \hat w_m \hat f_m`. ``log_likelihoods`` are
    :math:`\log p(\mathcal D\mid\theta)` over the whole training set; the estimate is
    formed in log space. With log-likelihoods that differ by more than a few
    nats, nearly all weight goes to one cycle: that is the estimator, not a bug.
    """
    if len(log_likelihoods) != len(cycles) or not cycles:
        raise ValueError("need one log-likelihood per sample and at least one sample")
    members: dict[int, list[int]] = defaultdict(list)
    for index, cycle in enumerate(cycles):
        members[cycle].append(index)
    ll = torch.tensor(list(log_likelihoods), dtype=torch.float64)
    order = sorted(members)
    log_w = torch.stack(
        [-(torch.logsumexp(-ll[members[m]], 0) - math.log(len(members[m]))) for m in order]
    )
    cycle_w = torch.softmax(log_w, 0)
    weights = [0.0] * len(cycles)
    for m, w in zip(order, cycle_w.tolist()):
        for index in members[m]:
            weights[index] = w / len(members[m])
    return weights
