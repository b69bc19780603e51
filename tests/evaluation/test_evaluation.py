"""Metrics and the Bayesian model average against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from csg.evaluation import classification_metrics, equal_weights, evaluate_samples, harmonic_mean_weights

# Four examples, three classes.
PROBS = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4], [0.2, 0.5, 0.3]])
TARGETS = torch.tensor([0, 1, 0, 2])


def test_metrics_match_hand_computed_values():
    m = classification_metrics(PROBS, TARGETS, n_bins=15)
    # arg-max classes 0, 1, 2, 1: examples 3 and 4 wrong
    assert m["test_error_pct"] == pytest.approx(50.0)
    assert m["nll"] == pytest.approx(-(math.log(0.7) + math.log(0.6) + math.log(0.3) + math.log(0.3)) / 4)
    brier = ((0.3**2 + 0.2**2 + 0.1**2) + (0.1**2 + 0.4**2 + 0.3**2) + (0.7**2 + 0.3**2 + 0.4**2)
             + (0.2**2 + 0.5**2 + 0.7**2)) / 4
    assert m["brier"] == pytest.approx(brier)
    # confidences 0.7, 0.6, 0.4, 0.5 fall in four different 1/15-wide bins, accuracies 1, 1, 0, 0:
    # ECE = (|1 - 0.7| + |1 - 0.6| + |0 - 0.4| + |0 - 0.5|) / 4
    assert m["ece"] == pytest.approx((0.3 + 0.4 + 0.4 + 0.5) / 4, abs=1e-6)


def test_top5_error_counts_true_classes_outside_the_five_most_probable():
    probs = torch.tensor([[0.30, 0.20, 0.15, 0.12, 0.10, 0.08, 0.05],    # true class 4: 5th most probable
                          [0.30, 0.20, 0.15, 0.12, 0.10, 0.08, 0.05]])   # true class 6: last
    m = classification_metrics(probs, torch.tensor([4, 6]))
    assert m["top5_error_pct"] == pytest.approx(50.0) and m["test_error_pct"] == pytest.approx(100.0)
    # With 5 classes or fewer every class is in the top 5: the metric is not reported at all
    assert "top5_error_pct" not in classification_metrics(PROBS, TARGETS)
    five = torch.softmax(torch.randn(3, 5, generator=torch.Generator().manual_seed(0)), 1)
    assert "top5_error_pct" not in classification_metrics(five, torch.tensor([0, 1, 4]))
    six = torch.softmax(torch.randn(3, 6, generator=torch.Generator().manual_seed(0)), 1)
    assert "top5_error_pct" in classification_metrics(six, torch.tensor([0, 1, 5]))


def test_ece_pools_examples_that_share_a_bin():
    probs = torch.tensor([[0.91, 0.09], [0.92, 0.08], [0.10, 0.90]])
    targets = torch.tensor([0, 1, 1])
    # bin (0.8667, 0.9333] holds all three: accuracy 2/3, mean confidence (0.91 + 0.92 + 0.90) / 3
    assert classification_metrics(probs, targets)["ece"] == pytest.approx(abs(2 / 3 - 0.91), abs=1e-6)


@pytest.mark.parametrize("classes", [2, 10, 100])
def test_ece_is_torchmetrics_calibration_error(classes):
    """csg computes the ECE itself (importing torchmetrics costs a run seconds); it must be torchmetrics' number,
    sharp and flat predictions alike, with confidences exactly on bin edges (0.2 and 1)."""
    from torchmetrics.functional.classification import multiclass_calibration_error

    generator = torch.Generator().manual_seed(classes)
    for scale in (0.5, 3.0, 15.0):
        probs = (scale * torch.randn(3000, classes, generator=generator)).softmax(1)
        probs[:20] = 0.0
        probs[:10, 0] = 1.0
        if classes >= 5:
            probs[10:20, :5] = 0.2
        targets = torch.randint(0, classes, (3000,), generator=generator)
        theirs = float(multiclass_calibration_error(probs, targets, num_classes=classes, n_bins=15, norm="l1"))
        assert classification_metrics(probs, targets)["ece"] == pytest.approx(theirs, abs=2e-6)


def test_auroc_is_torchmetrics_auroc_with_and_without_ties():
    """csg computes the OOD AUROC itself (importing torchmetrics costs every run with an OOD set seconds); it must
    be torchmetrics' number: continuous scores, heavily tied ones (entropies of one-hot predictions are all 0), a
    perfect and a reversed detector."""
    from torchmetrics.functional.classification import binary_auroc as theirs

    from csg.evaluation.ood import binary_auroc

    generator = torch.Generator().manual_seed(0)
    labels = (torch.rand(2000, generator=generator) < 0.3).long()
    continuous = torch.randn(2000, generator=generator) + labels
    tied = torch.randint(0, 4, (2000,), generator=generator).float() + (labels * torch.rand(2000, generator=generator) < 0.2)
    for scores in (continuous, tied, torch.zeros(2000), labels.float(), -labels.float()):
        assert binary_auroc(scores, labels) == pytest.approx(float(theirs(scores, labels)), abs=1e-6)
    assert binary_auroc(labels.float(), labels) == 1.0 and binary_auroc(torch.zeros(2000), labels) == 0.5
    with pytest.raises(ValueError, match="positives and negatives"):
        binary_auroc(torch.rand(5), torch.zeros(5))


class FixedProbs(torch.nn.Module):
    """Returns log-probabilities stored in a buffer (so a state_dict is a 'sample')."""

    def __init__(self, probs):
        super().__init__()
        self.register_buffer("table", probs.clone())

    def forward(self, index):
        return self.table[index].log()


def test_ensemble_is_the_weighted_mean_of_sample_probabilities():
    other = torch.tensor([[0.1, 0.8, 0.1], [0.2, 0.7, 0.1], [0.6, 0.2, 0.2], [0.1, 0.1, 0.8]])
    loader = DataLoader(TensorDataset(torch.arange(4), TARGETS), batch_size=3)
    model = FixedProbs(PROBS)
    samples = [{"table": PROBS}, {"table": other}]
    result = evaluate_samples(model, samples, equal_weights(2), loader, torch.device("cpu"))
    expected = (PROBS + other) / 2
    assert torch.allclose(result.probs.float(), expected)
    entropy = lambda p: -(p.double() * p.double().log()).sum(1)  # noqa: E731
    mutual_information = (entropy(expected) - (entropy(PROBS) + entropy(other)) / 2).mean().item()
    assert mutual_information > 0.05
    assert result.ensemble == pytest.approx({**classification_metrics(expected, TARGETS), "num_samples": 2,
                                             "predictive_entropy": entropy(expected).mean().item(),
                                             "mutual_information": mutual_information})
    # every sample's log-likelihood and predicted class of every example: the draws the diagnostics read
    assert torch.allclose(result.log_likelihoods, torch.stack([PROBS, other]).double().gather(
        2, TARGETS.expand(2, 4)[..., None]).squeeze(2).log())
    assert result.predicted.tolist() == [[0, 1, 2, 1], [1, 1, 0, 2]]
    assert result.per_sample[0] == pytest.approx(classification_metrics(PROBS, TARGETS))
    assert result.per_sample[1] == pytest.approx(classification_metrics(other, TARGETS))
    weighted = evaluate_samples(model, samples, [0.25, 0.75], loader, torch.device("cpu"))
    assert torch.allclose(weighted.probs.float(), 0.25 * PROBS + 0.75 * other)


def test_harmonic_mean_cycle_weights():
    # cycle 0: log-likelihoods -10, -12; cycle 1: -11 (one sample)
    # w0 = [ (e^10 + e^12) / 2 ]^-1, w1 = e^-11; normalised, then split evenly within a cycle
    w0 = 2 / (math.exp(10) + math.exp(12))
    w1 = math.exp(-11)
    total = w0 + w1
    weights = harmonic_mean_weights([-10.0, -12.0, -11.0], [0, 0, 1])
    assert weights == pytest.approx([w0 / total / 2, w0 / total / 2, w1 / total])
    assert sum(weights) == pytest.approx(1.0)
    # huge log-likelihoods (a real training set) stay finite
    assert sum(harmonic_mean_weights([-5e4, -5.1e4, -4.9e4], [0, 1, 2])) == pytest.approx(1.0)


def test_equal_weights():
    assert equal_weights(4) == [0.25] * 4


def test_a_batch_whose_float16_logits_overflow_is_predicted_again_in_float32():
    from csg.evaluation import predict_probs

    model = torch.nn.Linear(2, 3)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[4e4, 0.0], [0.0, 4e4], [-4e4, 0.0]]))  # |logits| up to 8e4 > 65504
        model.bias.zero_()
    x = torch.tensor([[2.0, 0.0], [0.0, 1e-4], [0.5, 0.5]])
    loader = DataLoader(TensorDataset(x, torch.tensor([0, 1, 2])), batch_size=3)

    def half():
        return torch.autocast("cpu", dtype=torch.float16)

    with half():
        assert not torch.isfinite(model(x)).all()  # the case: float16 overflows here
    probs, targets = predict_probs(model, loader, torch.device("cpu"), half)
    exact, _ = predict_probs(model, loader, torch.device("cpu"))
    assert torch.isfinite(probs).all() and torch.equal(probs, exact) and targets.tolist() == [0, 1, 2]
