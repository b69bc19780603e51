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
    """Softmax probabilities (float32) of ``model`` in eval mode on every batch, and the targets, both on the CPU.

    The loader may serve batches from the accelerator (data held on the GPU) or from the CPU; the
    results are on the CPU either way, where the metrics and the gathering across processes take them.
    Under ``autocast`` a batch whose logits overflow (float16 ends at 65504) is computed again in float32,
    so that a sample's metrics are its own and not those of the number format.
    """
    model.eval()
    probs, targets = [], []
    for x, y in loader:
        probs.append(batch_probs(model, x.to(device, non_blocking=True), autocast).cpu())
        targets.append(y.cpu())
    return torch.cat(probs), torch.cat(targets)


def batch_probs(model: nn.Module, x: Tensor,
                autocast: Callable[[], contextlib.AbstractContextManager] | None = None) -> Tensor:
    """Softmax probabilities (float32) of ``model`` on one batch ``x``, where ``x`` is. Under ``autocast`` a batch
    whose logits overflow (float16 ends at 65504) is computed again in float32 (:func:`predict_probs`,
    :meth:`csg.Posterior.predict`)."""
    with (autocast or contextlib.nullcontext)():
        logits = model(x)
    if autocast is not None and not bool(torch.isfinite(logits).all()):
        logits = model(x)
    return torch.softmax(logits.float(), dim=1)


@dataclass
class EnsembleResult:
    """Metrics of the weighted average and of each sample, and the averaged probabilities.

    With an OOD loader, ``ood`` holds the ensemble's OOD metrics and ``ood_per_sample`` each sample's;
    with ``groups``, ``group_ensembles`` maps each group (a chain) to the metrics of its own average.
    ``log_likelihoods`` and ``predicted`` hold every sample's log p(y_j | x_j, theta_i) (float64) and arg-max
    class (int64) of every test example, ``(samples, examples)``: the function-space draws that
    :mod:`csg.evaluation.diagnostics` diagnoses.
    """

    ensemble: dict[str, float]
    per_sample: list[dict[str, float]] = field(default_factory=list)
    probs: Tensor | None = None
    ood: dict[str, object] | None = None
    ood_per_sample: list[dict[str, object]] = field(default_factory=list)
    group_ensembles: dict[int, dict[str, float]] = field(default_factory=dict)
    log_likelihoods: Tensor | None = None
    predicted: Tensor | None = None
    targets: Tensor | None = None
    ood_probs: Tensor | None = None
    member_probs: Tensor | None = None  # (samples, keep_examples, classes) float32: the first test inputs' probabilities


