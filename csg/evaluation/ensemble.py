"""The Bayesian model average of collected samples."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from csg.evaluation.metrics import classification_metrics


@torch.no_grad()
def predict_probs(
    model: nn.Module, loader: DataLoader, device: torch.device, autocast: Callable[[], contextlib.AbstractContextManager] | None = None
) -> tuple[Tensor, Tensor]:
    """Softmax probabilities (float32, on the CPU) of ``model`` in eval mode on every batch, and the targets."""
    model.eval()
    autocast = autocast or contextlib.nullcontext
    probs, targets = [], []
    for x, y in loader:
        with autocast():
            logits = model(x.to(device, non_blocking=True))
        probs.append(torch.softmax(logits.float(), dim=1).cpu())
        targets.append(y)
    return torch.cat(probs), torch.cat(targets)


@dataclass
class EnsembleResult:
    """Metrics of the weighted average and of each sample, and the averaged probabilities."""

    ensemble: dict[str, float]
    per_sample: list[dict[str, float]] = field(default_factory=list)
    probs: Tensor | None = None


def evaluate_samples(
    model: nn.Module,
    state_dicts: Iterable[dict[str, Tensor]],
    weights: Sequence[float],
    loader: DataLoader,
    device: torch.device,
    *,
    n_bins: int = 15,
    autocast: Callable[[], contextlib.AbstractContextManager] | None = None,
) -> EnsembleResult:
    """Load each sample into ``model`` in turn and average the predictions with ``weights``.

    The average is :math:`\\sum_i w_i\\,p(y\\mid x, \\theta_i)` (weights summing to 1): the
    posterior predictive of the paper. Each sample is evaluated in eval mode,
    one pass over ``loader``; memory holds one model and the running average.
    """
    total = float(sum(weights))
    average: Tensor | None = None
    targets: Tensor | None = None
    per_sample = []
    count = 0
    for state_dict, weight in zip(state_dicts, weights, strict=True):
        model.load_state_dict(state_dict)
        probs, targets = predict_probs(model, loader, device, autocast)
        per_sample.append(classification_metrics(probs, targets, n_bins))
        contribution = probs.to(torch.float64) * (weight / total)
        average = contribution if average is None else average.add_(contribution)
        count += 1
    if average is None:
        raise ValueError("no samples to evaluate")
    ensemble = classification_metrics(average, targets, n_bins)
    ensemble["num_samples"] = count
    return EnsembleResult(ensemble=ensemble, per_sample=per_sample, probs=average)
