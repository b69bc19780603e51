"""Does the chain sample? The sampler's temperatures and its stages' motion (csg.evaluation.monitor), where the truth is
known: Gaussian targets and Bayesian linear regression at stationarity read T; a chain started at the mode reads
far from it; the end-of-run line (csg.evaluation.sampling_check) fires on the cold chain and not on the sampled one."""

from __future__ import annotations

import math

import pytest
import torch

from csg import Chain
from csg.evaluation.monitor import SamplerReading, SamplingMonitor
from csg.evaluation.sampling_check import sampling_check
from csg.samplers import SGHMC, SGLD
from csg.schedules import Constant, Cyclical

D, N, SIGMA, DECAY = 1000, 100, 0.5, 0.01
PRECISION = 1.0 / SIGMA ** 2 + N * DECAY  # U = |theta|^2 / (2 sigma^2) + N wd |theta|^2 / 2


def _gaussian_loss(theta: torch.Tensor) -> torch.Tensor:
    """The mean loss whose U = N x loss + the prior is a Gaussian of precision PRECISION (per coordinate)."""
    return 0.5 * (theta ** 2).sum() / (N * SIGMA ** 2)


def _steps(sampler, theta: torch.Tensor, count: int) -> None:
    """``count`` steps of ``sampler`` on the Gaussian's loss."""
    for _ in range(count):
        sampler.zero_grad()
        _gaussian_loss(theta).backward()
        sampler.step()


def _sampler(kind: str, theta, lr: float, temperature: float):
    generator = torch.Generator().manual_seed(1)
    if kind == "sgld":
        return SGLD([theta], lr=lr, num_data=N, temperature=temperature, weight_decay=DECAY, generator=generator)
    momentum = {"sghmc": 0.9, "sghmc_authors": 0.1}[kind]
    return SGHMC([theta], lr=lr, num_data=N, temperature=temperature, weight_decay=DECAY, momentum=momentum,
                 generator=generator)


@pytest.mark.parametrize("kind, lr", [("sgld", 5e-3), ("sghmc", 5e-4), ("sghmc_authors", 5e-3)])
def test_a_chain_at_stationarity_on_a_gaussian_reads_its_temperature(kind, lr):
    torch.manual_seed(0)
    temperature = 0.5
    theta = torch.nn.Parameter(torch.randn(D) * math.sqrt(temperature / PRECISION))  # a draw of the target
    sampler = _sampler(kind, theta, lr, temperature)
    _steps(sampler, theta, 1500)  # the velocity's burn-in (SGHMC starts it at 0)
    monitor = SamplingMonitor(sampler)
    _steps(sampler, theta, 1500)
    reading = monitor.reading()
    assert reading.steps == 1500 and reading.target == pytest.approx(temperature)
    assert reading.configurational == pytest.approx(temperature, rel=0.08)
    if kind == "sgld":
        assert reading.kinetic is None
    else:
        assert reading.kinetic == pytest.approx(temperature, rel=0.03)
    # one open stage: its diffusion is sum_k 2 lr T / (N (1 - m)), its scale the tempered prior's sd
    stage = reading.stages[0]
    momentum = {"sgld": 0.0, "sghmc": 0.9, "sghmc_authors": 0.1}[kind]
    assert stage.diffusion == pytest.approx(math.sqrt(1500 * 2 * lr * temperature / (N * (1 - momentum))))
    assert stage.scale == pytest.approx(math.sqrt(temperature / (N * DECAY))) and stage.scale_from == "prior"
    assert stage.relaxation == pytest.approx((stage.diffusion / stage.scale) ** 2)
    assert 0 < stage.displacement < 3 * math.sqrt(temperature / PRECISION)
    # the temperatures are not flagged; a stage shorter than the prior's diffusion time is (1500 steps, about 0.3)
    line = sampling_check(reading.to_dict(), None)
    assert "temperature" not in line and f"a sampling stage takes {stage.relaxation:.2g} of the steps" in line


