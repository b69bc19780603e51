r"""What the members of a posterior say about their uncertainty: entropy, mutual information, disagreement.

For an input :math:`x`, members :math:`i = 1..M` with class probabilities :math:`p_i = p(y \mid x, \theta_i)`
and weights :math:`w_i` (:math:`\sum_i w_i = 1`), and the model average :math:`\bar p = \sum_i w_i p_i`:

- predictive entropy (total uncertainty): :math:`H[\bar p] = -\sum_c \bar p_c \log \bar p_c`;
- expected entropy (the aleatoric part, what each member is unsure of):
  :math:`\mathbb E_w H[p_i] = \sum_i w_i H[p_i]`;
- mutual information between the label and the parameters (the epistemic part, how much the members differ;
  the BALD score of Houlsby et al. 2011, the decomposition of Depeweg et al. 2018):
  :math:`I(y; \theta \mid x) = H[\bar p] - \sum_i w_i H[p_i] \ge 0` (Jensen: entropy is concave);
- disagreement: the probability that two distinct members, drawn by weight, predict different classes,
  :math:`D = \sum_{i \ne j} w_i w_j 1\{\hat c_i \ne \hat c_j\} / \sum_{i \ne j} w_i w_j`, with
  :math:`\hat c_i = \arg\max_c p_{ic}`; with equal weights :math:`1 - \sum_c n_c (n_c - 1) / (M (M - 1))`
  (:math:`n_c` members predict :math:`c`), torch-uncertainty's ``Disagreement``; 0 for one member.

All in nats, computed in float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from csg.evaluation.ood import entropy

__all__ = ["Uncertainty", "member_uncertainty", "normalised_weights"]


@dataclass(frozen=True)
class Uncertainty:
    """Per-input uncertainty of a posterior (see the module for the equations); each a float64 ``(batch,)``
    tensor on the members' device."""

    predictive_entropy: Tensor  # H[p̄]
    expected_entropy: Tensor  # sum_i w_i H[p_i]
    mutual_information: Tensor  # H[p̄] - sum_i w_i H[p_i]
    disagreement: Tensor  # P(two distinct members, drawn by weight, predict different classes)

    def mean(self) -> dict[str, float]:
        """The mean of each over the batch: ``{"predictive_entropy": ..., "expected_entropy": ..., ...}``."""
        return {name: float(getattr(self, name).mean()) for name in
                ("predictive_entropy", "expected_entropy", "mutual_information", "disagreement")}


def normalised_weights(weights: Sequence[float] | Tensor | None, members: int, device=None) -> Tensor:
    """``weights`` as float64 summing to 1 (equal weights for ``None``); a ``ValueError`` for a count other than
    ``members``, a negative weight or a zero sum."""
    w = (torch.full((members,), 1.0 / members, dtype=torch.float64) if weights is None
         else torch.as_tensor(weights, dtype=torch.float64).detach().cpu().reshape(-1))
    if w.numel() != members or bool((w < 0).any()) or not float(w.sum()) > 0:
        raise ValueError(f"weights: {members} non-negative numbers with a positive sum, one per member "
                         f"(got {w.numel()})")
    return (w / w.sum()).to(device if device is not None else "cpu")


def member_uncertainty(member_probs: Tensor, weights: Sequence[float] | Tensor | None = None) -> Uncertainty:
    """The uncertainty of members' probabilities ``member_probs`` ``(members, batch, classes)`` averaged with
    ``weights`` (one per member, normalised here; ``None``: equal), per input (see the module)."""
    if member_probs.dim() != 3:
        raise ValueError(f"member_probs: a (members, batch, classes) tensor, got shape {tuple(member_probs.shape)}")
    probs = member_probs.to(torch.float64)
    members = probs.shape[0]
    w = normalised_weights(weights, members, probs.device)
    average = torch.einsum("m,mbc->bc", w, probs)
    total = entropy(average)
    expected = torch.einsum("m,mb->b", w, entropy(probs))
    return Uncertainty(predictive_entropy=total, expected_entropy=expected,
                       mutual_information=(total - expected).clamp_min(0.0),  # >= 0 but for round-off
                       disagreement=_disagreement(probs.argmax(-1), w, probs.shape[-1]))


def _disagreement(predicted: Tensor, w: Tensor, classes: int) -> Tensor:
    """D of the module from the members' predicted classes ``(members, batch)``: with q_c the weight of the members
    predicting c, sum_{i != j} w_i w_j 1{c_i != c_j} = 1 - sum_c q_c^2 and sum_{i != j} w_i w_j = 1 - sum_i w_i^2."""
    pairs = 1.0 - float((w * w).sum())
    if pairs <= 1e-12:  # one member (or all the weight on one): nothing to disagree with
        return torch.zeros(predicted.shape[1], dtype=torch.float64, device=predicted.device)
    votes = torch.zeros(predicted.shape[1], classes, dtype=torch.float64, device=predicted.device)
    votes.scatter_add_(1, predicted.T, w[None, :].expand(predicted.shape[1], -1).contiguous())
    return ((1.0 - votes.pow(2).sum(1)) / pairs).clamp(0.0, 1.0)
