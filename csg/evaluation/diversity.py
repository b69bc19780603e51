r"""Whether an ensemble of posterior samples is more than its best member: the members' differences, and the gain.

A sampler earns its cost when its samples are distinct models whose average predicts better than any one of
them. For members with predictive probabilities :math:`p_i(\cdot \mid x)` on a test set of :math:`n` inputs,

- the mean total variation between members :math:`i` and :math:`j` is
  :math:`\mathrm{TV}_{ij} = \frac1n \sum_x \frac12 \sum_c |p_i(c \mid x) - p_j(c \mid x)|` (0: the same
  predictions; 1: disjoint ones); :func:`pairwise_total_variation`;
- :func:`ensemble_gain` sets the model average's NLL and error beside its best member's NLL and its members'
  mean error, with the smallest :math:`\mathrm{TV}_{ij}` (the two most alike members).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@torch.no_grad()
def member_probabilities(posterior, loader: Iterable) -> Tensor:
    """Every member's predictive probabilities on ``loader``'s inputs: float32 ``(members, examples, classes)``.

    ``posterior`` is a :class:`csg.Posterior`; ``loader`` yields ``(x, y)`` batches in a fixed order. The
    memory is ``members x examples x classes`` floats: meant for test sets of thousands, not ImageNet."""
    batches = [batch[0] if isinstance(batch, (tuple, list)) else batch for batch in loader]
    members = []
    for model, _ in posterior:
        members.append(torch.cat([posterior._probs(model, x.to(posterior.device)).cpu() for x in batches]))
    return torch.stack(members)


def pairwise_total_variation(probs: Tensor) -> Tensor:
    r"""The ``(members, members)`` matrix of :math:`\mathrm{TV}_{ij}` (see the module) of ``probs``
    ``(members, examples, classes)``."""
    members = probs.shape[0]
    distances = torch.zeros(members, members, dtype=torch.float64)
    for i, j in itertools.combinations(range(members), 2):
        distances[i, j] = distances[j, i] = 0.5 * (probs[i].double() - probs[j].double()).abs().sum(1).mean()
    return distances


@dataclass(frozen=True)
class EnsembleGain:
    """The model average beside its members (errors in %, NLL in nats per example)."""

    members: int
    ensemble_nll: float
    best_member_nll: float
    ensemble_error_pct: float
    mean_member_error_pct: float
    min_pairwise_tv: float
    closest_pair: tuple[str, str]

    @property
    def nll_ratio(self) -> float:
        """The ensemble's NLL over its best member's (below 1: the average predicts better than any member)."""
        return self.ensemble_nll / self.best_member_nll

    def checks(self, nll_ratio: float = 0.95, min_tv: float = 1e-3) -> dict[str, bool]:
        """The three tests of a sampling ensemble: NLL at most ``nll_ratio`` x the best member's, error at most
        the members' mean, and no two members closer than ``min_tv``."""
        return {
            f"ensemble NLL <= {nll_ratio:g} x best member's": self.nll_ratio <= nll_ratio,
            "ensemble error <= mean member error": self.ensemble_error_pct <= self.mean_member_error_pct,
            f"every two members differ by >= {min_tv:g} in mean TV": self.min_pairwise_tv >= min_tv,
        }


def ensemble_gain(metrics: dict[str, Any], probs: Tensor, names: list[str]) -> EnsembleGain:
    """:class:`EnsembleGain` of a run from its ``metrics.json`` (``ensemble``, ``per_sample``) and its members'
    test-set probabilities ``probs`` (:func:`member_probabilities`) named ``names``."""
    members = metrics["per_sample"]
    if len(members) != probs.shape[0] or len(names) != probs.shape[0]:
        raise ValueError(f"{probs.shape[0]} members' probabilities for {len(members)} samples in metrics.json")
    if len(members) < 2:
        raise ValueError("an ensemble gain needs at least two members")
    distances = pairwise_total_variation(probs)
    distances.fill_diagonal_(float("inf"))
    flat = int(distances.argmin())
    i, j = divmod(flat, distances.shape[1])
    return EnsembleGain(
        members=len(members),
        ensemble_nll=float(metrics["ensemble"]["nll"]),
        best_member_nll=min(float(m["nll"]) for m in members),
        ensemble_error_pct=float(metrics["ensemble"]["test_error_pct"]),
        mean_member_error_pct=sum(float(m["test_error_pct"]) for m in members) / len(members),
        min_pairwise_tv=float(distances[i, j]),
        closest_pair=(names[i], names[j]),
    )
