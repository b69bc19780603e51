r"""The posterior of a regression run: the members' Gaussians and their mixture (:mod:`csg.evaluation.regression`).

:meth:`csg.Posterior.load` (and :meth:`~csg.Posterior.from_states` with a regression ``likelihood``) gives a
:class:`RegressionPosterior`: :meth:`~RegressionPosterior.predict` returns a :class:`Prediction` of the mixture
:math:`p(y \mid x) = \sum_i w_i \mathcal{N}(y; \mu_i(x), \sigma_i^2(x))`, its mean, variance split into aleatoric and
epistemic parts, central intervals and log density, in the targets' original units (a run that standardised its
targets records the map back in ``metrics.json``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from csg.errors import ConfigError
from csg.evaluation.regression import GaussianMixture, regression_metrics
from csg.posterior.inputs import repeatable
from csg.posterior.posterior import Posterior

__all__ = ["Prediction", "RegressionPosterior"]


@dataclass
class Prediction:
    """The posterior predictive of a batch: a mixture of the members' Gaussians (``mixture``), ``(batch, columns)``
    per quantity, float64 on the CPU, in the targets' original units."""

    mixture: GaussianMixture

    @property
    def mean(self) -> Tensor:
        """:math:`\\bar\\mu = \\sum_i w_i \\mu_i`."""
        return self.mixture.mean()

    @property
    def variance(self) -> Tensor:
        """The predictive variance, :attr:`aleatoric` + :attr:`epistemic`."""
        return self.mixture.variance()

    @property
    def aleatoric(self) -> Tensor:
        """:math:`\\sum_i w_i \\sigma_i^2`: the noise the members expect."""
        return self.mixture.aleatoric()

    @property
    def epistemic(self) -> Tensor:
        """:math:`\\sum_i w_i (\\mu_i - \\bar\\mu)^2`: the members' disagreement."""
        return self.mixture.epistemic()

    def interval(self, level: float = 0.95) -> tuple[Tensor, Tensor]:
        """The central ``level`` interval of the mixture (its quantiles (1 -+ level) / 2)."""
        if not 0 < level < 1:
            raise ConfigError("level", level, "a number in (0, 1)")
        return self.mixture.quantile((1 - level) / 2), self.mixture.quantile((1 + level) / 2)

    def log_prob(self, y: Tensor) -> Tensor:
        """:math:`\\log p(y \\mid x)` of each row's target, ``(batch,)`` (``y``: ``(batch, columns)``, or
        ``(batch,)`` for one column, in the original units)."""
        return self.mixture.log_density(_fitted(y, self.mixture, "y"))


def _fitted(y, mixture: GaussianMixture, key: str) -> Tensor:
    """``y`` as the mixture's ``(points, columns)``: one line naming ``key`` where its shape is another."""
    y = torch.as_tensor(y).double().cpu()
    points, columns = mixture.means.shape[1:]
    if y.shape == (points,) and columns == 1:
        y = y.reshape(points, 1)
    if tuple(y.shape) != (points, columns):
        raise ConfigError(key, f"targets of shape {tuple(y.shape)}", f"({points}, {columns}): one row per input and "
                          f"one column per output of the model ({columns})")
    return y


