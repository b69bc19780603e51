"""Contour SGLD (CSGLD / ICSGLD) and replica exchange: the ICSGLD paper's samplers."""

from __future__ import annotations

import math

import pytest
import torch

from csg.samplers.contour import ContourSGHMC, ContourSGLD, EnergyPartition
from csg.samplers.replica import bias_correction, replica_exchange, swap_log_ratio


def test_interacting_chains_update_theta_with_their_averaged_random_field():
    partition = EnergyPartition(0.0, 1.0, 6, zeta=0.75, groups=1, sa_step=lambda k: 0.1)
    partition.theta.copy_(torch.tensor([[0.3, 0.25, 0.2, 0.15, 0.06, 0.04]], dtype=torch.float64))
    theta = partition.theta[0].clone()
    j = partition.index(torch.tensor([2.5, 0.2, 2.9]))  # partitions 2, 0, 2
    assert j.tolist() == [2, 0, 2]
    fields = [theta[k] * (torch.nn.functional.one_hot(torch.tensor(k), 6).double() - theta) for k in j.tolist()]
    partition.update(j)
    assert torch.allclose(partition.theta[0], theta + 0.1 * torch.stack(fields).mean(0))
    assert partition.theta.sum().item() == pytest.approx(1.0)
    # three independent groups (CSGLD chains side by side) each follow their own chain's field
    independent = EnergyPartition(0.0, 1.0, 6, zeta=0.75, groups=3, sa_step=lambda k: 0.1)
    independent.theta.copy_(theta.expand(3, 6))
    independent.update(j)
    for row, field in zip(independent.theta, fields):
        assert torch.allclose(row, theta + 0.1 * field)


def test_random_field_of_the_original_csgld_raises_theta_j_to_zeta():
    partition = EnergyPartition(0.0, 1.0, 3, zeta=0.75, field_exponent=0.75, sa_step=lambda k: 0.1)
    partition.theta.copy_(torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64))
    partition.update(torch.tensor([1]))
    expected = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64) + 0.1 * 0.3**0.75 * (
        torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64) - torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64))
    assert torch.allclose(partition.theta[0], expected)


def test_gradient_multiplier_and_importance_weights():
    partition = EnergyPartition(0.0, 0.5, 4, zeta=2.0)
    partition.theta.copy_(torch.tensor([[0.4, 0.3, 0.2, 0.1]], dtype=torch.float64))
    energy = torch.tensor([0.1, 0.7, 1.2, 5.0])  # partitions 0, 1, 2, and above the range
    expected = [1.0, 1 + 2.0 * 1.5 * math.log(0.3 / 0.4) / 0.5, 1 + 2.0 * 1.5 * math.log(0.2 / 0.3) / 0.5, 1.0]
    assert partition.multiplier_of(energy, temperature=1.5).tolist() == pytest.approx(expected)
    assert partition.importance_weights(partition.index(energy)).tolist() == pytest.approx([0.16, 0.09, 0.04, 0.01])


def test_contour_step_scales_the_sgld_gradient():
    partition = EnergyPartition(0.0, 1.0, 3, zeta=1.0, sa_step=lambda k: 0.0)
    partition.theta.copy_(torch.tensor([[0.5, 0.25, 0.25]], dtype=torch.float64))
    x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    # T = 1 sets the multiplier; N = 1e12 makes the noise (sd sqrt(2 lr T / N)) negligible
    sampler = ContourSGLD([x], lr=0.1, num_data=1e12, temperature=1.0, weight_decay=0.5, partition=partition)
    x.grad = torch.tensor([[0.2, -0.4]], dtype=torch.float64)
    sampler.step(energy=torch.tensor([1.5]))  # partition 1: multiplier 1 + log(0.25 / 0.5) / 1 = 0.3069
    multiplier = 1 + math.log(0.25 / 0.5)
    expected = torch.tensor([[1.0, 2.0]]) - 0.1 * multiplier * (torch.tensor([[0.2, -0.4]]) + 0.5 * torch.tensor([[1.0, 2.0]]))
    assert torch.allclose(x, expected.double(), atol=1e-5)


