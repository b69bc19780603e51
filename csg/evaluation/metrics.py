"""Classification metrics of predictive probabilities."""

from __future__ import annotations

import torch
from torch import Tensor

METRIC_NAMES = ("test_error_pct", "nll", "ece", "brier")


def classification_metrics(probs: Tensor, targets: Tensor, n_bins: int = 15) -> dict[str, float]:
    r"""Metrics of predictive probabilities ``probs`` (n, C) against integer ``targets`` (n,).

    - ``test_error_pct``: 100 x the fraction of examples whose arg-max class is wrong;
    - ``top5_error_pct``: 100 x the fraction whose class is not among the 5 most probable
      (ImageNet's top-5), reported only with more than 5 classes (with 5 or fewer every class is
      among the top 5, so the number would say nothing);
    - ``nll``: mean negative log-likelihood, :math:`-\frac1n\sum_i \log p_i(y_i)`;
    - ``ece``: expected calibration error with ``n_bins`` equal-width confidence
      bins (Guo et al. 2017), :math:`\sum_b \frac{|B_b|}{n} |\mathrm{acc}(B_b) - \mathrm{conf}(B_b)|`
      (``expected_calibration_error`` below);
    - ``brier``: :math:`\frac1n\sum_i \sum_c (p_{ic} - 1\{c = y_i\})^2` (summed over
      classes, in [0, 2]).
    """
    probs = probs.to(torch.float64)
    targets = targets.to(torch.long)
    num_classes = probs.shape[1]
    picked = probs.gather(1, targets[:, None]).squeeze(1)
    ece = expected_calibration_error(probs.float(), targets, n_bins)
    # sum_c (p_c - 1{c = y})^2 = sum_c p_c^2 - 2 p_y + 1
    brier = probs.pow(2).sum(1) - 2.0 * picked + 1.0
    metrics = {
        "test_error_pct": 100.0 * (probs.argmax(1) != targets).double().mean().item(),
        "nll": -picked.clamp_min(torch.finfo(probs.dtype).tiny).log().mean().item(),
        "ece": float(ece),
        "brier": brier.mean().item(),
    }
    if num_classes > 5:
        metrics["top5_error_pct"] = 100.0 * _top5_miss(probs, picked).double().mean().item()
    return metrics


def expected_calibration_error(probs: Tensor, targets: Tensor, n_bins: int = 15) -> float:
    """The L1 expected calibration error of the top class with ``n_bins`` equal-width bins of [0, 1], binned as
    torchmetrics' ``multiclass_calibration_error`` bins (a confidence on a bin's upper edge falls in the next bin;
    tests/evaluation check the two agree). Ours because importing torchmetrics imports torchvision and costs a
    small run seconds (issue 55); the arithmetic is a few lines."""
    confidence, predicted = probs.max(1)
    hits = (predicted == targets).to(confidence.dtype)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=confidence.dtype, device=confidence.device)
    index = torch.bucketize(confidence, edges, right=True) - 1
    count = torch.zeros(n_bins + 1, dtype=confidence.dtype, device=confidence.device).scatter_add_(
        0, index, torch.ones_like(confidence))
    gap = torch.zeros_like(count).scatter_add_(0, index, hits - confidence)  # the bin's sum of acc - conf
    return float(gap.abs().sum() / count.sum())


def _top5_miss(probs: Tensor, picked: Tensor) -> Tensor:
    """True where at least 5 classes are strictly more probable than the true one."""
    return (probs > picked[:, None]).sum(1) >= 5
