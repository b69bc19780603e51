"""The acceptance rule of the multimodal network's reference (:mod:`studies.accuracy.multimodal.reference`):
its thresholds, how far a check lies from the reference (:func:`compare`) and whether the reference stands
(:func:`accepted`).
"""

from __future__ import annotations

import numpy as np

WEIGHT_SE_MAX = 0.02    # a reference's mode weights must be this precise
AGREEMENT = 0.02        # and its two estimates agree this closely (the study's equivalence margin)
KHAT_MAX = 0.7          # PSIS: above this Pareto k-hat importance weights are not trusted (Vehtari et al. 2024)
KHAT_LIMIT = 1.0        # below it the weights have a finite mean: an estimate consistent, if slow, as a check
CHECK_SE_MAX = 0.01     # the SMC check's s.e.: a difference of AGREEMENT would lie 2 s.e. out


def compare(reference: dict, check: dict) -> dict:
    """How far the check's mode weights lie from the reference's: the largest absolute difference, and each
    difference in their joint s.e. (z)."""
    gap = np.array(check["weights"]) - np.array(reference["weights"])
    joint = np.hypot(check["weights_se"], reference["weights_se"])
    return {"difference": float(np.abs(gap).max()), "z": (gap / joint).tolist()}


def accepted(shares: dict, check: dict) -> bool:
    """The module docstring's rule: the reference importance estimate (k-hat below :data:`KHAT_MAX`, the other's
    below :data:`KHAT_LIMIT`, the two within :data:`AGREEMENT`, every batch s.e. at most :data:`WEIGHT_SE_MAX`) and
    the SMC check (s.e. at most :data:`CHECK_SE_MAX`, within :data:`AGREEMENT` of the reference on every mode
    weight)."""
    chosen = shares[shares["reference"]]
    versus = compare(chosen, check)
    return bool(shares["difference"] <= AGREEMENT and shares["se_max"] <= WEIGHT_SE_MAX and chosen["khat"] < KHAT_MAX
                and shares["khat_max"] < KHAT_LIMIT and max(check["weights_se"]) <= CHECK_SE_MAX
                and versus["difference"] <= AGREEMENT)
