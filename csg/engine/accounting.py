"""The loop's bookkeeping for its chains: each one's training seconds (:class:`Clock`), its epoch sums written back
to its :class:`~csg.engine.checkpoint.LoopState` (:func:`sync`), the NaN check of its loss (:func:`check_finite`)
and the check that a warm restart did not throw it out of the region its earlier cycles found
(:func:`check_restart`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from torch import Tensor

from csg.engine.checkpoint import LoopState
from csg.errors import DivergenceError

__all__ = ["Clock", "RESTART_NATS", "check_finite", "check_restart", "sync"]

RESTART_NATS = 2.0  # a cycle's exploration ending this far above the best earlier one: the restart diverged


def check_finite(loss_sums: list[float], epoch: int, epochs: int, iteration: int, lr: float,
                 states: Sequence[LoopState], lanes: Sequence) -> None:
    """A :class:`~csg.errors.DivergenceError` naming the chain, epoch, iteration and step size when a chain's loss
    sum is NaN or infinite (the samples already written are kept, and said so)."""
    for loss_sum, state, lane in zip(loss_sums, states, lanes):
        if not math.isfinite(loss_sum):
            which = f"chain {lane.chain + 1}: " if len(lanes) > 1 else ""
            if state.samples:
                where = f" in {lane.store.directory}" if lane.store is not None else ""
                kept = f"the {len(state.samples)} samples already written{where} are kept"
            else:
                kept = "no sample had been written yet"
            raise DivergenceError(
                f"{which}training loss became {loss_sum} in epoch {epoch + 1}/{epochs} (by iteration {iteration}, "
                f"lr={lr:.4g}); stopped; {kept}; a smaller sampler.lr0 (or, diverging at a warm restart after a long "
                "sampling stage, a lower sampler.temperature) may help",
                loss=loss_sum, epoch=epoch + 1, iteration=iteration, lr=lr, chain=lane.chain,
            )


def check_restart(rows: Sequence[dict], lr0: float, samples: int, chain: int | None = None) -> None:
    """A :class:`~csg.errors.DivergenceError` at the first sampling epoch of a cycle whose exploration ended with a
    mean training loss more than :data:`RESTART_NATS` above the best exploration end of the earlier cycles: the warm
    restart threw the chain out (a catapult that did not recover), and none of this cycle's samples is taken.
    ``rows``: the chain's epochs so far (cycle, stage, train_loss), the current one last."""
    if len(rows) < 2 or rows[-1]["stage"] != "sampling" or rows[-2]["stage"] != "exploration":
        return
    ends: dict[int, float] = {}
    for row, after in zip(rows, rows[1:]):  # each cycle's last exploration epoch
        if row["stage"] == "exploration" and after["stage"] == "sampling":
            ends[row["cycle"]] = row["train_loss"]
    cycle, end = rows[-2]["cycle"], rows[-2]["train_loss"]
    earlier = {c: loss for c, loss in ends.items() if c < cycle}
    if not earlier:
        return
    best = min(earlier, key=earlier.get)
    if end - earlier[best] > RESTART_NATS:
        which = f"chain {chain + 1}: " if chain is not None else ""
        kept = f"the {samples} samples of the earlier cycles are kept" if samples else "no sample had been written"
        raise DivergenceError(
            f"{which}the warm restart of cycle {cycle + 1} diverged: its exploration ended at a training loss of "
            f"{end:.4g}, {end - earlier[best]:.3g} nats per example above cycle {best + 1}'s {earlier[best]:.4g}; "
            f"stopped before its samples; {kept}; a smaller sampler.lr0 (now {lr0:.4g}) keeps the restarts stable",
            loss=end, epoch=len(rows) - 1, lr=lr0, chain=chain)


class Clock:
    """Each chain's training seconds: what it had when the loop started plus its share of the loop's wall time."""

    def __init__(self, seconds: list[float]):
        self.before, self.started = seconds, time.perf_counter()

    def shares(self) -> list[float]:
        """Each chain's seconds so far."""
        share = (time.perf_counter() - self.started) / len(self.before)
        return [before + share for before in self.before]


def sync(states: Sequence[LoopState], epoch: int, batch: int, k: int, loss_sum: Tensor, correct: Tensor,
         clock: Clock) -> None:
    """Write the loop's position and each chain's epoch sums and seconds into its state."""
    for state, loss, hits, seconds in zip(states, loss_sum.tolist(), correct.tolist(), clock.shares()):
        state.epoch, state.batch, state.iteration = epoch, batch, k
        state.loss_sum, state.correct = loss, hits if isinstance(hits, float) else int(hits)
        state.seconds = seconds
