r"""How far apart are the members? Their effective number, mutual information and total variation, no reference needed.

For members :math:`i = 1..S` with weights :math:`w_i` (summing to 1) and predictive probabilities
:math:`p_i(\cdot \mid x)` on :math:`n` test inputs, and their average :math:`\bar p = \sum_i w_i p_i`:

- the effective number of members is read off the members' disagreement: with the weighted, centred
  predictions :math:`d_i = \sqrt{w_i}\,(p_i - \bar p)` (one vector of all inputs and classes each) and their
  Gram matrix :math:`G_{ij} = \langle d_i, d_j \rangle` of eigenvalues :math:`\lambda`,

  .. math:: S_\mathrm{eff} = 1 + \frac{(\sum \lambda)^2}{\sum \lambda^2} = 1 + \frac{(\mathrm{tr}\,G)^2}{\lVert G \rVert_F^2}

  (one plus the participation ratio of the disagreement's directions). Members that disagree in independent
  directions of equal size (independent draws, equally weighted) read :math:`S` (for :math:`n \cdot C \gg S`);
  members that fall into :math:`k` groups of near copies read about :math:`k`; members that all differ along
  one direction read 2; a single member, or identical ones, 1. It counts distinct directions, not their size:
  that is what the mutual information and the total variations say.
- the mutual information (epistemic uncertainty, nats) :math:`\frac1n \sum_x H[\bar p] - \sum_i w_i H[p_i]`
  (:mod:`csg.evaluation.uncertainty`);
- the mean total variation between two members, :math:`\sum_{i \ne j} w_i w_j \mathrm{TV}_{ij} / \sum_{i \ne
  j} w_i w_j` (:mod:`csg.evaluation.diversity`), and of a member to the average, :math:`\sum_i w_i
  \mathrm{TV}(p_i, \bar p)`.

A run computes them on the first :func:`spread_examples` test inputs (all of a 10-class test set of 20,000;
2,000 of a 100-class one), so that the members' probabilities can be held at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from csg.evaluation.diversity import pairwise_total_variation
from csg.evaluation.uncertainty import member_uncertainty, normalised_weights

__all__ = ["MemberSpread", "member_spread", "spread_examples"]

HELD_VALUES = 200_000  # examples x classes of every member's probabilities held for the spread


def spread_examples(classes: int) -> int:
    """How many test inputs (the first ones) the spread of a run is computed on: ``HELD_VALUES / classes``, at
    least 200."""
    return max(200, HELD_VALUES // max(int(classes), 1))


@dataclass(frozen=True)
class MemberSpread:
    """The members' spread (see the module): ``members`` S, ``effective_members`` S_eff, ``mutual_information``
    (nats), ``member_tv`` (mean TV between two members), ``tv_to_average`` (mean TV of a member to the average),
    ``examples`` (the test inputs they were computed on)."""

    members: int
    effective_members: float
    mutual_information: float
    member_tv: float
    tv_to_average: float
    examples: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (metrics.json's ``spread``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "MemberSpread":
        """The spread :meth:`to_dict` wrote."""
        return cls(**{key: values[key] for key in cls.__dataclass_fields__})

    def __str__(self) -> str:
        return (f"{self.members} member{'s' if self.members != 1 else ''} worth {self.effective_members:.1f} "
                f"(effective number from their "
                f"disagreement), mutual information {self.mutual_information:.4f} nats, members "
                f"{self.member_tv:.4f} TV apart, {self.tv_to_average:.4f} TV from their average")


def member_spread(member_probs: Tensor, weights: Sequence[float] | Tensor | None = None) -> MemberSpread:
    """The spread of members' probabilities ``member_probs`` ``(members, examples, classes)`` with ``weights``
    (one per member; ``None``: equal)."""
    if not isinstance(member_probs, Tensor) or member_probs.dim() != 3 or member_probs.shape[0] == 0:
        shape = tuple(member_probs.shape) if isinstance(member_probs, Tensor) else type(member_probs).__name__
        raise ValueError(f"member_probs: a (members, examples, classes) tensor of at least one member, got {shape}")
    probs = member_probs.detach().to(torch.float64).cpu()
    if not bool(torch.isfinite(probs).all()):
        raise ValueError("member_probs: finite probabilities are required (a member predicts NaN or inf)")
    members = probs.shape[0]
    w = normalised_weights(weights, members)
    average = torch.einsum("m,mec->ec", w, probs)
    centred = (probs - average).reshape(members, -1) * w.sqrt()[:, None]
    gram = centred @ centred.T
    trace, square = float(torch.trace(gram)), float((gram * gram).sum())
    apart = trace > 1e-12 * probs[0].numel()  # round-off aside: identical members have no directions at all
    effective = 1.0 + trace ** 2 / square if apart else 1.0
    mutual_information = float(member_uncertainty(probs, w).mutual_information.mean())
    to_average = 0.5 * (probs - average).abs().sum(-1).mean(-1)  # (members,)
    pairs = 1.0 - float((w * w).sum())
    member_tv = float(w @ pairwise_total_variation(probs) @ w) / pairs if members > 1 and pairs > 1e-12 else 0.0
    return MemberSpread(members=members, effective_members=min(effective, float(members)),
                        mutual_information=mutual_information, member_tv=member_tv,
                        tv_to_average=float((w * to_average).sum()), examples=probs.shape[1])