def _gaussian_contour(chains: int, steps: int, sampler_cls=ContourSGLD, partitions: int = 32, overflow: bool = False,
                      **kwargs):
    """Contour chains sharing one theta on a standard 2-D Gaussian (U = |x|^2 / 2, so U ~ Exponential(1)).

    Returns the partition, the importance-weighted mean of |x|^2 over the second half, and the
    fraction of that half spent in the lowest partition."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(chains, 2, generator=generator, dtype=torch.float64)
    partition = EnergyPartition(0.0, 0.25, partitions, zeta=1.0, groups=1, overflow=overflow,
                                sa_step=lambda k: min(1e-2, 3.0 / (k**0.6 + 100)))
    sampler = sampler_cls([x], lr=0.01, num_data=1, temperature=1.0, partition=partition, chains=chains,
                          generator=generator, **kwargs)
    weighted, total, lowest = 0.0, 0.0, 0
    with torch.no_grad():
        for k in range(steps):
            x.grad = x.clone()
            sampler.step(energy=x.pow(2).sum(1) / 2)
            if k >= steps // 2:
                w = partition.importance_weights(sampler.last_index)
                weighted, total = weighted + (w * x.pow(2).sum(1)).sum(), total + w.sum()
                lowest += int((sampler.last_index == 0).sum())
    return partition, float(weighted / total), lowest / (chains * (steps - steps // 2))


def test_theta_converges_to_the_energy_partition_masses():
    """With zeta = 1, theta(i) -> the target's mass of partition i: e^-a - e^-b for [a, b)."""
    partition, second_moment, lowest = _gaussian_contour(chains=200, steps=6000)
    edges = [0.25 * i for i in range(33)]
    masses = torch.tensor([math.exp(-edges[i]) - math.exp(-edges[i + 1]) for i in range(31)] + [math.exp(-7.75)],
                          dtype=torch.float64)
    theta = partition.theta[0]
    assert 0.5 * (theta - masses).abs().sum() < 0.08
    assert torch.allclose(theta[:10], masses[:10], rtol=0.2)
    assert second_moment == pytest.approx(2.0, rel=0.1)  # importance weights undo the flattening: E|x|^2 = 2
    assert lowest < 0.1  # the flattened chains leave the lowest partition (the target holds 0.22 there)


@pytest.mark.parametrize("exponent", ["icsgld", "csgld"])
def test_density_of_states_undoes_the_fixed_point_of_each_random_field(exponent):
    """Partitions drawn exactly from the flattened law theta_star(i) / theta(i)^zeta: ICSGLD's field (a = 1) leads
    theta to theta_star^(1/zeta), CSGLD's (a = zeta) to theta_star; both estimates of theta_star land on it."""
    zeta = 2.0
    a = 1.0 if exponent == "icsgld" else zeta
    star = torch.tensor([0.4, 0.25, 0.15, 0.1, 0.06, 0.04], dtype=torch.float64)
    omega = 0.005 if exponent == "icsgld" else 0.1  # CSGLD's field carries theta(J)^2 ~ 0.04: a larger step
    partition = EnergyPartition(0.0, 1.0, 6, zeta=zeta, field_exponent=a, sa_step=lambda k: omega)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3000):
        law = star / partition.theta[0].pow(zeta)
        partition.update(torch.multinomial(law / law.sum(), 50, replacement=True, generator=generator))
    fixed = star.pow(1 / (1 + zeta - a))
    assert 0.5 * (partition.theta[0] - fixed / fixed.sum()).abs().sum() < 0.02
    assert 0.5 * (partition.density_of_states()[0] - star).abs().sum() < 0.03
    other = star.pow(1 / zeta) if exponent == "csgld" else star  # the other field's fixed point is far from it
    assert 0.5 * (partition.theta[0] - other / other.sum()).abs().sum() > 0.05


