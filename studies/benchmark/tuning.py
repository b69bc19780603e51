"""The contenders' step, tuned the same way for every method, on digits no method is scored on.

The posterior benchmark trains on 100 digits per class of the shipped MNIST subset and scores on its 1000 test
digits; the other 300 training digits per class (:func:`csg.data.mnist.mnist5k_heldout`) are a validation set that
neither sees. Each contender's ``sampler.lr0`` is chosen per budget by :func:`search`: on a grid of
:data:`STEP_FACTORS` x the preset's recipe step, the mean validation NLL of its ensemble over :data:`TUNING_SEEDS`
(a run that diverges scores infinity), starting at the recipe's step and walking towards the better neighbour until
the best step has both neighbours run and scoring no better (*bracketed*), or lies at the grid's end (``edge``:
the search could not bracket it, and the report must say so). What a user can do without a reference: the
reference's distance is never used to tune.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["STEP_FACTORS", "Search", "TUNING_SEEDS", "search", "validation_batches", "validation_nll"]

# x the recipe's lr0: 1/16 .. 256 (the first full run's grid ended at 16, the best step in 7 of its 33 cells)
STEP_FACTORS = tuple(2.0**k for k in range(-4, 9))
TUNING_SEEDS = (0, 1)


@dataclass
class Search:
    """The outcome of :func:`search`: the chosen grid index, every score run (index -> score) and whether the
    choice is bracketed."""

    best: int
    scores: dict[int, float] = field(default_factory=dict)
    bracketed: bool = False

    @property
    def edge(self) -> bool:
        return not self.bracketed


def search(objective: Callable[[int], float], size: int, start: int) -> Search:
    """Walk a grid of ``size`` points from ``start`` towards lower ``objective`` (NaN counts as infinity) until the
    best point's neighbours are both run and no better, or the best is at an end of the grid."""
    if not 0 <= start < size:
        raise ValueError(f"start {start} outside a grid of {size}")
    scores: dict[int, float] = {}

    def score(index: int) -> float:
        if index not in scores:
            value = float(objective(index))
            scores[index] = value if math.isfinite(value) else math.inf
        return scores[index]

    best = start
    while True:
        score(best)
        for neighbour in (best - 1, best + 1):
            if 0 <= neighbour < size:
                score(neighbour)
        lowest = min(scores, key=lambda i: (scores[i], i))
        if lowest == best:
            bracketed = 0 < best < size - 1 and math.isfinite(scores[best])
            return Search(best, dict(sorted(scores.items())), bracketed)
        best = lowest


def validation_batches(test_per_class: int = 100, train_per_class: int = 100, batch_size: int = 1000) -> list:
    """The held-out digits as ``(x, y)`` batches, normalised as the run's loaders normalise MNIST."""
    import torch

    from csg.data.mnist import mnist5k_heldout, mnist_normalize

    images, labels = mnist5k_heldout(test_per_class, train_per_class)
    x, y = mnist_normalize()(torch.from_numpy(images)), torch.from_numpy(labels.astype("int64"))
    return [(x[i: i + batch_size], y[i: i + batch_size]) for i in range(0, len(y), batch_size)]


def validation_nll(name: str, budget_epochs: int, temperature: float, lr0: float, runs: Path,
                   seeds: Sequence[int] = TUNING_SEEDS, batches: list | None = None,
                   extra: tuple[str, ...] = ()) -> float:
    """The mean over ``seeds`` of contender ``name``'s ensemble NLL on the held-out digits at ``lr0``; infinity
    where a run diverges (csg stops it with a :class:`~csg.errors.DivergenceError`)."""
    from csg.errors import DivergenceError
    import csg
    from studies.benchmark.contenders import overrides

    batches = batches if batches is not None else validation_batches()
    values = []
    for seed in seeds:
        run_dir = runs / f"{name.replace(' ', '_')}_{budget_epochs}_lr{lr0:g}_seed{seed}"
        try:
            posterior = csg.train(overrides(name, budget_epochs, seed, temperature, lr0=lr0, run_dir=run_dir,
                                        extra=("ood=none", *extra)))
        except DivergenceError:  # a non-finite loss: the worst score (a refused command still raises)
            return math.inf
        values.append(posterior.evaluate(loader=batches, ood_loader=False)["nll"])
    return sum(values) / len(values)
