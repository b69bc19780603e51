"""SGLD and SGHMC: the stationary distribution on a Gaussian target, temperature, and the optimizer API."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from csg.samplers import SGHMC, SGLD, create_sampler

N = 100  # "training-set size" of the target
MU = torch.tensor([1.0, -2.0])
SIGMA = torch.tensor([[1.0, 0.8], [0.8, 1.0]])
PRECISION = torch.linalg.inv(SIGMA)
CHAINS = 4000


def mean_loss(theta: torch.Tensor) -> torch.Tensor:
    """U(theta) / N for U = (theta - mu)^T Sigma^-1 (theta - mu) / 2, summed over independent chains.

    The sampler then targets exp(-U / T) = N(mu, T * Sigma) for every chain (weight decay 0).
    """
    d = theta - MU
    return 0.5 * ((d @ PRECISION) * d).sum() / N


def run_chains(sampler_cls, *, lr, steps, temperature, seed, **kwargs):
    theta = torch.zeros(CHAINS, 2, requires_grad=True)
    generator = torch.Generator().manual_seed(seed)
    sampler = sampler_cls([theta], lr=lr, num_data=N, temperature=temperature, generator=generator, **kwargs)
    for _ in range(steps):
        sampler.zero_grad()
        mean_loss(theta).backward()
        sampler.step()
    return theta.detach()


def assert_matches_gaussian(samples, mean, cov, sigmas=4.0):
    """Sample mean and covariance within `sigmas` Monte Carlo standard errors of the target."""
    n = samples.shape[0]
    mean_se = torch.sqrt(torch.diag(cov) / n)
    assert torch.all((samples.mean(0) - mean).abs() < sigmas * mean_se), (samples.mean(0), mean)
    empirical = torch.cov(samples.T)
    # standard error of a Gaussian sample covariance entry: sqrt((S_ii S_jj + S_ij^2) / n)
    cov_se = torch.sqrt((torch.outer(torch.diag(cov), torch.diag(cov)) + cov**2) / n)
    assert torch.all((empirical - cov).abs() < sigmas * cov_se), (empirical, cov)


SETTINGS = {
    # lr = N * eta: eta = 2e-3 for SGLD, 2e-4 with momentum 0.9 for SGHMC; 6000 steps is more
    # than 6 relaxation times of the slowest direction. Discretisation bias is below 0.1%.
    "sgld": (SGLD, dict(lr=0.2, steps=6000)),
    "sghmc": (SGHMC, dict(lr=0.02, steps=6000, momentum=0.9)),
}


@pytest.mark.parametrize("name", SETTINGS)
def test_samples_correlated_gaussian_at_t1(name):
    cls, kwargs = SETTINGS[name]
    samples = run_chains(cls, temperature=1.0, seed=1, **kwargs)
    assert_matches_gaussian(samples, MU, SIGMA)


@pytest.mark.parametrize("name", SETTINGS)
def test_half_temperature_halves_covariance(name):
    cls, kwargs = SETTINGS[name]
    samples = run_chains(cls, temperature=0.5, seed=2, **kwargs)
    assert_matches_gaussian(samples, MU, 0.5 * SIGMA)
    ratio = torch.cov(samples.T).diagonal() / SIGMA.diagonal()
    assert torch.allclose(ratio, torch.full((2,), 0.5), atol=0.05)


@pytest.mark.parametrize("name", SETTINGS)
def test_zero_temperature_descends_to_mode_without_noise(name):
    cls, kwargs = SETTINGS[name]
    generator = torch.Generator().manual_seed(3)
    before = generator.get_state()
    theta = torch.full((4, 2), 5.0, requires_grad=True)
    sampler = cls([theta], lr=kwargs["lr"] * 10, num_data=N, temperature=0.0, generator=generator,
                  **{k: v for k, v in kwargs.items() if k == "momentum"})
    for _ in range(3000):
        sampler.zero_grad()
        mean_loss(theta).backward()
        sampler.step()
    assert torch.allclose(theta.detach(), MU.expand(4, 2), atol=1e-4)
    assert torch.equal(generator.get_state(), before), "temperature 0 must not draw noise"


def test_sgld_step_is_the_documented_update():
    torch.manual_seed(0)
    p = torch.randn(3, 4, requires_grad=True)
    p.grad = torch.randn(3, 4)
    lr, wd, temperature, n = 0.1, 0.01, 0.5, 50
    expected_noise = torch.randn(3, 4, generator=torch.Generator().manual_seed(7))
    expected = p.detach() - lr * (p.grad + wd * p.detach()) + math.sqrt(2 * lr * temperature / n) * expected_noise
    SGLD([p], lr=lr, num_data=n, temperature=temperature, weight_decay=wd,
         generator=torch.Generator().manual_seed(7)).step()
    assert torch.allclose(p.detach(), expected, atol=1e-6)


def test_sghmc_step_is_the_documented_update():
    torch.manual_seed(0)
    p = torch.randn(5, requires_grad=True)
    theta0 = p.detach().clone()
    lr, wd, m, temperature, n = 0.05, 0.02, 0.7, 2.0, 10
    sampler = SGHMC([p], lr=lr, num_data=n, temperature=temperature, momentum=m, weight_decay=wd,
                    generator=torch.Generator().manual_seed(11))
    noise = torch.Generator().manual_seed(11)
    v = torch.zeros(5)
    theta = theta0.clone()
    for _ in range(3):
        g = torch.sin(theta)  # any gradient; the same for both
        p.grad = g.clone()
        sampler.step()
        v = m * v - lr * (g + wd * theta) + math.sqrt(2 * lr * (1 - m) * temperature / n) * torch.randn(5, generator=noise)
        theta = theta + v
    assert torch.allclose(p.detach(), theta, atol=1e-6)
    assert torch.allclose(sampler.state[p]["momentum_buffer"], v, atol=1e-6)


def test_param_groups_have_their_own_hyperparameters():
    a = torch.zeros(1000, requires_grad=True)
    b = torch.zeros(1000, requires_grad=True)
    sampler = SGLD([{"params": [a]}, {"params": [b], "temperature": 0.0}], lr=0.1, num_data=1, temperature=1.0,
                   generator=torch.Generator().manual_seed(0))
    a.grad, b.grad = torch.zeros(1000), torch.zeros(1000)
    sampler.step()
    assert a.std() > 0.3  # noise sqrt(2 * 0.1) ~ 0.45
    assert torch.count_nonzero(b) == 0
    assert sampler.param_groups[1]["temperature"] == 0.0 and sampler.param_groups[0]["temperature"] == 1.0


def test_parameters_without_gradient_are_left_alone():
    a = torch.zeros(3, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    a.grad = torch.ones(3)
    SGHMC([a, b], lr=0.1, num_data=1, temperature=1.0).step()
    assert torch.equal(b.detach(), torch.ones(3))


def test_state_dict_round_trip_continues_the_same_chain():
    def make():
        p = torch.nn.Parameter(torch.linspace(-1, 1, 6))
        return p, SGHMC([p], lr=0.05, num_data=20, temperature=1.0, momentum=0.9,
                        generator=torch.Generator().manual_seed(5))

    def steps(p, sampler, count):
        for _ in range(count):
            p.grad = 2 * p.detach()
            sampler.step()

    p1, s1 = make()
    steps(p1, s1, 10)
    saved_param, saved_state = p1.detach().clone(), copy.deepcopy(s1.state_dict())
    steps(p1, s1, 10)

    p2, s2 = make()
    with torch.no_grad():
        p2.copy_(saved_param)
    s2.load_state_dict(saved_state)
    steps(p2, s2, 10)
    assert torch.equal(p1.detach(), p2.detach())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(lr=-0.1, num_data=10), "learning rate"),
        (dict(lr=0.1, num_data=0), "num_data"),
        (dict(lr=0.1, num_data=10, temperature=-1.0), "temperature"),
        (dict(lr=0.1, num_data=10, weight_decay=-1.0), "weight_decay"),
        (dict(lr=0.1, num_data=10, momentum=1.0), "momentum"),
    ],
)
def test_invalid_hyperparameters_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SGHMC([torch.zeros(1, requires_grad=True)], **kwargs)


def test_num_data_is_required():
    with pytest.raises(TypeError):
        SGLD([torch.zeros(1, requires_grad=True)], lr=0.1)


def test_create_sampler_picks_the_rule():
    params = [torch.zeros(1, requires_grad=True)]
    assert isinstance(create_sampler("sgld", params, lr=0.1, num_data=1), SGLD)
    sghmc = create_sampler("sghmc", params, lr=0.1, num_data=1, momentum=0.3)
    assert isinstance(sghmc, SGHMC) and sghmc.param_groups[0]["momentum"] == 0.3
    with pytest.raises(ValueError, match="unknown update rule"):
        create_sampler("adam", params, lr=0.1, num_data=1)


def test_psgld_samples_the_gaussian_with_a_slow_preconditioner():
    from csg.samplers import PSGLD

    # lr is on the preconditioned scale (G ~ 1 / sqrt(E g^2) ~ N here); alpha near 1 keeps G nearly constant,
    # where dropping Li et al.'s Gamma term is harmless
    samples = run_chains(PSGLD, lr=0.02, steps=6000, temperature=1.0, seed=1, alpha=0.999, eps=1e-5)
    assert_matches_gaussian(samples, MU, SIGMA)


def test_psgld_step_is_the_documented_update():
    from csg.samplers import PSGLD

    theta = torch.tensor([1.0, -2.0], requires_grad=True)
    sampler = PSGLD([theta], lr=0.1, num_data=1, temperature=0.0, weight_decay=0.5, alpha=0.9, eps=1e-3)
    theta.grad = torch.tensor([0.4, 0.2])
    sampler.step()
    v = 0.1 * torch.tensor([0.4, 0.2]) ** 2
    expected = torch.tensor([1.0, -2.0]) - 0.1 * (torch.tensor([0.4, 0.2]) + 0.5 * torch.tensor([1.0, -2.0])) / (1e-3 + v.sqrt())
    assert torch.allclose(theta.detach(), expected)