def test_overflow_partition_stands_outside_the_flattening():
    partition = EnergyPartition(0.0, 1.0, 4, zeta=2.0, overflow=True, sa_step=lambda k: 0.1)
    partition.theta.copy_(torch.tensor([[0.4, 0.3, 0.2, 0.1]], dtype=torch.float64))
    theta = partition.theta[0].clone()
    energy = torch.tensor([1.5, 3.2, 9.0])  # partitions 1, then 3 (the overflow: from u0 + (m - 1) du = 3) twice
    j = partition.index(energy)
    assert partition.multiplier_of(energy, temperature=1.0).tolist() == pytest.approx([1 + 2.0 * math.log(0.3 / 0.4), 1, 1])
    assert partition.importance_weights(j).tolist() == pytest.approx([0.09, 0.0, 0.0])
    partition.update(j)  # the field of the one chain below the overflow, not a third of it
    field = theta[1] * (torch.nn.functional.one_hot(torch.tensor(1), 4).double() - theta)
    assert torch.allclose(partition.theta[0], theta + 0.1 * field)
    before = partition.theta.clone()
    partition.update(partition.index(torch.tensor([5.0, 7.0])))  # every chain in the overflow: theta stays
    assert torch.equal(partition.theta, before)


def test_theta_below_an_overflow_partition_converges_to_the_conditional_masses():
    """U ~ Exponential(1), partitions of 0.25 on [0, 2) and the overflow above: theta(i) -> the mass of partition
    i given U < 2, (e^-a - e^-b) / (1 - e^-2), and theta of the overflow partition decays."""
    partition, _, _ = _gaussian_contour(chains=100, steps=4000, partitions=9, overflow=True)
    edges = [0.25 * i for i in range(9)]
    masses = torch.tensor([math.exp(-edges[i]) - math.exp(-edges[i + 1]) for i in range(8)], dtype=torch.float64)
    theta = partition.theta[0]
    assert 0.5 * (theta[:8] - masses / (1 - math.exp(-2))).abs().sum() < 0.05
    assert theta[8] < 0.02


def test_contour_sghmc_runs_and_keeps_its_momentum_state():
    partition, _, _ = _gaussian_contour(chains=20, steps=200, sampler_cls=ContourSGHMC, momentum=0.9)
    assert partition.updates == 200 and partition.theta.sum().item() == pytest.approx(1.0)


def test_state_dict_carries_theta():
    partition = EnergyPartition(0.0, 1.0, 4, zeta=1.0)
    x = torch.zeros(1, 2, dtype=torch.float64)
    sampler = ContourSGLD([x], lr=0.1, num_data=1, partition=partition)
    x.grad = torch.ones_like(x)
    sampler.step(energy=torch.tensor([2.2]))
    state = sampler.state_dict()
    other = ContourSGLD([x.clone()], lr=0.1, num_data=1, partition=EnergyPartition(0.0, 1.0, 4, zeta=1.0))
    other.load_state_dict(state)
    assert torch.equal(other.partition.theta, partition.theta) and other.partition.updates == 1


def test_replica_swap_is_accepted_with_the_stated_probability():
    """Chains at T = 1 (energy 0.2) and T = 2 (energy 1.0): log S = (1 - 1/2)(0.2 - 1.0) - c."""
    repeats = 40_000
    generator = torch.Generator().manual_seed(0)
    positions = torch.tensor([[-1.0], [1.0]], dtype=torch.float64).expand(repeats, 2, 1).clone()
    energies = torch.tensor([0.2, 1.0], dtype=torch.float64).expand(repeats, 2).clone()
    for correction in (0.0, 0.1):
        p, e = positions.clone(), energies.clone()
        accepted = replica_exchange(p, e, [1.0, 2.0], correction=correction, generator=generator)[:, 0]
        expected = math.exp(0.5 * (0.2 - 1.0) - correction)
        assert accepted.double().mean().item() == pytest.approx(expected, abs=0.01)
        assert torch.equal(p[accepted, 0, 0], torch.ones(int(accepted.sum()), dtype=torch.float64))  # swapped
        assert torch.equal(p[~accepted, 0, 0], -torch.ones(int((~accepted).sum()), dtype=torch.float64))
    # a swap that lowers the cold chain's energy is always accepted
    assert swap_log_ratio(torch.tensor(1.0), torch.tensor(0.2), 1.0, 2.0).item() > 0
    assert bias_correction(1.0, 2.0, 0.0625) == pytest.approx(0.25 * 0.0625)


