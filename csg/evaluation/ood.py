"""Out-of-distribution uncertainty: predictive entropy, its empirical CDF, and the AUROC of entropy.

The paper's Figure 4 is the empirical CDF of the predictive entropy on
notMNIST for a model trained on MNIST: a curve that stays low for small
entropies means fewer confident mistakes on unseen classes. The AUROC scores
entropy as a detector of OOD inputs (in-distribution test set: negatives).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

GRID_POINTS = 101


def entropy(probs: Tensor) -> Tensor:
    """Predictive entropy in nats, -sum_c p_c log p_c, per row."""
    probs = probs.to(torch.float64)
    return -(probs * probs.clamp_min(1e-300).log()).sum(-1)


def entropy_grid(num_classes: int) -> Tensor:
    """The fixed grid of the ECDF: 0 to log(C) nats."""
    return torch.linspace(0.0, math.log(num_classes), GRID_POINTS, dtype=torch.float64)


def ecdf(values: Tensor, grid: Tensor) -> Tensor:
    """Fraction of ``values`` <= each grid point."""
    return (values[:, None] <= grid[None, :]).to(torch.float64).mean(0)


def binary_auroc(scores: Tensor, labels: Tensor) -> float:
    """The area under the ROC curve of ``scores`` as a detector of ``labels == 1``: the probability that a positive
    scores above a negative, ties counting one half (the Mann-Whitney U over n_pos n_neg, from average ranks), which
    is the trapezoidal area of torchmetrics' ``binary_auroc`` (tests/evaluation check the two agree). Ours because
    importing torchmetrics imports torchvision and cost every run with an OOD set seconds (issue 56)."""
    _, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).to(torch.float64)
    ranks = (ends - (counts.to(torch.float64) - 1) / 2)[inverse]  # 1-based, ties at their average
    positive = labels.bool()
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("the AUROC needs both positives and negatives")
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def ood_metrics(in_probs: Tensor, out_probs: Tensor) -> dict[str, object]:
    """Entropy statistics of OOD predictions beside in-distribution ones, with the entropy AUROC."""
    h_in, h_out = entropy(in_probs), entropy(out_probs)
    scores = torch.cat([h_in, h_out]).float()
    labels = torch.cat([torch.zeros_like(h_in), torch.ones_like(h_out)]).long()
    return {
        # the ICSGLD authors' "Brier score on SVHN": no class is right, so the target is the zero vector and the
        # score is mean_i (1/C) sum_c p_ic^2 (1/C^2 for a uniform prediction, 1/C for a one-hot one)
        "brier_ood": out_probs.to(torch.float64).pow(2).mean(1).mean().item(),
        "entropy_mean": h_out.mean().item(),
        "entropy_mean_in_distribution": h_in.mean().item(),
        "auroc": float(binary_auroc(scores, labels)),
        "entropy_ecdf": ecdf(h_out, entropy_grid(in_probs.shape[1])).tolist(),
    }
