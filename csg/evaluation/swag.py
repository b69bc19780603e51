r"""SWA-Gaussian (Maddox et al. 2019) fitted to the snapshots of one cycle: the ICSGLD paper's cyclical SWAG.

From snapshots :math:`\theta_1..\theta_n` of a cycle (the model at the ends of its last epochs):

.. math::
    \bar\theta = \frac1n\sum_i \theta_i, \quad
    \Sigma_{\rm diag} = \frac1n\sum_i \theta_i^2 - \bar\theta^2, \quad
    D = [\theta_{n-K+1} - \bar\theta, \dots, \theta_n - \bar\theta],

and a draw is :math:`\bar\theta + \sqrt{s}\,\big(\tfrac{1}{\sqrt2}\Sigma_{\rm diag}^{1/2} z_1
+ \tfrac{1}{\sqrt{2(K-1)}} D z_2\big)`, :math:`z_1 \sim N(0, I_d)`, :math:`z_2 \sim N(0, I_K)`,
``scale`` :math:`s` (SWAG's evaluation default 0.5). The moments are accumulated one snapshot at a
time (:class:`SWAGMoments`), so memory holds the mean, the mean of squares and K deviations.
Floating-point buffers (batch-norm statistics) are averaged, not sampled; integer buffers are taken
from the last snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import Tensor


class SWAGMoments:
    """Running first and second moments and the last ``rank`` deviations of a sequence of state dicts."""

    def __init__(self, rank: int = 20, sampled: Iterable[str] | None = None):
        if rank < 2:
            raise ValueError(f"rank={rank}: SWAG's low-rank part needs at least 2 deviations")
        self.rank, self.count = rank, 0
        self.sampled = set(sampled) if sampled is not None else None
        self.mean: dict[str, Tensor] = {}
        self.sq_mean: dict[str, Tensor] = {}
        self.deviations: list[dict[str, Tensor]] = []
        self.last: dict[str, Tensor] = {}
        self.dtypes: dict[str, torch.dtype] = {}

    def _is_sampled(self, key: str, value: Tensor) -> bool:
        return torch.is_floating_point(value) and (self.sampled is None or key in self.sampled)

    def update(self, state_dict: dict[str, Tensor]) -> None:
        """Add one snapshot."""
        self.count += 1
        weight = 1.0 / self.count
        for key, value in state_dict.items():
            self.dtypes[key] = value.dtype
            value = value.detach().to(torch.float64) if torch.is_floating_point(value) else value.detach().clone()
            self.last[key] = value
            if not torch.is_floating_point(value):
                continue
            if key not in self.mean:
                self.mean[key], self.sq_mean[key] = value.clone(), value.pow(2)
            else:
                self.mean[key].mul_(1 - weight).add_(value, alpha=weight)
                self.sq_mean[key].mul_(1 - weight).add_(value.pow(2), alpha=weight)
        # the deviation from the running mean, as SWAG's online version stores it
        self.deviations.append({k: self.last[k] - self.mean[k] for k in self.mean if self._is_sampled(k, self.last[k])})
        self.deviations = self.deviations[-self.rank:]

    def sample(self, generator: torch.Generator | None = None, scale: float = 0.5) -> dict[str, Tensor]:
        """One draw from the fitted Gaussian, as a state dict (float32 where the snapshots were)."""
        if self.count < 2:
            raise ValueError("SWAG needs at least 2 snapshots")
        k = len(self.deviations)
        z2 = torch.randn(k, generator=generator, dtype=torch.float64)
        out = {}
        for key, last in self.last.items():
            if key not in self.mean:
                out[key] = last.clone()  # integer buffers: the last snapshot's
                continue
            mean = self.mean[key]
            if not self._is_sampled(key, last):
                out[key] = mean.to(self.dtypes[key])
                continue
            variance = (self.sq_mean[key] - mean.pow(2)).clamp_min(0)
            z1 = torch.randn(mean.shape, generator=generator, dtype=torch.float64)
            low_rank = sum(z * dev[key] for z, dev in zip(z2.tolist(), self.deviations)) / max(k - 1, 1) ** 0.5
            draw = mean + scale**0.5 * (variance.sqrt() * z1 / 2**0.5 + low_rank / 2**0.5)
            out[key] = draw.to(self.dtypes[key])
        return out


def cyclical_swag(snapshots: Iterable[tuple[int, dict[str, Tensor]]], draws_per_cycle: int, *, rank: int = 20,
                  scale: float = 0.5, generator: torch.Generator | None = None,
                  sampled: Iterable[str] | None = None) -> Iterator[tuple[int, dict[str, Tensor]]]:
    """(cycle, state dict) of ``draws_per_cycle`` SWAG draws per cycle, from (cycle, snapshot) pairs in order."""
    current, moments = None, None
    for cycle, state_dict in snapshots:
        if cycle != current:
            if moments is not None:
                yield from ((current, moments.sample(generator, scale)) for _ in range(draws_per_cycle))
            current, moments = cycle, SWAGMoments(rank, sampled)
        moments.update(state_dict)
    if moments is not None:
        yield from ((current, moments.sample(generator, scale)) for _ in range(draws_per_cycle))