def test_simulation_metrics_on_exact_and_shifted_histograms():
    from studies.synthetic import icsgld_measures as sim
    from studies.targets import ICSGLDLandscape

    truth = sim.true_bin_masses(ICSGLDLandscape())
    assert truth.sum().item() == pytest.approx(1.0) and sim.kl_divergence(truth[None], truth).item() == pytest.approx(0.0)
    modes = sim.mode_masses(truth[None])[0]
    assert modes.sum().item() == pytest.approx(1.0, abs=1e-6) and modes.argmax().item() == 12  # the centre mode
    one_mode = torch.zeros_like(truth)
    one_mode[sim.bin_index(torch.tensor([[0.0, 0.0]]))[0]] = 1.0
    assert sim.kl_divergence(one_mode[None], truth).item() > 3.0  # all mass in one bin: far from the target


def test_simulation_runs_every_method_at_a_tiny_budget():
    from studies.synthetic.icsgld_simulation import METHODS, Protocol, run_simulation

    protocol = Protocol(warm_up_p5=20, warm_up_t5=100, thin=5, pilot_steps=300, pilot_warm_up=50, true_samples=2000)
    result = run_simulation(steps=200, repeats=2, checkpoints=4, protocol=protocol)
    assert list(result.final.method) == list(METHODS)
    assert result.final.kl.notna().all() and (result.final.hist_kl > 0).all()
    assert result.curves.groupby("method").gradient_evaluations.max().eq(1000).all()
    assert len(result.modes) == 25 * len(METHODS)
    samples = result.final.set_index("method").samples
    # every 5th iteration after the warm-up; reSGLD keeps its T = 1 chain only, cycSGLD its low-step-size part
    assert samples["SGLD x P5"] == 5 * 35 and samples["reSGLD x P5"] == 35  # k = 25, 30, ..., 195
    assert samples["CSGLD x T5"] == 179 > samples["cycSGLD x T5"]  # k = 105, ..., 995
    # each repeat's end: the means above are over these, and only the contour methods' samples have unequal weights
    repeats = result.repeats.set_index(["method", "repeat"])
    assert len(repeats) == 2 * len(METHODS)
    assert repeats.kl.groupby("method").mean().reindex(METHODS).tolist() == pytest.approx(result.final.kl.tolist())
    share = repeats.weight_ess.groupby("method").min()
    assert share[["SGLD x P5", "cycSGLD x T5", "reSGLD x P5"]].tolist() == pytest.approx([1.0] * 3)
    assert (share < 1 - 1e-9).sum() == 2
    from studies.synthetic.icsgld_simulation_report import repeat_lines
    table = "\n".join(repeat_lines(result.repeats))
    assert table.count("| ICSGLD x P5 |") == 1 and "corr(KL, share)" in table and "corr(KL, theta TV)" in table
    theta_tv = repeats.theta_tv.groupby("method")
    assert theta_tv.count()[["SGLD x P5", "cycSGLD x T5", "reSGLD x P5"]].tolist() == [0, 0, 0]  # no theta
    assert ((repeats.theta_tv.dropna() > 0) & (repeats.theta_tv.dropna() < 1)).sum() == 4
    assert "ICSGLD x P5's two worst repeats" in table


def test_exact_density_of_states_of_the_landscape():
    """Without energy noise, theta_star is the grid's mass per partition; with it, the mass moves between
    neighbouring partitions but the mean energy stays (the noise has mean 0)."""
    import math

    from csg.samplers.contour import EnergyPartition
    from studies.synthetic.icsgld_measures import DOMAIN, exact_density_of_states
    from studies.targets import ICSGLDLandscape

    partition = EnergyPartition(-5.0, 0.125, 100, zeta=0.75, multiplier_clip=(-math.inf, math.inf))
    clean = exact_density_of_states(ICSGLDLandscape(), partition, points=300)
    h = 2 * DOMAIN / 300
    axis = torch.linspace(-DOMAIN + h / 2, DOMAIN - h / 2, 300, dtype=torch.float64)
    u = ICSGLDLandscape().energy(torch.cartesian_prod(axis, axis))
    mass = torch.zeros(100, dtype=torch.float64).index_add_(0, partition.index(u), torch.exp(-u))
    assert torch.allclose(clean, mass / mass.sum(), atol=1e-12)
    noisy = exact_density_of_states(ICSGLDLandscape(energy_noise=0.25), partition, points=300)
    centres = -5.0 + 0.125 * (torch.arange(100, dtype=torch.float64) + 0.5)
    assert noisy.sum().item() == pytest.approx(1.0)
    assert (noisy * centres).sum().item() == pytest.approx((clean * centres).sum().item(), abs=0.01)
    assert 0.5 * (noisy - clean).abs().sum().item() > 0.02  # the noise (2 partitions wide) moves some mass