class RegressionPosterior(Posterior):
    """A :class:`~csg.posterior.posterior.Posterior` of a regression likelihood: :meth:`predict` gives a
    :class:`Prediction`, :meth:`evaluate` regression metrics (:func:`csg.evaluation.regression.regression_metrics`)."""

    task = "regression"

    def _gaussians(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
        from csg.likelihoods import own_parameters

        with self.precision.autocast():
            output = model(x)
        return self.likelihood.predictive(output.float(), own_parameters(self.likelihood, model))

    def _mixture(self, batches: list[Tensor]) -> GaussianMixture:
        means, variances = [], []
        for model, _ in self:
            pairs = [self._gaussians(model, x) for x in batches]
            means.append(torch.cat([m for m, _ in pairs]).double().cpu())
            variances.append(torch.cat([v for _, v in pairs]).double().cpu())
        return GaussianMixture.of(means, variances, self.weights).in_units(self.target_scale)

    @torch.no_grad()
    def predict(self, x: Tensor) -> Prediction:
        """The posterior predictive of one batch ``x`` (checked as for classification): a :class:`Prediction`."""
        return Prediction(self._mixture([self._inputs(x, "x")]))

    @torch.no_grad()
    def predict_loader(self, loader: Iterable) -> Prediction:
        """:meth:`predict` over every batch of ``loader`` (``x`` or ``(x, y)`` batches), each sample read once."""
        batches = [self._inputs(batch, f"loader[{i}].x") for i, batch in enumerate(repeatable(loader))]
        if not batches:
            raise ConfigError("loader", type(loader).__name__, "a loader that yields at least one batch (it yielded none)")
        return Prediction(self._mixture(batches))

    @torch.no_grad()
    def predict_members(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Every member's ``(means, variances)`` of one batch, ``(members, batch, columns)``, in original units."""
        mixture = self.predict(x).mixture
        return mixture.means, mixture.variances

    def uncertainty(self, x: Tensor) -> Prediction:
        """The :class:`Prediction` of ``x``, whose ``aleatoric`` and ``epistemic`` split the predictive variance."""
        return self.predict(x)

    def _targets(self, loader: Iterable | None) -> tuple[list[Tensor], Tensor]:
        """The inputs and targets ``(points, columns)`` (in original units) of ``loader`` (None: the run's test set)."""
        own = loader is None or self._own_loader(loader)
        batches = list(self.data.test) if loader is None else list(repeatable(loader))
        xs, ys = [], []
        for index, batch in enumerate(batches):
            if not isinstance(batch, (tuple, list)) or len(batch) != 2:
                raise ConfigError("loader", type(loader).__name__, f"(x, y) batches; batch {index} is not a pair")
            x = self._inputs(batch, f"loader[{index}].x")
            y = torch.as_tensor(batch[1]).double().cpu()
            if y.ndim == 0 or y.shape[0] != x.shape[0]:
                raise ConfigError("loader", type(loader).__name__, f"(x, y) batches with a target row per input; "
                                  f"batch {index} has {x.shape[0]} inputs and targets of shape {tuple(y.shape)}")
            y = y.reshape(x.shape[0], -1)
            if not bool(torch.isfinite(y).all()):
                raise ConfigError("loader", type(loader).__name__, f"finite targets; batch {index} has NaN or inf")
            xs.append(x)
            ys.append(y)
        if not xs:
            raise ConfigError("loader", type(loader).__name__, "a loader that yields at least one batch (it yielded none)")
        y = torch.cat(ys)
        if own and self.target_scale is not None:  # the run's own loader serves standardised targets
            y = self.target_scale.targets(y)
        return xs, y

    def _own_loader(self, loader) -> bool:
        """Whether ``loader`` is the run's own test loader (or one over its data set), whose targets are standardised
        as the run trained on them."""
        if self.target_scale is None or self._data is None:  # built already if the caller holds its loader
            return False
        test, dataset = self._data.test, getattr(loader, "dataset", None)
        return loader is test or (dataset is not None and dataset is getattr(test, "dataset", None))

    @torch.no_grad()
    def gaussians(self, loader: Iterable | None = None) -> tuple[GaussianMixture, Tensor]:
        """``(mixture, targets)``: the members' Gaussians on ``loader``'s ``(x, y)`` batches (None: the run's test
        set) and the targets, ``(points, columns)``, both in the original units (what :meth:`evaluate` scores)."""
        xs, y = self._targets(loader)
        mixture = self._mixture(xs)
        return mixture, _fitted(y, mixture, "loader")

    @torch.no_grad()
    def evaluate(self, loader: Iterable | None = None, ood_loader=None, reference=None) -> dict[str, float]:
        """:func:`~csg.evaluation.regression.regression_metrics` of the mixture on ``loader``'s ``(x, y)`` batches
        (``y`` in the original units; None: the run's test set), with ``num_samples``."""
        if ood_loader not in (None, False) or reference is not None:
            raise ConfigError("ood_loader" if reference is None else "reference", "given",
                              "None for a regression posterior (out-of-distribution sets and reference predictives "
                              "are classification's)")
        mixture, y = self.gaussians(loader)
        return {**regression_metrics(mixture, y), "num_samples": len(self)}

    @torch.no_grad()
    def diagnostics(self, loader: Iterable | None = None):
        """Split-R-hat and ESS of the members' test log densities across chains
        (:func:`csg.evaluation.diagnostics.chain_diagnostics`), with the sampler's temperatures and the end-of-run
        line as the run recorded them (:mod:`csg.evaluation.monitor`; the members' spread is classification's)."""
        from csg.evaluation.diagnostics import ChainDiagnostics, chain_diagnostics
        from csg.posterior.draws import with_run_readings

        if loader is None and isinstance(self.metrics.get("diagnostics"), dict):
            diagnostics = ChainDiagnostics.from_dict(self.metrics["diagnostics"])
        else:
            mixture, y = self.gaussians(loader)
            diagnostics = chain_diagnostics(mixture.member_log_densities(y), self.chains)
        return with_run_readings(diagnostics, self.metrics)

    def function_draws(self, loader=None, probabilities: bool = False):
        """Not for regression yet: :meth:`diagnostics` reads the members' log densities."""
        raise ConfigError("function_draws", "a regression posterior", "a classification posterior (regression: use "
                          "predict_members and diagnostics)")

    def to_inference_data(self, loader=None, probabilities: bool = True):
        """Not for regression yet (a one-line refusal)."""
        raise ConfigError("to_inference_data", "a regression posterior", "a classification posterior (regression: "
                          "use predict_members and diagnostics)")

    def save(self, path):
        """:meth:`Posterior.save`; a posterior of your own likelihood without a run's config is refused (the file
        could not name it)."""
        if self.cfg is None and "likelihood" not in self.metrics:
            raise ConfigError("likelihood", type(self.likelihood).__name__, "a built-in likelihood for Posterior.save "
                              "of state dicts (a file records csg's likelihoods by name)")
        return super().save(path)
