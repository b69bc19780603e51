r"""The Bayesian model average of regression members: a mixture of Gaussians, and its metrics.

Member :math:`i` (weight :math:`w_i`, :math:`\sum_i w_i = 1`) predicts :math:`\mathcal{N}(\mu_i(x), \sigma_i^2(x))`
per target column (:meth:`csg.likelihoods.Likelihood.predictive`); the posterior predictive is the mixture
:math:`p(y \mid x) = \sum_i w_i\,\mathcal{N}(y; \mu_i, \sigma_i^2)`, whose

- mean is :math:`\bar\mu = \sum_i w_i \mu_i` and variance the law of total variance: the **aleatoric** part
  :math:`\sum_i w_i \sigma_i^2` (the noise the members expect) plus the **epistemic** part
  :math:`\sum_i w_i (\mu_i - \bar\mu)^2` (their disagreement);
- test log-likelihood per point is :math:`\log \sum_i w_i \prod_d \mathcal{N}(y_d; \mu_{id}, \sigma_{id}^2)`
  (a log-sum-exp), as the UCI benchmark reports it (Hernandez-Lobato and Adams 2015), in the original units when
  the targets were standardised (:class:`csg.data.splits.TargetScale`);
- central intervals are the mixture's quantiles (by bisection on its CDF), and the probability integral
  transform :math:`\mathrm{PIT} = F(y)` of a calibrated model is uniform: ``calibration_error`` is the mean,
  over the levels 0.05, 0.10, ..., 0.95, of :math:`|\Pr(\mathrm{PIT} \le p) - p|` (Kuleshov et al. 2018).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from csg.likelihoods.gaussian import normal_log_density

__all__ = ["COVERAGE_LEVELS", "GaussianMixture", "predict_gaussians", "regression_metrics"]

COVERAGE_LEVELS = (0.5, 0.9, 0.95)
PIT_LEVELS = tuple(round(0.05 * k, 2) for k in range(1, 20))


@dataclass
class GaussianMixture:
    """Members' Gaussians: ``means`` and ``variances`` ``(members, points, columns)`` and ``weights``
    ``(members,)`` summing to 1 (float64)."""

    means: Tensor
    variances: Tensor
    weights: Tensor

    @classmethod
    def of(cls, means: Sequence[Tensor], variances: Sequence[Tensor], weights: Sequence[float]) -> GaussianMixture:
        """The mixture of members' ``(points, columns)`` means and variances, ``weights`` normalised to sum 1."""
        w = torch.tensor([float(v) for v in weights], dtype=torch.float64)
        return cls(torch.stack(list(means)).double(), torch.stack(list(variances)).double(), w / w.sum())

    def _w(self) -> Tensor:
        return self.weights.reshape(-1, 1, 1)

    def mean(self) -> Tensor:
        """The predictive mean, ``(points, columns)``."""
        return (self._w() * self.means).sum(0)

    def aleatoric(self) -> Tensor:
        """:math:`\\sum_i w_i \\sigma_i^2`, ``(points, columns)``."""
        return (self._w() * self.variances).sum(0)

    def epistemic(self) -> Tensor:
        """:math:`\\sum_i w_i (\\mu_i - \\bar\\mu)^2`, ``(points, columns)``."""
        return (self._w() * (self.means - self.mean()).square()).sum(0)

    def variance(self) -> Tensor:
        """The predictive variance: aleatoric plus epistemic."""
        return self.aleatoric() + self.epistemic()

    def member_log_densities(self, y: Tensor) -> Tensor:
        """:math:`\\log \\prod_d \\mathcal{N}(y_d; \\mu_{id}, \\sigma_{id}^2)` per member and point, ``(members, points)``."""
        return normal_log_density(y.double().reshape(self.means.shape[1:]), self.means, self.variances).sum(-1)

    def log_density(self, y: Tensor) -> Tensor:
        """The mixture's log density at each point's target, ``(points,)``."""
        return torch.logsumexp(self.weights.log().reshape(-1, 1) + self.member_log_densities(y), dim=0)

    def cdf(self, y: Tensor) -> Tensor:
        """The mixture's CDF per column at ``y`` ``(points, columns)`` (the PIT of the targets)."""
        z = (y.double().reshape(self.means.shape[1:]) - self.means) / self.variances.sqrt()
        return (self._w() * torch.special.ndtr(z)).sum(0)

    def quantile(self, q: float, iterations: int = 60) -> Tensor:
        """The mixture's ``q``-quantile per point and column, by bisection (to 2^-60 of the bracket)."""
        sd = self.variances.sqrt()
        low, high = (self.means - 12 * sd).amin(0), (self.means + 12 * sd).amax(0)
        for _ in range(iterations):
            middle = (low + high) / 2
            below = self.cdf(middle) < q
            low, high = torch.where(below, middle, low), torch.where(below, high, middle)
        return (low + high) / 2

    def in_units(self, scale) -> GaussianMixture:
        """The mixture in the original units of standardised targets (``scale``: a TargetScale, or None)."""
        if scale is None:
            return self
        means, variances = scale.mean_and_variance(self.means, self.variances)
        return GaussianMixture(means, variances, self.weights)