def test_knn_divergence_on_known_gaussians():
    """KL(N(0, I) || N(mu, I)) = |mu|^2 / 2 in 2-D; the k-NN estimate from 4000 draws of each is close to it."""
    from studies.synthetic.icsgld_measures import KNNDivergence

    g = torch.Generator().manual_seed(0)
    estimate = KNNDivergence(torch.randn(4000, 2, generator=g, dtype=torch.float64))
    assert abs(estimate(torch.randn(4000, 2, generator=g, dtype=torch.float64))) < 0.05
    shifted = torch.randn(4000, 2, generator=g, dtype=torch.float64) + torch.tensor([1.0, 0.5], dtype=torch.float64)
    assert estimate(shifted) == pytest.approx(0.625, abs=0.08)
    assert estimate(shifted, torch.ones(4000, dtype=torch.float64)) == pytest.approx(estimate(shifted))
    # importance weights: draws of N(0, 2 I) weighted by N(0, I) / N(0, 2 I) stand for N(0, I); unweighted they do not
    wide = torch.randn(8000, 2, generator=g, dtype=torch.float64) * math.sqrt(2.0)
    ratio = torch.exp(-wide.pow(2).sum(1) / 4)
    assert abs(estimate(wide, ratio)) < 0.1 and estimate(wide) > 0.15  # KL(N(0, I) || N(0, 2 I)) = 0.19


def test_exact_draws_recover_the_target():
    from studies.synthetic import icsgld_measures as sim
    from studies.targets import ICSGLDLandscape

    target = ICSGLDLandscape()
    draws = sim.exact_draws(target, 40_000, torch.Generator().manual_seed(1))
    assert draws.shape == (40_000, 2) and draws.abs().max() <= sim.DOMAIN
    histogram = torch.zeros(sim.BINS**2, dtype=torch.float64).index_add_(0, sim.bin_index(draws)[0],
                                                                          torch.ones(len(draws), dtype=torch.float64))
    square = torch.zeros(sim.BINS, sim.BINS, dtype=torch.float64)
    square[5:55, 5:55] = 1.0  # the bins of [-2.5, 2.5]^2
    true_modes = sim.mode_masses((sim.true_bin_masses(target) * square.flatten())[None])[0]
    assert 0.5 * (sim.mode_masses(histogram[None])[0] - true_modes).abs().sum() < 0.02


def test_resgld_correction_starts_at_25_and_follows_the_energy_noise():
    """The notebook's reSGLD: hat_var moves towards the variance of 10 noisy energies (0.25^2) every 100 steps,
    and while it is large the correction (1/T_j - 1/T_i)^2 hat_var blocks the swaps."""
    from studies.synthetic.icsgld_simulation import ENERGY_NOISE, _resgld_swaps
    from studies.targets import ICSGLDLandscape

    target, g = ICSGLDLandscape(grad_noise=0.25, energy_noise=ENERGY_NOISE), torch.Generator().manual_seed(0)
    xs = [torch.zeros(4000, 2, dtype=torch.float64), torch.full((4000, 2), 0.5, dtype=torch.float64)]
    hat_var = torch.full((4000,), 25.0, dtype=torch.float64)
    _resgld_swaps(xs, [1.0, 2.0], hat_var, 99, target, g)  # (k + 1) % 100 == 0: one update, omega = 3e-3
    assert torch.allclose(hat_var.mean(), torch.tensor(0.997 * 25 + 3e-3 * 0.0625 * 0.9, dtype=torch.float64), atol=1e-3)
    # the cold chain sits at U = -4, the hot one at U = 4.2: a swap needs exp(-0.5 * 8.2 - 0.25 * 25) ~ 3e-5
    assert (xs[0][:, 0] == 0.5).double().mean() < 1e-3
    hat_var.fill_(0.0)
    _resgld_swaps(xs, [0.01, 0.02], hat_var, 0, target, g)  # at T = 0.01 and 0.02 a swap downhill is always accepted
    assert (xs[0][:, 0] == 0.0).all() and (xs[1][:, 0] == 0.5).all()


