"""Summaries of samples from a mixture: mode coverage and estimated component weights."""

from __future__ import annotations

import torch
from torch import Tensor


def mode_counts(samples: Tensor, centres: Tensor, radius: float) -> Tensor:
    """How many samples lie within ``radius`` of each centre (Euclidean): shape (centres,)."""
    return (torch.cdist(samples.to(centres), centres) < radius).sum(0)


def mode_coverage(samples: Tensor, centres: Tensor, radius: float = 0.25, min_samples: int = 100) -> int:
    """cSG-MCMC Appendix A.1: the number of modes with MORE than ``min_samples`` samples within ``radius``."""
    return int((mode_counts(samples, centres, radius) > min_samples).sum())


def component_weights(assignments: Tensor, components: int) -> Tensor:
    """The fraction of samples assigned to each component (assignments are component indices)."""
    counts = torch.bincount(assignments.flatten(), minlength=components).to(torch.float64)
    return counts / counts.sum()