def regression_metrics(mixture: GaussianMixture, y: Tensor) -> dict[str, float]:
    """``rmse`` and ``mae`` of the predictive mean, mean test ``log_likelihood`` per point (nats; ``nll`` its negative,
    the objective a sweep minimises as for classification), ``coverage_<p>``
    of the central p-intervals (0.5, 0.9, 0.95) with ``width_95`` their mean width, ``calibration_error`` of the
    PIT, and the mean ``aleatoric_var`` and ``epistemic_var``: in the units of ``mixture`` and ``y``."""
    y = y.double().reshape(mixture.means.shape[1:])
    residual = mixture.mean() - y
    log_likelihood = mixture.log_density(y).mean().item()
    metrics = {"rmse": residual.square().mean().sqrt().item(), "mae": residual.abs().mean().item(),
               "log_likelihood": log_likelihood, "nll": -log_likelihood}
    for level in COVERAGE_LEVELS:
        low, high = mixture.quantile((1 - level) / 2), mixture.quantile((1 + level) / 2)
        metrics[f"coverage_{round(100 * level)}"] = ((y >= low) & (y <= high)).double().mean().item()
        if level == 0.95:
            metrics["width_95"] = (high - low).mean().item()
    pit = mixture.cdf(y).flatten()
    metrics["calibration_error"] = sum(abs((pit <= p).double().mean().item() - p) for p in PIT_LEVELS) / len(PIT_LEVELS)
    metrics["aleatoric_var"] = mixture.aleatoric().mean().item()
    metrics["epistemic_var"] = mixture.epistemic().mean().item()
    return metrics


@torch.no_grad()
def predict_gaussians(model: nn.Module, loader, device: torch.device, likelihood, params: Mapping[str, Tensor],
                      autocast: Callable[[], contextlib.AbstractContextManager] | None = None
                      ) -> tuple[Tensor, Tensor, Tensor]:
    """``(means, variances, targets)`` of ``model`` in eval mode over ``loader``, ``(points, columns)`` each, float64
    on the CPU (in the units the model sees)."""
    model.eval()
    means, variances, targets = [], [], []
    for x, y in loader:
        with (autocast or contextlib.nullcontext)():
            output = model(x.to(device, non_blocking=True))
        mean, variance = likelihood.predictive(output.float(), params)
        means.append(mean.double().cpu())
        variances.append(variance.double().cpu())
        targets.append(y.double().reshape(mean.shape).cpu())
    return torch.cat(means), torch.cat(variances), torch.cat(targets)


def evaluate_regression_samples(model: nn.Module, state_dicts, weights: Sequence[float], loader, device: torch.device,
                                likelihood, *, target_scale=None, autocast=None, groups: Sequence[int] | None = None,
                                gather: Callable[[Tensor], Tensor] | None = None):
    """:func:`csg.evaluation.evaluate_samples` for a regression likelihood: each member loaded into ``model`` in
    turn, its Gaussians on ``loader`` kept, and the :func:`regression_metrics` of the weighted mixture (``ensemble``,
    with ``num_samples``), of each member alone (``per_sample``) and of each group's own mixture, all in the original
    units (``target_scale``). ``log_likelihoods``: each member's log density of every test target ``(members,
    points)``, the function-space draws the chain diagnostics read."""
    from csg.evaluation.ensemble import EnsembleResult
    from csg.likelihoods import own_parameters

    gather = gather or (lambda t: t)
    means, variances, targets = [], [], None
    for state_dict in state_dicts:
        model.load_state_dict(state_dict)
        mean, variance, targets = predict_gaussians(model, loader, device, likelihood,
                                                    own_parameters(likelihood, model), autocast)
        means.append(gather(mean))
        variances.append(gather(variance))
        targets = gather(targets)
    if not means:
        raise ValueError("no samples to evaluate")
    weights = list(weights)
    groups = list(groups) if groups is not None else [0] * len(weights)
    y = target_scale.targets(targets) if target_scale is not None else targets
    mixture = GaussianMixture.of(means, variances, weights).in_units(target_scale)
    result = EnsembleResult(ensemble={**regression_metrics(mixture, y), "num_samples": len(means)})
    result.per_sample = [regression_metrics(GaussianMixture(mixture.means[i:i + 1], mixture.variances[i:i + 1],
                                                            torch.ones(1, dtype=torch.float64)), y)
                         for i in range(len(means))]
    result.log_likelihoods = mixture.member_log_densities(y)
    result.targets = y
    if len(set(groups)) > 1:
        for g in sorted(set(groups)):
            rows = [i for i, h in enumerate(groups) if h == g]
            own = GaussianMixture(mixture.means[rows], mixture.variances[rows], mixture.weights[rows] /
                                  mixture.weights[rows].sum())
            result.group_ensembles[g] = {**regression_metrics(own, y), "num_samples": len(rows)}
    return result
