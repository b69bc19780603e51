"""Step-size schedules: equation (1) of the paper, stages, the decreasing and constant baselines."""

from __future__ import annotations

import math

import pytest

from csg.schedules import Constant, Cyclical, Decreasing, StepDecay, create_schedule


def test_cyclical_matches_equation_1_at_chosen_iterations():
    # K = 1000 iterations, M = 4 cycles -> cycle length 250; alpha_0 = 0.5
    s = Cyclical(lr0=0.5, total_steps=1000, cycles=4, explore=0.8)
    assert s.cycle_length == 250
    assert s.lr(0) == pytest.approx(0.5)  # cos(0) + 1 = 2
    assert s.lr(125) == pytest.approx(0.25)  # cos(pi / 2) + 1 = 1
    assert s.lr(249) == pytest.approx(0.25 * (math.cos(math.pi * 249 / 250) + 1))
    assert s.lr(250) == pytest.approx(0.5)  # warm restart
    assert s.lr(250 + 50) == pytest.approx(0.25 * (math.cos(math.pi * 0.2) + 1))
    assert s(999) == s.lr(999)


def test_cyclical_cycles_and_stages():
    s = Cyclical(lr0=0.5, total_steps=1000, cycles=4, explore=0.8)
    assert [s.cycle(k) for k in (0, 249, 250, 499, 500, 999)] == [0, 0, 1, 1, 2, 3]
    # sampling once mod(k, 250) / 250 >= 0.8, i.e. mod(k, 250) >= 200
    assert [s.sampling(k) for k in (0, 199, 200, 249, 250, 449, 450, 999)] == [
        False, False, True, True, False, False, True, True,
    ]


def test_cyclical_uses_integer_cycle_length_like_the_authors_code():
    # 200 epochs x 782 batches, M = 4: 39100 iterations per cycle (50 epochs)
    s = Cyclical(lr0=0.5, total_steps=200 * 782, cycles=4, explore=0.94)
    assert s.cycle_length == 39100
    s = Cyclical(lr0=1.0, total_steps=10, cycles=3, explore=0.0)
    assert s.cycle_length == 3 and s.cycle(9) == 3  # the remainder starts a partial cycle


def test_cyclical_rejects_bad_arguments():
    with pytest.raises(ValueError):
        Cyclical(lr0=0.0, total_steps=10, cycles=2, explore=0.5)
    with pytest.raises(ValueError):
        Cyclical(lr0=0.1, total_steps=10, cycles=11, explore=0.5)
    with pytest.raises(ValueError):
        Cyclical(lr0=0.1, total_steps=10, cycles=2, explore=1.0)


def test_decreasing_is_polynomial_decay():
    s = Decreasing(a=2.0, b=3.0, gamma=0.55)
    assert s.lr(0) == pytest.approx(2.0 * 3.0**-0.55)
    assert s.lr(7) == pytest.approx(2.0 * 10.0**-0.55)
    assert s.cycle(123) == 0 and s.sampling(0)


def test_decreasing_from_endpoints_and_burn_in():
    s = Decreasing.from_endpoints(lr0=0.5, lr_final=0.01, total_steps=1001, gamma=0.55, explore=0.75)
    assert s.lr(0) == pytest.approx(0.5)
    assert s.lr(1000) == pytest.approx(0.01)
    assert all(s.lr(k) > s.lr(k + 1) for k in range(0, 1000, 50))
    # burn-in: the first ceil(0.75 * 1001) = 751 iterations explore
    assert not s.sampling(750) and s.sampling(751)


def test_constant_and_factory():
    s = Constant(0.1, total_steps=100, explore=0.5)
    assert s.lr(0) == s.lr(99) == 0.1
    assert not s.sampling(49) and s.sampling(50)
    assert isinstance(create_schedule("cyclical", lr0=0.1, total_steps=100, cycles=2, explore=0.5), Cyclical)
    assert isinstance(create_schedule("decreasing", lr0=0.1, lr_final=0.01, total_steps=100), Decreasing)
    assert isinstance(create_schedule("constant", lr0=0.1, total_steps=100), Constant)
    with pytest.raises(ValueError, match="unknown schedule"):
        create_schedule("exponential", lr0=0.1, total_steps=100)


def test_step_decay_falls_at_its_milestones():
    s = create_schedule("step", lr0=1.0, total_steps=100, milestones=(0.5, 0.75), factor=0.2, explore=0.6)
    assert isinstance(s, StepDecay)
    assert [s.lr(k) for k in (0, 49, 50, 74, 75, 99)] == pytest.approx([1.0, 1.0, 0.2, 0.2, 0.04, 0.04])
    assert not s.sampling(59) and s.sampling(60)
    with pytest.raises(ValueError):
        StepDecay(1.0, 100, (1.5,), 0.2)


def test_cyclical_can_hold_the_sampling_stage_step_size():
    held = Cyclical(1.0, total_steps=100, cycles=2, explore=0.8, hold_sampling_lr=True)
    plain = Cyclical(1.0, total_steps=100, cycles=2, explore=0.8)
    start = 0.5 * (math.cos(math.pi * 0.8) + 1)  # the step size where the sampling stage begins
    assert [held.lr(k) for k in range(40)] == [plain.lr(k) for k in range(40)]  # exploration unchanged
    assert all(held.lr(k) == pytest.approx(start) for k in range(40, 50)) and plain.lr(49) < start
    assert held.lr(50) == pytest.approx(1.0)  # the next cycle restarts


def test_the_sampling_stage_takes_its_own_step_whatever_beta():
    from csg.schedules import create_schedule

    for beta in (0.8, 0.5, 0.0):
        schedule = create_schedule("cyclical", lr0=0.1, total_steps=400, cycles=4, explore=beta, sampling_lr=0.3)
        steps = [schedule.lr(k) for k in range(400) if schedule.sampling(k)]
        assert steps and all(lr == pytest.approx(0.03) for lr in steps)
        held = [schedule.lr(k) for k in range(400) if not schedule.sampling(k)]
        assert held == [create_schedule("cyclical", lr0=0.1, total_steps=400, cycles=4, explore=beta).lr(k)
                        for k in range(400) if not schedule.sampling(k)]
    with pytest.raises(ValueError, match="sampling_lr must be in \\(0, 1\\]"):
        create_schedule("cyclical", lr0=0.1, total_steps=400, cycles=4, explore=0.8, sampling_lr=1.5)