def test_simulation_weights_each_contour_sample_by_the_partition_of_its_own_energy():
    """The sample a contour step yields is the point whose energy gave J (before the move), weighted by
    theta(J)^zeta; the moved point's J is only known at the next step (the simulation once paired them wrongly)."""
    from studies.synthetic.icsgld_simulation import contour_step

    generator = torch.Generator().manual_seed(0)
    x = torch.tensor([[0.3, -0.2], [1.1, 0.4]], dtype=torch.float64)
    start = x.clone()
    partition = EnergyPartition(-5.0, 0.125, 100, zeta=0.75)
    sampler = ContourSGLD([x], lr=3e-3, num_data=1, temperature=1.0, partition=partition, chains=2, generator=generator)
    x.grad = torch.ones_like(x)
    energy = torch.tensor([-3.0, 1.0], dtype=torch.float64)
    point, weight = contour_step(sampler, partition, x, energy)
    assert torch.equal(point, start) and not torch.equal(x, start)  # the sample is the point before the move
    j = partition.index(energy)
    assert torch.equal(weight, partition.theta[0, j] ** 0.75) and j.tolist() == [16, 48]


@pytest.mark.parametrize("difference", ["backward", "forward"])
def test_forward_difference_keeps_theta_off_an_unreachable_lowest_partition(difference):
    """ICSGLD Appendix D.5's target, 0.4 N(-6, 1) + 0.6 N(4, 1): no energy lies below 1.43, so partition 0
    (0.15 .. 1.15) is never visited. ContourSGLD, 10 chains sharing theta: with the backward difference
    theta collapses onto partition 1 (its theta^zeta -> 1; exact mass 0.69); with the forward one it does not."""
    import numpy as np

    from studies.synthetic import icsgld_variance as d5

    generator = torch.Generator().manual_seed(0)
    x = torch.zeros(10, 1, dtype=torch.float64)
    partition = EnergyPartition(d5.LOW, d5.WIDTH, d5.PARTITIONS, zeta=d5.ZETA, difference=difference,
                                sa_step=lambda k: 1.0 / (k**0.6 + 100.0))
    sampler = ContourSGLD([x], lr=d5.LR, num_data=1, temperature=d5.TEMPERATURE, partition=partition, chains=10,
                          generator=generator)
    for _ in range(3000):
        x.grad = torch.from_numpy(d5.grad(x.numpy())) + d5.GRAD_NOISE * torch.randn(x.shape, generator=generator,
                                                                                         dtype=x.dtype)
        sampler.step(energy=torch.from_numpy(d5.energy(x.numpy())).reshape(-1))
    first = d5.density_of_states(partition.theta.numpy())[0, 0]
    exact = d5.exact_density_of_states()[1:11]
    assert (first > 0.99) if difference == "backward" else (first < 0.9), (first, exact[0] / exact.sum())
    assert np.isfinite(x.numpy()).all()


def test_forward_multiplier_reads_the_partition_above():
    partition = EnergyPartition(0.0, 1.0, 4, zeta=2.0, difference="forward")
    partition.theta.copy_(torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64))
    m = partition.multiplier(torch.tensor([0, 2, 3]), temperature=0.5)
    expected = [1 + 2.0 * 0.5 * math.log(0.2 / 0.1), 1 + 2.0 * 0.5 * math.log(0.4 / 0.3), 1.0]  # J = m - 1: no partition above
    assert torch.allclose(m, torch.tensor(expected, dtype=torch.float64))
    with pytest.raises(ValueError, match="backward or forward"):
        EnergyPartition(0.0, 1.0, 4, zeta=1.0, difference="central")


def test_the_forward_difference_below_an_overflow_partition_never_reads_its_theta():
    """The overflow partition's theta is never updated (it decays as the others grow), so the last flattened
    partition's forward difference must not read it: its partition above is taken as itself (multiplier 1), or the
    chain is pushed into the overflow ever harder (the bug this guards against)."""
    partition = EnergyPartition(0.0, 1.0, 4, zeta=2.0, difference="forward", overflow=True)
    partition.theta.copy_(torch.tensor([[0.3, 0.3, 0.39, 0.01]], dtype=torch.float64))
    m = partition.multiplier(torch.tensor([1, 2]), temperature=0.5)
    assert m.tolist() == pytest.approx([1 + 2.0 * 0.5 * math.log(0.39 / 0.3), 1.0])


