"""Effective sample size of a parameter trace (ArviZ), and the trace itself.

The trace is the flattened parameter vector after each kept iteration; the
ESS of every coordinate is ArviZ's ``ess(method="mean")``: the classic
autocorrelation-based ESS of the mean with Geyer's initial-sequence
truncation, the estimator the SG-MCMC literature's tables use.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn


class ParameterTrace:
    """An ``on_step`` callback that records the parameters after iteration k when k >= burnin and keep(k)."""

    def __init__(self, model: nn.Module, *, burnin: int, samples: int, keep: Callable[[int], bool] = lambda k: True):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.burnin, self.keep = burnin, keep
        self.buffer = torch.empty(samples, sum(p.numel() for p in self.params), dtype=torch.float64)
        self.count = 0

    def __call__(self, k: int) -> None:
        if k < self.burnin or self.count >= self.buffer.shape[0] or not self.keep(k):
            return
        with torch.no_grad():
            self.buffer[self.count] = torch.cat([p.detach().reshape(-1) for p in self.params]).to("cpu", torch.float64)
        self.count += 1

    @property
    def draws(self) -> torch.Tensor:
        """The recorded draws, shape (count, parameters)."""
        return self.buffer[: self.count]


def effective_sample_size(draws: np.ndarray) -> np.ndarray:
    """ESS of every column of ``draws`` (shape draws x coordinates), one chain: ArviZ's ``ess(method="mean")``,
    every column at once (:mod:`csg.evaluation.convergence`)."""
    from csg.evaluation.convergence import ess

    return ess(np.asarray(draws, dtype=np.float64)[None, :, :], "mean").reshape(-1)


def ess_summary(draws: np.ndarray, seconds: float, gradient_evaluations: int) -> dict[str, float]:
    """Median, minimum and maximum ESS over coordinates, and the median per second and per gradient evaluation."""
    ess = effective_sample_size(draws)
    median = float(np.median(ess))
    return {
        "draws": int(np.asarray(draws).shape[0]),
        "median": median,
        "min": float(ess.min()),
        "max": float(ess.max()),
        "median_per_second": median / seconds,
        "median_per_gradient_evaluation": median / gradient_evaluations,
    }
