"""Analytic targets: energies and gradients against autograd and closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from csg.errors import ConfigError
from studies.targets import create_target, grid_means, list_targets


@pytest.mark.parametrize(
    "name, kwargs",
    [("mog25", {}), ("mog25_wang", {"unequal": True}), ("mixture1d", {"c": 0.1}), ("icsgld2d", {})],
)
def test_gradient_matches_autograd_of_the_energy(name, kwargs):
    target = create_target(name, **kwargs)
    x = (3 * torch.randn(64, target.dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)).requires_grad_()
    target.energy(x).sum().backward()
    assert torch.allclose(x.grad, target.grad(x.detach()), atol=1e-8)


def test_mixture_energy_is_minus_log_density():
    target = create_target("mixture1d", c=0.5)
    x = torch.tensor([[-5.0], [0.3], [5.0]], dtype=torch.float64)

    def normal(v, mean, sd):
        return math.exp(-0.5 * ((v - mean) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))

    expected = [-math.log(0.5 * normal(v, 5, 1) + 0.5 * normal(v, -5, 0.5)) for v in (-5.0, 0.3, 5.0)]
    assert torch.allclose(target.energy(x), torch.tensor(expected, dtype=torch.float64))
    assert target.component(x).tolist() == [1, 0, 0]  # 0.3 is far closer to N(5, 1) than to N(-5, 0.25)


def test_grids_and_variances():
    means = grid_means()
    assert means.shape == (25, 2) and means[24].tolist() == [4.0, 4.0] and means[0].tolist() == [-4.0, -4.0]
    assert torch.allclose(create_target("mog25").variances, torch.full((25,), 0.03, dtype=torch.float64))
    unequal = create_target("mog25_wang", unequal=True).variances
    assert unequal[0].item() == pytest.approx(0.2) and unequal[24].item() == pytest.approx(0.2 / 25)


def test_exact_draws_have_the_mixture_moments():
    target = create_target("mixture1d", c=1.0)
    x = target.sample(200_000, generator=torch.Generator().manual_seed(1))
    assert abs(x.mean().item()) < 0.05  # 0.5 * 5 + 0.5 * (-5)
    assert x.var().item() == pytest.approx(26.0, rel=0.02)  # 1 + 25


def test_noisy_gradient_and_energy_have_the_stated_noise():
    target = create_target("icsgld2d", grad_noise=0.25, energy_noise=0.25)
    x = torch.zeros(100_000, 2, dtype=torch.float64)
    g = torch.Generator().manual_seed(2)
    assert target.noisy_grad(x, g).std().item() == pytest.approx(0.25, rel=0.02)
    assert target.noisy_energy(x, g).std().item() == pytest.approx(0.25, rel=0.02)
    assert torch.allclose(target.noisy_energy(x, g).mean(), target.energy(x[:1]), atol=0.01)


def test_icsgld_landscape_has_25_modes_and_a_wall():
    target = create_target("icsgld2d")
    axis = torch.linspace(-2.5, 2.5, 501, dtype=torch.float64)
    xx, yy = torch.meshgrid(axis, axis, indexing="xy")
    u = target.energy(torch.stack([xx, yy], -1))
    # local minima on the grid over [-2.5, 2.5]^2: strictly below all 8 neighbours, one near each integer point
    n = u.shape[0]
    centre = u[1:-1, 1:-1]
    neighbours = torch.stack([u[1 + dy: n - 1 + dy, 1 + dx: n - 1 + dx]
                              for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx])
    minima = (centre < neighbours.min(0).values).nonzero()
    assert minima.shape[0] == 25
    locations = torch.stack([axis[1:-1][minima[:, 1]], axis[1:-1][minima[:, 0]]], -1)
    assert torch.allclose(locations, locations.round(), atol=0.05)
    outside = torch.tensor([[5.0, 0.0]], dtype=torch.float64)  # |x|^2 = 25 > 20: the wall adds 5
    assert target.energy(outside).item() == pytest.approx(0.2 * 25 - 2 * 2 + 5)
    xs, ys, p = target.grid_density(-5, 5, 101)
    assert p.sum().item() == pytest.approx(1.0)


def test_unknown_target():
    with pytest.raises(ConfigError, match="mog25"):
        create_target("banana")
    assert "icsgld2d" in list_targets()
