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
      bins (Guo et al. 2017), :math:`\sum_b \frac{|B_b|}{n} |\mathrm{acc}(B_b) - \mathrm{conf}(B_b)|`,
      computed by torchmetrics;
    - ``brier``: :math:`\frac1n\sum_i \sum_c (p_{ic} - 1\{c = y_i\})^2` (summed over
      classes, in [0, 2]).
    """
    from torchmetrics.functional.classification import multiclass_calibration_error

    probs = probs.to(torch.float64)
    targets = targets.to(torch.long)
    num_classes = probs.shape[1]
    picked = probs.gather(1, targets[:, None]).squeeze(1)
    ece = multiclass_calibration_error(
        probs.float(), targets, num_classes=num_classes, n_bins=n_bins, norm="l1", validate_args=False
    )
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


def _top5_miss(probs: Tensor, picked: Tensor) -> Tensor:
    """True where at least 5 classes are strictly more probable than the true one."""
    return (probs > picked[:, None]).sum(1) >= 5
