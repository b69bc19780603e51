"""Which epochs yield posterior samples: the collection plan of a run, and the stages it is read from.

The rule (the authors' code, generalised): an epoch belongs to the cycle of
its last iteration; it is eligible when that iteration is in the sampling
stage; each cycle keeps its LAST ``samples_per_cycle`` eligible epochs, and a
sample is the model at the end of each of them. With 200 epochs, M = 4 cycles
and 3 samples per cycle this is the end of epochs 47, 48, 49 of every 50-epoch
cycle. A non-cyclical schedule is one cycle: its burn-in (``explore``) is the
exploration stage, so SGLD with 20 samples keeps the last 20 epochs and SGD
with 1 sample keeps the final model. Iterations past the last full cycle (the
``total_steps mod cycles`` remainder of :class:`csg.schedules.Cyclical`) never
yield samples. The sample files themselves are :mod:`csg.engine.samples`'.
"""

from __future__ import annotations

from dataclasses import dataclass

from csg.schedules import Schedule

__all__ = ["CollectionPoint", "capacity", "collection_points", "eligible_epochs", "first_sampling_iteration",
           "sampling_iterations"]


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
