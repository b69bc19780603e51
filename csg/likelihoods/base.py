r"""The likelihood's contract: what a run's potential sums over the data, and what a member predicts.

A run samples :math:`\exp(-U/T)` with

.. math::

    U(\theta, \phi) = \sum_{i=1}^{N} \ell(f(x_i; \theta), y_i; \phi) \;-\; \log p(\phi)
    \;+\; \tfrac{N\,\mathrm{wd}}{2}\lVert\theta\rVert^2,

:math:`\ell = -\log p(y \mid f, \phi)` the per-example negative log-likelihood (:meth:`Likelihood.nll`),
:math:`\phi` the likelihood's own parameters (a noise precision; none for most), sampled with the weights, and
:math:`-\log p(\phi)` their prior (:meth:`Likelihood.prior_energy`; the sampler's weight decay is the weights'
Gaussian prior and does not touch :math:`\phi`). The samplers take the gradient of the per-datum mean
:math:`U/N` on a mini-batch (:meth:`Likelihood.loss`), as they do for the categorical default.

:math:`\phi` lives on the model, registered as parameters named ``likelihood_<name>`` (:func:`attach`): a
sample, a checkpoint and a posterior file hold it with the weights, and every sampler, part and chain steps
it. The model's forward pass does not use it.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

__all__ = ["PREFIX", "Likelihood", "attach", "own_parameters", "parameter_names"]

PREFIX = "likelihood_"  # the model's parameters that are the likelihood's: likelihood_<name>


class Likelihood:
    """A likelihood: subclass it for your own (``likelihood=custom likelihood._target_=my_project.StudentT``).

    Override :meth:`nll` and, for your task and outputs, :attr:`task`, :meth:`num_outputs`, :meth:`predictive`;
    for parameters of your own sampled with the weights, :meth:`initial_parameters` and :meth:`prior_energy`.

    - :attr:`task`: ``classification`` (integer labels; members predict class probabilities) or ``regression``
      (real targets, shape ``(N,)`` or ``(N, d)``; members predict a mean and a variance per target);
    - :meth:`num_outputs`: the model's outputs for ``targets`` classes (classification) or target columns;
    - :meth:`nll`: :math:`\\ell_i = -\\log p(y_i \\mid f_i, \\phi)`, one value per example (shape ``(batch,)``);
    - :meth:`prior_energy`: :math:`-\\log p(\\phi)` (with the Jacobian of the parameterisation), 0 by default;
    - :meth:`predictive`: one member's prediction: class probabilities, or ``(mean, variance)`` of ``y``.

    A run builds one and shares it among its chains, its loop and its evaluation: it holds settings, not state.
    """

    task = "classification"

    def num_outputs(self, targets: int) -> int:
        """The model's outputs for ``targets`` classes or target columns (one per target by default)."""
        return targets

    def initial_parameters(self) -> dict[str, Tensor]:
        """The initial values of :math:`\\phi`, by name (none by default)."""
        return {}

    def nll(self, output: Tensor, y: Tensor, params: Mapping[str, Tensor]) -> Tensor:
        """:math:`-\\log p(y_i \\mid f(x_i), \\phi)` per example, shape ``(batch,)``."""
        raise NotImplementedError

    def total_nll(self, output: Tensor, y: Tensor, params: Mapping[str, Tensor]) -> Tensor:
        """:math:`\\sum_i \\ell_i` over the batch (the energy estimates of the contour and replica samplers)."""
        return self.nll(output, y, params).sum()

    def prior_energy(self, params: Mapping[str, Tensor]) -> Tensor | float:
        """:math:`-\\log p(\\phi)` up to a constant, with the Jacobian of the parameterisation."""
        return 0.0

    def loss(self, output: Tensor, y: Tensor, params: Mapping[str, Tensor], num_data: int,
             scale: float | None = None) -> Tensor:
        """The mini-batch's estimate of :math:`U/N` without the weight decay: the mean of :meth:`nll` plus
        :meth:`prior_energy` / ``num_data``. ``scale`` (DDP): the sum of the shard's :meth:`nll` times ``scale``
        instead of the mean, so that averaging the processes' gradients gives the global mean's."""
        per_example = self.nll(output, y, params)
        data_term = per_example.mean() if scale is None else per_example.sum() * scale
        prior = self.prior_energy(params)
        return data_term if isinstance(prior, float) and prior == 0.0 else data_term + prior / num_data

    def score(self, output: Tensor, y: Tensor, params: Mapping[str, Tensor]) -> Tensor:
        """What the loop sums over an epoch's batches: correct predictions (classification) or the squared error
        of the predicted mean (regression); the epoch logs ``train_acc_pct`` or ``train_rmse`` from it."""
        if self.task == "classification":
            return (output.argmax(-1) == y).sum()
        mean, _ = self.predictive(output.float(), params)
        return (mean - y.reshape(mean.shape)).square().sum()

    def predictive(self, output: Tensor, params: Mapping[str, Tensor]):
        """One member's prediction from the model's ``output``: class probabilities ``(batch, classes)``
        (classification) or ``(mean, variance)``, each ``(batch, targets)`` (regression)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def attach(likelihood: Likelihood, model: nn.Module) -> nn.Module:
    """Register :math:`\\phi` on ``model`` as parameters ``likelihood_<name>`` (in the model's dtype and device);
    returns ``model``. A model holding them already keeps its values."""
    like = next(model.parameters(), None)
    for name, value in likelihood.initial_parameters().items():
        if not hasattr(model, PREFIX + name):
            value = torch.as_tensor(value, dtype=like.dtype if like is not None else None)
            model.register_parameter(PREFIX + name, nn.Parameter(value.to(like.device if like is not None else "cpu")))
    return model


def parameter_names(likelihood: Likelihood) -> list[str]:
    """The model's parameter names that hold :math:`\\phi`."""
    return [PREFIX + name for name in likelihood.initial_parameters()]


def own_parameters(likelihood: Likelihood, model: nn.Module) -> dict[str, Tensor]:
    """:math:`\\phi` as held by ``model`` (a DDP or compiled wrapper is looked through), by its own names."""
    names = likelihood.initial_parameters()
    if not names:
        return {}
    inner = model
    for attribute in ("module", "_orig_mod"):
        while hasattr(inner, attribute) and isinstance(getattr(inner, attribute), nn.Module):
            inner = getattr(inner, attribute)
    missing = [name for name in names if not isinstance(getattr(inner, PREFIX + name, None), Tensor)]
    if missing:
        raise ValueError(f"the model has no likelihood parameter {PREFIX + missing[0]} (csg.likelihoods.attach adds it)")
    return {name: getattr(inner, PREFIX + name) for name in names}