def evaluate_samples(
    model: nn.Module,
    state_dicts: Iterable[dict[str, Tensor]],
    weights: Sequence[float],
    loader: DataLoader,
    device: torch.device,
    *,
    n_bins: int = 15,
    autocast: Callable[[], contextlib.AbstractContextManager] | None = None,
    ood_loader=None,
    groups: Sequence[int] | None = None,
    gather: Callable[[Tensor], Tensor] | None = None,
    head: str | None = None,
    keep_examples: int = 0,
) -> EnsembleResult:
    """Load each sample into ``model`` in turn and average the predictions with ``weights``.

    The average is :math:`\\sum_i w_i\\,p(y\\mid x, \\theta_i)` (weights summing to 1): the
    posterior predictive of the paper. Each sample is evaluated in eval mode,
    one pass over ``loader`` (and over ``ood_loader`` if given); memory holds
    one model and the running averages. ``groups`` (one label per sample, e.g.
    its chain) adds the average of each group alone. Under DDP every process
    evaluates its shard of the loaders and ``gather`` joins the shards.

    The ensemble's metrics are :func:`~csg.evaluation.metrics.classification_metrics` of the average, its
    ``num_samples``, and the mean over the test examples of its ``predictive_entropy`` H[p̄] and
    ``mutual_information`` H[p̄] - sum_i w_i H[p_i] (nats; :mod:`csg.evaluation.uncertainty`); the OOD
    metrics add the mean ``mutual_information`` on the OOD inputs (and ``mutual_information_in_distribution``).

    ``head``: the name of a submodule that the samples alone differ in, whose output is the model's (a sampled
    last layer on a frozen trunk, :func:`csg.engine.part.head_of`). The trunk then runs once per loader: its
    features (the head's inputs) are kept and each sample applies its head to them
    (:class:`csg.evaluation.heads.TrunkFeatures`). Where the head's output is not the model's (checked on the first
    batch), every sample runs the whole model as without ``head``. ``keep_examples``: every sample's probabilities
    of the first that many test inputs are kept (``member_probs``, for :mod:`csg.evaluation.spread`).
    """
    from csg.evaluation.heads import TrunkFeatures
    from csg.evaluation.ood import entropy, ood_metrics

    gather = gather or (lambda t: t)
    trunk = TrunkFeatures(model, head, device, autocast) if head is not None else None

    def predict(data):
        if trunk is not None and not trunk.failed:
            probs, targets = trunk.probs(data)
        else:
            probs, targets = predict_probs(model, data, device, autocast)
        return gather(probs), gather(targets)

    weights = list(weights)
    groups = list(groups) if groups is not None else [0] * len(weights)
    total = float(sum(weights))
    group_totals = {g: sum(w for w, h in zip(weights, groups) if h == g) for g in set(groups)}
    average: Tensor | None = None
    ood_average: Tensor | None = None
    group_averages: dict[int, Tensor] = {}
    expected_entropy: Tensor | None = None  # sum_i w_i H[p_i] per example
    ood_expected_entropy: Tensor | None = None
    log_likelihoods, predicted, kept = [], [], []
    targets: Tensor | None = None
    result = EnsembleResult(ensemble={})
    for state_dict, weight, group in zip(state_dicts, weights, groups, strict=True):
        if trunk is not None and trunk.ready:
            trunk.load_head(state_dict)
        else:
            model.load_state_dict(state_dict)
        probs, targets = predict(loader)
        result.per_sample.append(classification_metrics(probs, targets, n_bins))
        log_likelihoods.append(probs.gather(1, targets[:, None].long()).squeeze(1).double().clamp_min(1e-300).log())
        predicted.append(probs.argmax(1))
        if keep_examples:
            kept.append(probs[:keep_examples].float().cpu())
        average = _accumulate(average, probs, weight / total)
        expected_entropy = _accumulate(expected_entropy, entropy(probs), weight / total)
        if len(group_totals) > 1:
            group_averages[group] = _accumulate(group_averages.get(group), probs, weight / group_totals[group])
        if ood_loader is not None:
            ood_probs, _ = predict(ood_loader)
            result.ood_per_sample.append(ood_metrics(probs, ood_probs))
            ood_average = _accumulate(ood_average, ood_probs, weight / total)
            ood_expected_entropy = _accumulate(ood_expected_entropy, entropy(ood_probs), weight / total)
    if average is None:
        raise ValueError("no samples to evaluate")
    total_entropy = entropy(average)
    mutual_information = (total_entropy - expected_entropy).clamp_min(0.0).mean().item()
    result.ensemble = {**classification_metrics(average, targets, n_bins), "num_samples": len(result.per_sample),
                       "predictive_entropy": total_entropy.mean().item(), "mutual_information": mutual_information}
    result.probs, result.targets, result.ood_probs = average, targets, ood_average
    result.log_likelihoods, result.predicted = torch.stack(log_likelihoods), torch.stack(predicted)
    result.member_probs = torch.stack(kept) if kept else None
    result.group_ensembles = {
        g: {**classification_metrics(a, targets, n_bins), "num_samples": groups.count(g)}
        for g, a in sorted(group_averages.items())
    }
    if ood_average is not None:
        result.ood = {**ood_metrics(average, ood_average), "mutual_information": (
            entropy(ood_average) - ood_expected_entropy).clamp_min(0.0).mean().item(),
            "mutual_information_in_distribution": mutual_information}
    return result


def _accumulate(average: Tensor | None, probs: Tensor, weight: float) -> Tensor:
    contribution = probs.to(torch.float64) * weight
    return contribution if average is None else average.add_(contribution)
