"""Step-size schedules and the exploration / sampling stages, per iteration k = 0, 1, 2, ...

Every schedule answers three questions about iteration ``k``:

- ``lr(k)``: the step size;
- ``cycle(k)``: which cycle k belongs to (always 0 for a non-cyclical schedule);
- ``sampling(k)``: whether k is in a sampling stage (noise on, samples may be
  collected) rather than an exploration stage (temperature 0, optimisation).

:class:`Cyclical` is equation (1) of Zhang et al. (ICLR 2020) with its
exploration proportion beta (``explore``). :class:`Decreasing` is the
polynomial decay a (b + k)^-gamma of Welling & Teh (2011) that the paper's
baselines use, and :class:`Constant` a fixed step. The two non-cyclical
schedules can also hold a burn-in: with ``total_steps`` and ``explore`` the
first ``ceil(explore * total_steps)`` iterations are exploration, as in the
paper's SGLD/SGHMC baselines (no noise for the first 150 of 200 epochs).

Which epochs yield posterior samples (:func:`collection_points`, :func:`eligible_epochs`): an epoch belongs to
the cycle of its last iteration; it is eligible when that iteration is in the sampling stage; each cycle keeps
its LAST ``samples_per_cycle`` eligible epochs, and a sample is the model at the end of each of them (the
authors' code, generalised). With 200 epochs, M = 4 cycles and 3 samples per cycle this is the end of epochs
47, 48, 49 of every 50-epoch cycle. A non-cyclical schedule is one cycle: its burn-in (``explore``) is the
exploration stage, so SGLD with 20 samples keeps the last 20 epochs and SGD with 1 sample keeps the final
model. Iterations past the last full cycle (the ``total_steps mod cycles`` remainder of :class:`Cyclical`)
never yield samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CollectionPoint", "Constant", "Cyclical", "DECREASING_GAMMA", "Decreasing", "HOLD_SAMPLING_LR", "SCHEDULES",
           "SCHEDULE_OPTIONS", "STEP_FACTOR",
           "STEP_MILESTONES", "Schedule", "StepDecay", "capacity", "collection_points", "create_schedule",
           "eligible_epochs", "first_sampling_iteration", "sampling_iterations", "schedule_for"]


class Schedule:
    """Base class: a step size per iteration, one cycle, and an optional burn-in."""

    cycles: int = 1

    def __init__(self, *, total_steps: int | None = None, explore: float = 0.0):
        if not 0.0 <= explore < 1.0:
            raise ValueError(f"explore must be in [0, 1), got {explore}")
        if explore > 0.0 and total_steps is None:
            raise ValueError("explore > 0 needs total_steps")
        self.total_steps = total_steps
        self.explore = explore

    def lr(self, k: int) -> float:
        """The step size of iteration k."""
        raise NotImplementedError

    def __call__(self, k: int) -> float:
        return self.lr(k)

    def cycle(self, k: int) -> int:
        """The cycle that iteration k belongs to."""
        return 0

    def sampling(self, k: int) -> bool:
        """True when iteration k is in the sampling stage."""
        if self.explore == 0.0:
            return True
        return k >= math.ceil(self.explore * self.total_steps)

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={value!r}" for key, value in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Cyclical(Schedule):
    r"""Cyclical cosine step size, equation (1) of the cSG-MCMC paper, per iteration.

    .. math::
        \alpha_k = \frac{\alpha_0}{2}\left[\cos\left(\frac{\pi\,\mathrm{mod}(k, C)}{C}\right) + 1\right],
        \qquad C = \lfloor K / M \rfloor,

    with k counted from 0 (the paper counts from 1 and writes mod(k - 1, .)),
    K = ``total_steps`` and M = ``cycles``. The paper writes ceil(K / M); the
    authors' code uses the integer division, as here, and the two agree when M
    divides K. If it does not, the last ``K mod M`` iterations start an extra,
    partial cycle (index M) exactly as in the authors' CIFAR code; with
    ``exact_length=True`` the cycle length is the real number K / M instead, as
    in the authors' 25-Gaussian MATLAB code (50000 / 30).

    The proportion of the current cycle r(k) = mod(k, C) / C decides the stage
    (Section 3.1): exploration while r(k) < beta (``explore``), sampling once
    r(k) >= beta.
    """

    def __init__(self, lr0: float, total_steps: int, cycles: int, explore: float, *, exact_length: bool = False,
                 hold_sampling_lr: bool = False, sampling_lr: float | None = None):
        if lr0 <= 0:
            raise ValueError(f"lr0 must be > 0, got {lr0}")
        if sampling_lr is not None and not 0 < sampling_lr <= 1:
            raise ValueError(f"sampling_lr must be in (0, 1] (a fraction of lr0), got {sampling_lr}")
        if cycles < 1 or total_steps < cycles:
            raise ValueError(f"need 1 <= cycles <= total_steps, got cycles={cycles}, total_steps={total_steps}")
        super().__init__(total_steps=total_steps, explore=explore)
        self.lr0 = lr0
        self.cycles = cycles
        self.cycle_length = total_steps / cycles if exact_length else total_steps // cycles
        self.hold_sampling_lr = hold_sampling_lr
        self.sampling_lr = sampling_lr

    def proportion(self, k: int) -> float:
        """r(k): the completed proportion of the current cycle, in [0, 1)."""
        return (k % self.cycle_length) / self.cycle_length

    def lr(self, k: int) -> float:
        """Eq. (1); with ``hold_sampling_lr`` the sampling stage keeps the step size of its start (cyclical SWAG);
        with ``sampling_lr`` it takes ``sampling_lr x lr0`` throughout, whatever beta."""
        r = self.proportion(k)
        if self.sampling_lr is not None and r >= self.explore:
            return self.lr0 * self.sampling_lr
        if self.hold_sampling_lr and r >= self.explore:
            r = self.explore
        return self.lr0 / 2.0 * (math.cos(math.pi * r) + 1.0)

    def cycle(self, k: int) -> int:
        return int(k // self.cycle_length)

    def sampling(self, k: int) -> bool:
        return self.proportion(k) >= self.explore


class Decreasing(Schedule):
    r"""Polynomially decreasing step size :math:`\alpha_k = a (b + k)^{-\gamma}` (Welling & Teh 2011).

    With ``hold`` = h the step size stays at :math:`a b^{-\gamma}` for the first h
    iterations and then decays as :math:`a (b + k - h)^{-\gamma}` (the authors'
    25-Gaussian SGLD: 0.043 for 500 steps, then 0.043 (t - 500)^-0.55).

    Assumption 1 of the paper (sum alpha = inf, sum alpha^2 < inf) holds for
    gamma in (0.5, 1]. :meth:`from_endpoints` picks a and b from the first and
    last step sizes of a run.
    """

    def __init__(
        self, a: float, b: float, gamma: float, *, hold: int = 0, total_steps: int | None = None, explore: float = 0.0
    ):
        if a <= 0 or b <= 0 or gamma < 0 or hold < 0:
            raise ValueError(f"need a > 0, b > 0, gamma >= 0, hold >= 0, got a={a}, b={b}, gamma={gamma}, hold={hold}")
        super().__init__(total_steps=total_steps, explore=explore)
        self.a, self.b, self.gamma, self.hold = a, b, gamma, hold

    @classmethod
    def from_endpoints(
        cls, lr0: float, lr_final: float, total_steps: int, gamma: float, explore: float = 0.0
    ) -> "Decreasing":
        """The schedule with lr(0) = lr0 and lr(total_steps - 1) = lr_final."""
        if not 0 < lr_final < lr0:
            raise ValueError(f"need 0 < lr_final < lr0, got lr0={lr0}, lr_final={lr_final}")
        if gamma <= 0 or total_steps < 2:
            raise ValueError(f"need gamma > 0 and total_steps >= 2, got gamma={gamma}, total_steps={total_steps}")
        b = (total_steps - 1) / ((lr0 / lr_final) ** (1.0 / gamma) - 1.0)
        return cls(lr0 * b**gamma, b, gamma, total_steps=total_steps, explore=explore)

    def lr(self, k: int) -> float:
        return self.a * (self.b + max(k - self.hold, 0)) ** (-self.gamma)


class Constant(Schedule):
    """A fixed step size."""

    def __init__(self, lr: float, *, total_steps: int | None = None, explore: float = 0.0):
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        super().__init__(total_steps=total_steps, explore=explore)
        self.value = lr

    def lr(self, k: int) -> float:
        return self.value


class StepDecay(Schedule):
    r"""Piecewise-constant step size: :math:`\alpha_k = \alpha_0\,\gamma^{\#\{m : k \ge m K\}}`.

    ``milestones`` are fractions of ``total_steps`` K (the ICSGLD paper's CIFAR runs: lr x 0.2 at
    epochs 250 and 375 of 500, i.e. milestones (0.5, 0.75), factor 0.2); the first ``explore``
    fraction is burn-in, as for :class:`Constant`.
    """

    def __init__(self, lr0: float, total_steps: int, milestones: tuple[float, ...], factor: float, *,
                 explore: float = 0.0):
        if lr0 <= 0 or factor <= 0 or any(not 0.0 < m < 1.0 for m in milestones):
            raise ValueError(f"need lr0 > 0, factor > 0 and milestones in (0, 1), got {lr0}, {factor}, {milestones}")
        super().__init__(total_steps=total_steps, explore=explore)
        self.lr0, self.factor = lr0, factor
        self.milestones = tuple(sorted(math.ceil(m * total_steps) for m in milestones))

    def lr(self, k: int) -> float:
        return self.lr0 * self.factor ** sum(k >= m for m in self.milestones)


SCHEDULES = ("cyclical", "decreasing", "constant", "step")

# The defaults of a run's schedule, here alone: a config without the key gets them (csg.engine.build passes
# only the keys a config has, and checks the step values with the same ones).
DECREASING_GAMMA = 0.55  # sampler.gamma: the exponent of Decreasing (Welling & Teh's 0.55)
STEP_MILESTONES = (0.5, 0.75)  # sampler.lr_milestones: StepDecay's, as fractions of the run
STEP_FACTOR = 0.2  # sampler.lr_factor: StepDecay's factor at each milestone
HOLD_SAMPLING_LR = False  # sampler.hold_sampling_lr: Cyclical's sampling stage follows eq. (1)


def create_schedule(
    kind: str,
    *,
    lr0: float,
    total_steps: int,
    cycles: int = 1,
    explore: float = 0.0,
    lr_final: float | None = None,
    gamma: float = DECREASING_GAMMA,
    hold_sampling_lr: bool = HOLD_SAMPLING_LR,
    sampling_lr: float | None = None,
    milestones: tuple[float, ...] = STEP_MILESTONES,
    factor: float = STEP_FACTOR,
) -> Schedule:
    """The schedule of a run of ``total_steps`` iterations.

    - ``cyclical``: :class:`Cyclical` (lr0, cycles, explore = beta; ``hold_sampling_lr``: constant
      step size in the sampling stage; ``sampling_lr``: that step as a fraction of lr0, whatever beta);
    - ``decreasing``: :class:`Decreasing` from lr0 down to ``lr_final`` at the last
      iteration, exponent ``gamma``; the first ``explore`` fraction is burn-in;
    - ``constant``: :class:`Constant` lr0; the first ``explore`` fraction is burn-in;
    - ``step``: :class:`StepDecay` lr0 x ``factor`` at each of ``milestones`` (fractions of the run).
    """
    if kind == "cyclical":
        return Cyclical(lr0, total_steps, cycles, explore, hold_sampling_lr=hold_sampling_lr, sampling_lr=sampling_lr)
    if kind == "decreasing":
        if lr_final is None:
            raise ValueError("the decreasing schedule needs lr_final")
        return Decreasing.from_endpoints(lr0, lr_final, total_steps, gamma, explore)
    if kind == "constant":
        return Constant(lr0, total_steps=total_steps, explore=explore)
    if kind == "step":
        return StepDecay(lr0, total_steps, tuple(milestones), factor, explore=explore)
    raise ValueError(f"unknown schedule {kind!r}; one of {', '.join(SCHEDULES)}")



# a config's sampler keys -> create_schedule's keywords, each converted; a key it lacks takes the schedule's default
_OPTIONS = {"lr_final": ("lr_final", lambda v: v), "gamma": ("gamma", lambda v: v),
            "hold_sampling_lr": ("hold_sampling_lr", bool), "lr_milestones": ("milestones", tuple),
            "sampling_lr": ("sampling_lr", lambda v: None if v is None else float(v)), "lr_factor": ("factor", float)}
SCHEDULE_OPTIONS = tuple(_OPTIONS)  # the optional sampler keys schedule_for reads, beside schedule, lr0, cycles, explore


def schedule_for(sampler, total_steps: int) -> Schedule:
    """The schedule a run's ``sampler`` settings name (a mapping with the keys of a ``sampler:`` config section:
    ``schedule``, ``lr0``, ``cycles``, ``explore``, and where given ``lr_final``, ``gamma``, ``hold_sampling_lr``,
    ``lr_milestones``, ``sampling_lr``, ``lr_factor``) over ``total_steps`` iterations."""
    options = {keyword: convert(sampler[key]) for key, (keyword, convert) in _OPTIONS.items() if key in sampler}
    return create_schedule(sampler["schedule"], lr0=sampler["lr0"], total_steps=total_steps,
                           cycles=sampler["cycles"], explore=sampler["explore"], **options)

@dataclass(frozen=True)
class CollectionPoint:
    """A sample is taken at the end of ``epoch`` (0-based), which ends at ``iteration``."""

    epoch: int
    cycle: int
    iteration: int


def _first_true(predicate, lo: int, hi: int) -> int:
    """The smallest k in [lo, hi) with ``predicate(k)``, for a predicate false then true on [lo, hi); else hi.

    A galloping search from ``lo``: about 2 log2(answer - lo) calls, so a walk over many short stretches
    costs about their number."""
    if lo >= hi or predicate(lo):
        return lo
    below, step = lo, 1  # predicate(below) is false
    while below + step < hi and not predicate(below + step):
        below, step = below + step, step * 2
    above = min(below + step, hi)  # predicate(above) is true, or above == hi
    lo, hi = below + 1, above
    while lo < hi:
        middle = (lo + hi) // 2
        if predicate(middle):
            hi = middle
        else:
            lo = middle + 1
    return lo


def eligible_epochs(schedule: Schedule, epochs: int, batches_per_epoch: int) -> dict[int, range]:
    """For each cycle 0..cycles-1, the epochs whose last iteration is in its sampling stage (a range).

    Computed per cycle, not per epoch (a search on the schedule's ``cycle`` and ``sampling``, which are
    monotone within a run and within a cycle): a plan of 10^9 epochs costs as little as one of 10^2."""
    def last(epoch: int) -> int:
        return (epoch + 1) * batches_per_epoch - 1

    by_cycle: dict[int, range] = {}
    start = 0
    for cycle in range(schedule.cycles):
        # epochs [start, end) end in this cycle (none where a cycle is shorter than an epoch)
        end = _first_true(lambda e: schedule.cycle(last(e)) > cycle, start, epochs)
        first = _first_true(lambda e: schedule.sampling(last(e)), start, end)
        by_cycle[cycle] = range(first, end)
        start = end
    return by_cycle


def collection_points(
    schedule: Schedule, epochs: int, batches_per_epoch: int, samples_per_cycle: int
) -> list[CollectionPoint]:
    """The epochs at whose end a sample is saved, in order.

    Raises ``ValueError`` when some cycle's sampling stage holds fewer than
    ``samples_per_cycle`` epoch ends; :func:`capacity` says how many fit.
    """
    by_cycle = eligible_epochs(schedule, epochs, batches_per_epoch)
    fits = capacity(by_cycle)
    if samples_per_cycle > fits:
        raise ValueError(f"samples_per_cycle={samples_per_cycle} exceeds the {fits} epoch ends per cycle available")
    return [CollectionPoint(epoch, cycle, (epoch + 1) * batches_per_epoch - 1)
            for cycle, eligible in by_cycle.items() for epoch in eligible[len(eligible) - samples_per_cycle:]]


def capacity(by_cycle: dict[int, range]) -> int:
    """The largest samples_per_cycle that every cycle can hold (``by_cycle``: :func:`eligible_epochs`)."""
    return min(len(epochs) for epochs in by_cycle.values())


def sampling_iterations(schedule: Schedule, start: int, stop: int) -> int:
    """How many iterations k in [start, stop) are in a sampling stage, counted per cycle (not per iteration)."""
    count = 0
    while start < stop:
        cycle = schedule.cycle(start)
        end = _first_true(lambda k: schedule.cycle(k) > cycle, start, stop)
        count += end - _first_true(schedule.sampling, start, end)
        start = end
    return count


def first_sampling_iteration(schedule: Schedule, stop: int) -> int:
    """The first iteration below ``stop`` in a sampling stage (0 if none), found per cycle."""
    start = 0
    while start < stop:
        cycle = schedule.cycle(start)
        end = _first_true(lambda k: schedule.cycle(k) > cycle, start, stop)
        first = _first_true(schedule.sampling, start, end)
        if first < end:
            return first
        start = end
    return 0
