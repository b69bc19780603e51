"""Cyclical SWAG: moments of a cycle's snapshots, and draws from the fitted Gaussian."""

from __future__ import annotations

import torch

from csg.evaluation.swag import SWAGMoments, cyclical_swag


def _snapshots(n, seed=0, shift=0.0):
    generator = torch.Generator().manual_seed(seed)
    return [{"w": torch.randn(3, generator=generator) + shift, "bn.running_mean": torch.full((2,), float(i) + shift),
             "bn.num_batches_tracked": torch.tensor(i)} for i in range(n)]


def test_moments_are_the_snapshots_mean_and_variance():
    snaps = _snapshots(6)
    moments = SWAGMoments(rank=4, sampled=["w"])
    for s in snaps:
        moments.update(s)
    stacked = torch.stack([s["w"] for s in snaps]).double()
    assert torch.allclose(moments.mean["w"], stacked.mean(0))
    assert torch.allclose(moments.sq_mean["w"] - moments.mean["w"] ** 2, stacked.var(0, unbiased=False))
    assert len(moments.deviations) == 4  # only the last `rank` deviations are kept


def test_draws_follow_the_swag_covariance():
    snaps = _snapshots(5)
    moments = SWAGMoments(rank=5, sampled=["w"])
    for s in snaps:
        moments.update(s)
    generator = torch.Generator().manual_seed(1)
    draws = [moments.sample(generator, scale=0.5) for _ in range(20000)]
    w = torch.stack([d["w"] for d in draws]).double()
    deviations = torch.stack([d["w"] for d in moments.deviations])  # (K, 3)
    variance = moments.sq_mean["w"] - moments.mean["w"] ** 2
    expected = 0.5 * (torch.diag(variance) / 2 + deviations.T @ deviations / (2 * (len(deviations) - 1)))
    assert torch.allclose(w.mean(0), moments.mean["w"], atol=0.03)
    assert torch.allclose(torch.cov(w.T), expected, atol=0.05 * expected.abs().max())
    # buffers are not sampled: batch-norm statistics averaged, integer buffers from the last snapshot
    assert torch.equal(draws[0]["bn.running_mean"], torch.full((2,), 2.0)) and int(draws[0]["bn.num_batches_tracked"]) == 4
    assert draws[0]["w"].dtype == torch.float32


def test_cyclical_swag_fits_one_gaussian_per_cycle():
    pairs = [(0, s) for s in _snapshots(3)] + [(1, s) for s in _snapshots(3, seed=1, shift=100.0)]
    draws = list(cyclical_swag(pairs, draws_per_cycle=2, rank=3, generator=torch.Generator().manual_seed(0)))
    assert [cycle for cycle, _ in draws] == [0, 0, 1, 1]
    assert all(d["w"].abs().max() < 10 for c, d in draws if c == 0) and all(d["w"].min() > 90 for c, d in draws if c == 1)