@pytest.mark.parametrize("difference", ["forward", "backward"])
def test_dynamics_weights_integrate_the_applied_multiplier(difference):
    """log w = (Phi(U) - U) / T with Phi' the multiplier as applied (clipped, 1 above the range): the closed form
    against a fine quadrature of multiplier_of, below, inside and above the partitioned range."""
    partition = EnergyPartition(1.0, 0.5, 6, zeta=3.0, difference=difference, multiplier_clip=(-2.0, 4.0))
    partition.theta.copy_(torch.tensor([[0.05, 0.3, 0.1, 0.35, 0.15, 0.05]], dtype=torch.float64))
    temperature = 0.7
    grid = torch.linspace(0.5, 5.0, 90_001, dtype=torch.float64)
    excess = partition.multiplier_of(grid, temperature) - 1.0
    integral = torch.cumulative_trapezoid(excess, grid)
    integral = torch.cat([integral.new_zeros(1), integral]) - integral[int(0.5 / (4.5 / 90_000))]   # zero at u_0 = 1
    energies = torch.tensor([0.7, 1.0, 1.3, 2.26, 3.9, 4.0, 4.6], dtype=torch.float64)
    at = ((energies - 0.5) / 4.5 * 90_000).round().long()
    expected = integral[at] / temperature
    assert (excess.min() == -3.0) and (excess.max() == 3.0)   # both clips are in use
    assert torch.allclose(partition.dynamics_log_weights(energies, temperature), expected, atol=1e-3)


def test_dynamics_weights_are_the_papers_where_nothing_is_clipped():
    """Unclipped, the forward multiplier integrates to zeta log theta: at partition J's lower edge
    log w = zeta (log theta(J) - log theta(0)), the paper's weight up to a constant."""
    partition = EnergyPartition(0.0, 1.0, 5, zeta=0.5, difference="forward", multiplier_clip=(-math.inf, math.inf))
    partition.theta.copy_(torch.tensor([[0.1, 0.3, 0.2, 0.25, 0.15]], dtype=torch.float64))
    edges = torch.arange(5, dtype=torch.float64)
    papers = partition.importance_weights(partition.index(edges)).log()
    assert torch.allclose(partition.dynamics_log_weights(edges, 2.0), papers - papers[0])


def test_dynamics_weights_recover_the_target_where_the_papers_do_not():
    """Langevin chains on U = x^2 / 2 (T = 1) with theta held at a zig-zag that clips the multiplier: the
    dynamics weights give E[x^2] = 1, the paper's theta(J)^zeta weights do not."""
    generator = torch.Generator().manual_seed(0)
    partition = EnergyPartition(0.0, 0.4, 12, zeta=1.0, difference="forward", multiplier_clip=(-1.0, 3.0))
    zigzag = torch.tensor([0.02, 0.1, 0.04, 0.15, 0.05, 0.12, 0.04, 0.1, 0.05, 0.13, 0.1, 0.1], dtype=torch.float64)
    partition.theta.copy_((zigzag / zigzag.sum()).reshape(1, -1))
    chains, steps, h = 4_000, 3_000, 2e-3
    x = torch.randn(chains, generator=generator, dtype=torch.float64)
    totals = {"dynamics": torch.zeros(2, dtype=torch.float64), "paper": torch.zeros(2, dtype=torch.float64)}
    for k in range(steps):
        energy = 0.5 * x**2
        m = partition.multiplier_of(energy, 1.0)
        if k >= steps // 3:
            for name, w in (("dynamics", partition.dynamics_log_weights(energy, 1.0).exp()),
                            ("paper", partition.importance_weights(partition.index(energy)))):
                totals[name] += torch.stack([(w * x**2).sum(), w.sum()])
        x = x - h * m * x + (2 * h) ** 0.5 * torch.randn(chains, generator=generator, dtype=torch.float64)
    dynamics, paper = (float(t[0] / t[1]) for t in totals.values())
    assert abs(dynamics - 1.0) < 0.05, dynamics
    assert abs(paper - 1.0) > 0.15, paper