@pytest.mark.parametrize("kind, lr", [("sgld", 5e-3), ("sghmc", 5e-4)])
def test_a_chain_started_cold_at_the_mode_reads_far_below_its_temperature_and_the_line_says_so(kind, lr):
    theta = torch.nn.Parameter(torch.zeros(D))  # the mode, where a noise-free exploration stage leaves a chain
    sampler = _sampler(kind, theta, lr, 0.5)
    monitor = SamplingMonitor(sampler)
    _steps(sampler, theta, 20)
    reading = monitor.reading()
    assert reading.configurational < 0.1 * 0.5
    line = sampling_check(reading.to_dict(), None)
    assert line.startswith("does the chain sample? not as run: configurational temperature")
    assert "sampler.explore" in line and "a sampling stage takes" in line


def test_bayesian_linear_regression_on_mini_batches_reads_its_temperature():
    """U = N x mean squared error / 2 + the prior: SGLD on batches of 50 of 1000 examples, from a posterior draw."""
    torch.manual_seed(0)
    n, features, temperature, decay = 1000, 100, 1.0, 1e-3
    x = torch.randn(n, features)
    y = x @ (0.05 * torch.randn(features)) + torch.randn(n)  # weights near 0: see the estimator's noise (module)
    precision = x.T @ x + n * decay * torch.eye(features)  # the posterior's, at T = 1 (unit noise variance)
    mean = torch.linalg.solve(precision, x.T @ y)
    covariance = temperature * torch.linalg.inv(precision)
    weight = torch.nn.Parameter(torch.distributions.MultivariateNormal(mean, covariance).sample())
    sampler = SGLD([weight], lr=2e-3, num_data=n, temperature=temperature, weight_decay=decay,
                   generator=torch.Generator().manual_seed(2))
    monitor = SamplingMonitor(sampler)
    order = torch.Generator().manual_seed(3)
    for _ in range(300):
        for batch in torch.randperm(n, generator=order).split(50):
            sampler.zero_grad()
            (0.5 * (x[batch] @ weight - y[batch]).pow(2).mean()).backward()
            sampler.step()
    reading = monitor.reading()
    assert reading.steps == 300 * 20
    # one step's estimate spreads as a chi-square over d (sd 0.14 in 100 dimensions); 6000 correlated steps average it
    assert reading.configurational == pytest.approx(temperature, rel=0.15)


def test_the_noise_free_stages_are_not_measured_and_each_sampling_stage_is_one_stage():
    """Through csg.Chain: a cyclical schedule of 2 cycles, half exploration: 2 stages of 10 sampling steps each,
    the readings only from steps at T > 0; measured every 2nd step, the motion still counts every step."""
    torch.manual_seed(0)
    theta = torch.nn.Parameter(torch.randn(D) * 0.1)
    sampler = _sampler("sghmc", theta, 1e-3, 0.5)
    schedule = Cyclical(lr0=1e-3, total_steps=40, cycles=2, explore=0.5)
    chain = Chain(sampler, schedule, epochs=4, batches_per_epoch=10, temperature=0.5, monitor=2)
    for _ in range(4):
        for _ in range(10):
            chain.begin_step()
            sampler.zero_grad()
            _gaussian_loss(theta).backward()
            sampler.step()
            chain.end_step()
        chain.end_epoch(torch.nn.Linear(1, 1))
    reading = chain.diagnostics()
    assert [stage.steps for stage in reading.stages] == [10, 10]
    assert reading.groups[0].steps == 20 and reading.target == pytest.approx(0.5)
    assert SamplerReading.from_dict(reading.to_dict()).to_dict() == reading.to_dict()
    assert "configurational temperature" in str(reading) and "kinetic" in str(reading)


def test_an_optimizer_without_noise_and_a_bad_setting_are_said_plainly():
    theta = torch.nn.Parameter(torch.ones(3))
    sgd = torch.optim.SGD([theta], lr=0.1)  # no num_data, no temperature: nothing to read
    monitor = SamplingMonitor(sgd)
    sgd.zero_grad()
    theta.sum().backward()
    sgd.step()
    assert str(monitor.reading()) == "temperatures not measured: no sampling step was taken (T > 0)"
    with pytest.raises(ValueError, match="every: an integer >= 1"):
        SamplingMonitor(sgd, every=0)
    with pytest.raises(ValueError, match="monitor: True, False or an integer"):
        Chain(sgd, Constant(0.1, total_steps=10), epochs=1, batches_per_epoch=10, temperature=0.0,
              monitor=-1)
    monitor.close()
    assert Chain(sgd, Constant(0.1, total_steps=10), epochs=1, batches_per_epoch=10, temperature=0.0,
                 monitor=False).diagnostics() is None
