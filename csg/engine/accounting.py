"""The loop's bookkeeping for its chains: each one's training seconds (:class:`Clock`), its epoch sums written back
to its :class:`~csg.engine.checkpoint.LoopState` (:func:`sync`) and the NaN check of its loss (:func:`check_finite`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from torch import Tensor

from csg.engine.checkpoint import LoopState
from csg.errors import DivergenceError

__all__ = ["Clock", "check_finite", "sync"]


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
