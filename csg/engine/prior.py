"""The Gaussian prior a run samples under: N(0, variance I) of every sampled weight, set as a variance (whatever the
number of training examples N is) or as the samplers' per-example weight decay wd (precision N wd)."""

from __future__ import annotations

from typing import Any

__all__ = ["prior_record", "weight_decay"]


def weight_decay(num_data: int, *, variance: float | None = None, decay: float = 0.0) -> float:
    """The samplers' weight decay wd: ``1 / (N variance)`` where ``variance`` is given, else ``decay``."""
    return 1.0 / (num_data * float(variance)) if variance is not None else float(decay)


def prior_record(num_data: int, *, variance: float | None = None, decay: float = 0.0) -> dict[str, Any]:
    """metrics.json's ``prior``: the variance and precision per weight, the weight decay and the key that set it."""
    wd = weight_decay(num_data, variance=variance, decay=decay)
    return {"variance": 1.0 / (num_data * wd) if wd > 0 else None, "precision": num_data * wd, "weight_decay": wd,
            "set_by": "prior.variance" if variance is not None else "sampler.weight_decay"}
