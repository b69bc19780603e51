"""Evaluation of posterior samples: metrics, the Bayesian model average, cycle weights.

- :func:`classification_metrics`: test error %, NLL, ECE (15 bins), Brier score.
- :func:`evaluate_samples`: every sample's predictions and their weighted
  average (the posterior predictive), one pass per sample, memory of one model
  plus the running average.
- :func:`harmonic_mean_weights`: the cycle weights of the paper's Appendix F.
- :mod:`csg.evaluation.swag`: cyclical SWAG (a Gaussian per cycle, draws from it);
  :mod:`csg.evaluation.ess`: effective sample size; :mod:`csg.evaluation.ood`: entropy and AUROC.
"""

from csg.evaluation.ensemble import EnsembleResult, batch_probs, evaluate_samples, predict_probs
from csg.evaluation.metrics import METRIC_NAMES, classification_metrics
from csg.evaluation.weights import equal_weights, harmonic_mean_weights

__all__ = [
    "METRIC_NAMES",
    "EnsembleResult",
    "batch_probs",
    "classification_metrics",
    "equal_weights",
    "evaluate_samples",
    "harmonic_mean_weights",
    "predict_probs",
]
