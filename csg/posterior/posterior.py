"""A finished run's posterior as a Python object: its samples, their weights, the model average and what it says.

:class:`Posterior` reads a run directory of ``train.py`` (or of :func:`csg.train`), or the one file
:meth:`Posterior.save` wrote (:mod:`csg.posterior.export`), and gives the Bayesian model average of its samples,

.. math:: p(y \\mid x) \\approx \\sum_i w_i\\, p(y \\mid x, \\theta_i), \\qquad \\sum_i w_i = 1,

over exactly the members and weights the run's own evaluation averaged
(:func:`csg.posterior.evaluate.ensemble_members`): every chain's samples, equal, harmonic (Appendix F) or contour
importance weights, only the lowest temperature's samples under replica exchange, cyclical-SWAG draws where the
run made them; each member's own predictions (:meth:`~Posterior.predict_members`), their uncertainty
(:mod:`csg.evaluation.uncertainty`), the diagnostics across chains (:mod:`csg.evaluation.diagnostics`) and ArviZ's
``InferenceData`` (ArviZ 0.x) or ``DataTree`` (ArviZ 1.x) of them (:mod:`csg.posterior.draws`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from csg.errors import ConfigError
from csg.posterior.inputs import CheckedInputs, CheckedPairs, accumulate, checked_inputs, device_of, repeatable
from csg.posterior.rundata import checked_data_root, data_config, member_cycles, run_data, run_head, run_ood_loader


class Posterior:
    """The samples of a finished run and their weights: ``len``, iteration, ``predict``, ``predict_members``,
    ``uncertainty``, ``evaluate``, ``diagnostics``, ``save``, ``to_inference_data``.

    Build one with :meth:`load` (or :func:`csg.train`), or of your own model and state dicts with
    :meth:`from_states` (say of :meth:`csg.Chain.sample_states`). Its members: :attr:`names` (each member's sample
    file, or SWAG draw), :attr:`weights` (w_i, summing to 1), :attr:`chains`, :attr:`cycles`, :attr:`weighting`
    (``equal``, ``harmonic``, ``importance``), and their state dicts, :meth:`states`.

    Memory: by default one model is held, and the samples are read from the run directory (or posterior file) one
    at a time whenever they are needed (every :meth:`predict` call reads them all again); ``keep_on_device=True``
    holds every member's state dict on the device for repeated prediction, at the memory of ``len(posterior)``
    models. Predictions use the run's ``trainer.precision`` (autocast), as its evaluation did.

    Attributes:
        model: the one module every sample is loaded into.
        device: where the model (and, with ``keep_on_device``, every sample) lives.
        cfg: the run's saved config (``.hydra/config.yaml``); None for :meth:`from_states`.
        metrics: the run's ``metrics.json``.
        run_dir: the run directory (None for a posterior loaded from a file, or made from state dicts).
        source: where it was loaded from: the run directory, or the posterior file (None: from state dicts).
        num_classes: the number of classes (from ``metrics.json``).
        input_shape: the shape of one input (from ``metrics.json``).
        keep_on_device: whether every sample's state dict is held on the device.
        precision: the run's ``trainer.precision``, under which :meth:`predict` runs.
        data_root: the folder :attr:`data` is read from instead of the run's ``data.root`` (:meth:`load`), or None.
    """

    def __init__(self, *, run_dir: Path | None, cfg: Mapping[str, Any] | None, metrics: dict[str, Any], model: nn.Module,
                 members, device: torch.device, precision, num_classes: int, input_shape: tuple[int, ...], data=None,
                 keep_on_device: bool = False, trust_code: bool = False, source: Path | None = None,
                 ece_bins: int | None = None, likelihood=None, target_scale=None):
        self.run_dir, self.cfg, self.metrics, self.model, self.device = run_dir, cfg, metrics, model, device
        self.likelihood, self.target_scale = likelihood, target_scale  # None: categorical
        where = source if source is not None else run_dir
        self.source = Path(where) if where is not None else None
        self.ece_bins = int(cfg.evaluation.ece_bins) if ece_bins is None else int(ece_bins)
        self.trust_code = bool(trust_code)
        self.precision, self.num_classes, self.input_shape = precision, int(num_classes), tuple(input_shape)
        self._members, self._data = members, data
        self.keep_on_device, self.data_root = bool(keep_on_device), None
        self._states: list[dict[str, Tensor]] | None = None
        if self.keep_on_device:
            self._states = [{key: value.to(device) for key, value in state.items()} for state in members.states()]

    # ------------------------------------------------------------------------------------------------- loading
    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto", keep_on_device: bool = False,
             trust_code: bool = False, model=None, data_root: str | Path | None = None) -> "Posterior":
        """The posterior of the finished run in ``run_dir`` (a directory with ``metrics.json``), or of the posterior
        file ``run_dir`` (``.safetensors`` or ``.pt``, written by :meth:`save`), on ``device``.

        ``device``: ``auto`` (the GPU if CUDA is present, else the CPU), ``cpu``, ``cuda``, ``cuda:1``, ``mps`` or a
        ``torch.device``. ``keep_on_device``: hold every member's state dict on the device (see the class).
        The members are the samples the run recorded (``samples/manifest.json``; a run from before manifests:
        the files its metrics.json names), never a listing of the folder. The run's saved config is checked as
        ``scripts/evaluate_run.py`` checks it, and every sample file is checked (complete, the file its manifest
        records, a sample of the run's model) before anything is computed; anything else (no such
        directory, a run that has not finished, a study on analytic targets, a damaged sample) is a one-line
        :class:`~csg.errors.ConfigError` naming ``run_dir`` (or the sample file) and what is allowed. A posterior
        file is checked the same way (:func:`csg.posterior.export.read_posterior`: its config, and every member
        a state dict of its model), refusals naming ``path``; it needs nothing else of the run. ``model`` (a module
        or a factory; for a posterior file only): the module its members are states of, instead of the one its
        config names: needed for a file that :meth:`save` wrote of a :meth:`from_states` posterior. ``data_root``:
        your own folder to read the run's data from (:attr:`data`, :meth:`evaluate`), instead of the ``data.root``
        its config names (:attr:`cfg` stays the run's); not inside the run directory, CIFAR's pickles allowed.

        The run directory (or file) is read as data (:mod:`csg.io.trust`): weights-only tensors, YAML within
        limits, and only csg's own components; a config naming a ``_target_`` (a custom model, data set or
        sampler) is refused before anything is imported or called, and the run's data (for :meth:`evaluate`
        without a loader, harmonic weights) are not read from inside the run directory nor, for CIFAR's pickled
        batches, from a root the run names. ``trust_code=True`` (as Hugging Face's ``trust_remote_code``) builds
        what the run names: pass it for your own runs of your own components, and for run directories whose author
        you trust.

        The model is built from the run's config and the ``num_classes`` and ``input_shape`` of its metrics.json;
        the data set only when needed (:meth:`evaluate` without a loader, harmonic weights, an older run), and the
        initial weights from a forked random state (torch's global one stays as the caller had it). A regression
        run gives a :class:`~csg.posterior.regression.RegressionPosterior`.
        """
        from csg.posterior.export import SUFFIXES, posterior_from_file
        from csg.posterior.sources import posterior_class, posterior_from_run

        run_dir, root = Path(run_dir), checked_data_root(data_root)
        if run_dir.suffix in SUFFIXES and not run_dir.is_dir():  # a posterior file
            parts, extra = posterior_from_file(run_dir, device_of(device), trust_code, model), {}
        elif model is not None:  # a run directory's config builds its model
            raise ConfigError("model", type(model).__name__, "None for a run directory (its config builds the model)")
        else:
            parts, extra = posterior_from_run(run_dir, device_of(device), trust_code, root), {"trust_code": trust_code}
        data_config(parts["cfg"], root)  # a data_root the run cannot use: refused, as loading the run's data would
        posterior = posterior_class(cls, parts)(**parts, keep_on_device=keep_on_device, **extra)
        posterior.data_root = root
        return posterior

    @classmethod
    def from_states(cls, model, states, *, input_shape, weights=None, chains=None, names=None, num_classes=None,
                    device="cpu", precision: str = "32", ece_bins: int = 15, keep_on_device: bool = False,
                    likelihood=None, target_scale=None) -> "Posterior":
        """The posterior of your own ``model`` (a module, or a factory that builds one) and ``states`` (its state
        dicts theta_i, say :meth:`csg.Chain.sample_states`), with ``weights`` w_i (default equal; normalised),
        each member's chain (default 0) and name; ``input_shape``: one input's shape. ``num_classes`` defaults to
        what the model outputs. Everything but a run's own data works as for a run: :meth:`predict`,
        :meth:`uncertainty`, :meth:`evaluate` and :meth:`diagnostics` of your loaders, :meth:`save` (read back by
        ``Posterior.load(path, model=...)``). ``likelihood`` (a :class:`csg.likelihoods.Likelihood`; default
        categorical) and, for standardised regression targets, ``target_scale`` (:class:`csg.data.splits.TargetScale`):
        a regression likelihood gives a :class:`~csg.posterior.regression.RegressionPosterior`. Bad arguments are one
        line each (:mod:`csg.posterior.sources`)."""
        from csg.posterior.sources import posterior_class, posterior_parts

        parts = posterior_parts(model, states, input_shape=input_shape, weights=weights, chains=chains, names=names,
                                num_classes=num_classes, device=device, precision=precision, ece_bins=ece_bins,
                                likelihood=likelihood, target_scale=target_scale)
        return posterior_class(cls, parts)(**parts, keep_on_device=keep_on_device)

    def save(self, path: str | Path) -> Path:
        """Write the posterior to the one file ``path``, which :meth:`load` reads back without the run directory:
        ``.safetensors`` (safetensors) or ``.pt`` (``torch.save``, read back weights-only); never a pickle of code.

        It holds every member's state dict, the names, chains and weights, the run's config (the model's
        architecture: a built-in model is rebuilt from it by name, a ``_target_`` model needs ``trust_code=True``
        to load, as the run directory does) and its ``metrics.json`` (:mod:`csg.posterior.export`). Written
        atomically; memory: every member's tensors at once. Returns ``path``; a file name with another suffix is a
        one-line :class:`~csg.errors.ConfigError`."""
        from csg.checks.saved import config_yaml
        from csg.posterior.export import write_posterior

        return write_posterior(path, config=config_yaml(self.cfg), metrics=self.metrics, names=self.names,
                               chains=self.chains, weights=self.weights, weighting=self.weighting,
                               states=self._state_dicts(), source=str(self.source or "state dicts"))

    # ------------------------------------------------------------------------------------------------ members
    def __len__(self) -> int:
        """The number of members: samples (of every chain; rung 0 under replica exchange), or SWAG draws."""
        return len(self._members)

    @property
    def names(self) -> list[str]:
        """Each member's sample file relative to ``samples/`` (``chain01/sample_0003_...pt``), or SWAG draw."""
        return list(self._members.names)

    @property
    def weights(self) -> list[float]:
        """Each member's weight w_i in the average sum_i w_i p(y | x, theta_i); they sum to 1 (to rounding).
        The same numbers as ``metrics.json``'s ``per_sample[i]["weight"]``."""
        return list(self._members.weights)

    @property
    def chains(self) -> list[int]:
        """Each member's chain (0 for a one-chain run)."""
        return list(self._members.chains)

    @property
    def cycles(self) -> list[int | None]:
        """Each member's cycle (0-based), as its sample file (or SWAG draw) records it; None for a member of your
        own state dicts (:meth:`from_states`) whose name records none."""
        return member_cycles(self.names)

    @property
    def weighting(self) -> str:
        """How the weights were made, one of ``equal``, ``harmonic`` (Appendix F) or ``importance`` (contour samplers)."""
        return self._members.weighting

    def __iter__(self) -> Iterator[tuple[nn.Module, float]]:
        """``(model, weight)`` for each member in turn, loading ONE sample at a time into the SAME module.

        The module yielded is always :attr:`model` (in eval mode), holding the current member's parameters
        until the next step of the iteration: keep ``copy.deepcopy(model)`` to keep a member. :meth:`predict`
        and :meth:`evaluate` load the members into that module too: do not call them inside the loop."""
        for state, weight in zip(self._state_dicts(), self._members.weights, strict=True):
            self.model.load_state_dict(state)
            self.model.eval()
            yield self.model, weight

    def states(self) -> Iterator[dict[str, Tensor]]:
        """Each member's state dict theta_i, one at a time, in the order of :attr:`names`: read anew from its sample
        file (drawn, for SWAG) on every call, on the CPU; with ``keep_on_device``, the ones held on the device."""
        return self._state_dicts()

    def _state_dicts(self) -> Iterator[dict[str, Tensor]]:
        return iter(self._states) if self._states is not None else self._members.states()

    # --------------------------------------------------------------------------------------------- prediction
    @torch.no_grad()
    def predict(self, x: Tensor) -> Tensor:
        """The model average p(y | x) = sum_i w_i softmax(f(x; theta_i)) of one batch: float32 ``(batch, classes)``
        on the posterior's device, each row summing to 1.

        ``x``: a batch of inputs as the model takes them, i.e. as the run's loaders yield them (the same shape,
        dtype and normalisation: ``(batch, *input_shape)``); it is moved to the posterior's device and to the
        model's floating dtype. A tensor of another shape (one example without its batch dimension, too), an
        integer or boolean tensor (raw pixels: normalise them as the run's loaders do), or one that cannot be moved
        to the device is a one-line :class:`~csg.errors.ConfigError` (a ``ValueError``) naming what was given and
        what is allowed. Every member is evaluated in eval mode, without gradients, under the run's precision;
        the average is accumulated in float64. Without ``keep_on_device`` every call reads all samples again: for
        many batches use :meth:`predict_loader`, which reads each sample once.
        """
        x = self._inputs(x, "x")
        total = float(sum(self._members.weights))
        average: Tensor | None = None
        for model, weight in self:
            average = accumulate(average, self._probs(model, x), weight / total)
        return average.float().to(self.device)

    @torch.no_grad()
    def predict_loader(self, loader: Iterable) -> Tensor:
        """:meth:`predict` over every batch of ``loader``, concatenated in the loader's order: float32
        ``(examples, classes)`` on the posterior's device.

        ``loader`` yields ``(x, y)`` batches (``y`` is ignored) or ``x`` batches, with ``x`` as the run's loaders
        yield it. Each sample is read once and evaluated on every batch, so the loader is read once per member
        and must give the same batches in the same order every time (a ``DataLoader`` without shuffling, a list
        of batches; a one-pass iterator is first read into a list). Every batch is checked as :meth:`predict`
        checks ``x``; a loader that yields no batch is refused the same way.
        """
        batches = repeatable(loader)
        total = float(sum(self._members.weights))
        average: Tensor | None = None
        for model, weight in self:
            probs = [self._probs(model, self._inputs(batch, f"loader[{index}].x"))
                     for index, batch in enumerate(batches)]
            if not probs:
                raise ConfigError("loader", type(loader).__name__, "a loader that yields at least one batch (it yielded "
                                  "none)")
            average = accumulate(average, torch.cat(probs), weight / total)
        return average.float().to(self.device)

    @torch.no_grad()
    def predict_members(self, x: Tensor) -> Tensor:
        """Every member's p(y | x, theta_i) = softmax(f(x; theta_i)) of one batch, in the order of :attr:`names`:
        float32 ``(members, batch, classes)`` on the posterior's device, without gradients (eval mode, the run's
        precision); ``x`` checked as :meth:`predict` checks it. Their average with :attr:`weights` is
        :meth:`predict`'s. Memory: members x batch x classes floats."""
        x = self._inputs(x, "x")
        return torch.stack([self._probs(model, x) for model, _ in self])

    def uncertainty(self, x: Tensor):
        """What the members say about one batch ``x``, per input: a
        :class:`~csg.evaluation.uncertainty.Uncertainty` of float64 ``(batch,)`` tensors, with w_i the
        :attr:`weights` and p_i = p(y | x, theta_i) (:meth:`predict_members`), p̄ = sum_i w_i p_i:

        - ``predictive_entropy`` H[p̄] = -sum_c p̄_c log p̄_c (total uncertainty, nats);
        - ``expected_entropy`` sum_i w_i H[p_i] (aleatoric);
        - ``mutual_information`` H[p̄] - sum_i w_i H[p_i] >= 0 (epistemic: the BALD score);
        - ``disagreement``: the probability that two distinct members drawn by weight predict different classes.

        ``.mean()`` gives each averaged over the batch. The equations: :mod:`csg.evaluation.uncertainty`."""
        from csg.evaluation.uncertainty import member_uncertainty

        probs = self.predict_members(x)
        return member_uncertainty(probs.cpu() if probs.device.type == "mps" else probs, self.weights)

    def _probs(self, model: nn.Module, x: Tensor) -> Tensor:
        """softmax of one member's logits, float32, on the device: :func:`csg.evaluation.batch_probs`, as the run's
        evaluation computes them (under autocast, a batch whose logits overflow is computed again in float32)."""
        from csg.evaluation import batch_probs

        return batch_probs(model, x, self.precision.autocast if self.precision.dtype is not None else None)

    def _inputs(self, batch: Any, name: str) -> Tensor:
        """The inputs of a batch (``x``, or the first item of ``(x, y)``), checked against the run's input shape and
        moved to the posterior's device and the model's dtype (:func:`csg.posterior.inputs.checked_inputs`)."""
        parameter = next(self.model.parameters(), None)
        dtype = parameter.dtype if parameter is not None and parameter.is_floating_point() else torch.float32
        x = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
        return checked_inputs(x, name, self.input_shape, self.device, dtype)

    def _pairs(self, loader: Iterable | None) -> Iterable:
        """The run's test loader (``loader`` None) or the user's ``(x, y)`` batches, each checked as it is read."""
        if loader is None:
            return CheckedPairs(self.data.test, self._inputs, self.num_classes, "the run's test set")
        return CheckedPairs(repeatable(loader), self._inputs, self.num_classes, type(loader).__name__)

    # --------------------------------------------------------------------------------------------- evaluation
    def evaluate(self, loader: Iterable | None = None, ood_loader: Iterable | bool | None = None,
                 reference=None) -> dict[str, float]:
        """Metrics of the model average, key by key (lower is better for the first four):

        - ``test_error_pct``: 100 x the share of examples whose most probable class is wrong;
        - ``nll``: the mean negative log-likelihood -1/n sum_j log p̄(y_j | x_j);
        - ``ece``: the expected calibration error, ``evaluation.ece_bins`` equal-width confidence bins;
        - ``brier``: 1/n sum_j sum_c (p̄_jc - 1{c = y_j})^2, in [0, 2];
        - ``top5_error_pct``: 100 x the share whose class is not among the 5 most probable, only with more than
          5 classes (:func:`csg.evaluation.metrics.classification_metrics`);
        - ``num_samples``: the members averaged;
        - ``predictive_entropy``, ``mutual_information``: their means over the examples, in nats
          (:meth:`uncertainty`);
        - with an OOD set: ``ood_auroc`` (the predictive entropy as a detector of the OOD inputs),
          ``ood_entropy_mean``, ``ood_mutual_information`` (means over the OOD inputs) and ``ood_brier``
          (:func:`csg.evaluation.ood.ood_metrics`);
        - with ``reference`` (a reference predictive's .npz, or one loaded): ``reference_agreement``, ``reference_tv``
          (and ``ood_reference_*``) against it (:func:`csg.evaluation.reference_predictive.flat_scores`).

        Without ``loader``: on the run's test set and OOD set (``ood=...``) with its config: ``metrics.json``'s
        ``ensemble`` (and ``ood.ensemble``) numbers. With a ``loader`` of ``(x, y)`` batches (``y`` integer labels in
        ``[0, num_classes)``): on those, read once per member in the same order (a one-pass iterator is first read
        into a list), each batch checked (``x`` as :meth:`predict` checks it): a bad one is a one-line
        :class:`~csg.errors.ConfigError`. ``ood_loader``: OOD inputs (``x`` or ``(x, y)``); ``False``: none.
        Computed by :func:`csg.evaluation.evaluate_samples`, one member at a time (:mod:`csg.evaluation.heads`).
        """
        from csg.evaluation import evaluate_samples

        if ood_loader is None and loader is None:
            ood = self._run_ood_loader()
        elif ood_loader is None or ood_loader is False:
            ood = None
        else:
            ood = CheckedInputs(repeatable(ood_loader), self._inputs, type(ood_loader).__name__)
        data = self.data.test if loader is None else self._pairs(loader)
        result = evaluate_samples(self.model, self._state_dicts(), self._members.weights, data, self.device,
                                  n_bins=self.ece_bins, autocast=self.precision.autocast, ood_loader=ood,
                                  head=run_head(self))
        metrics = dict(result.ensemble)
        if result.ood is not None:
            metrics.update(ood_auroc=result.ood["auroc"], ood_entropy_mean=result.ood["entropy_mean"],
                           ood_mutual_information=result.ood["mutual_information"], ood_brier=result.ood["brier_ood"])
        if reference is not None:
            from csg.evaluation.reference_predictive import flat_scores, score_result
            metrics.update(flat_scores(score_result(result, reference, key="reference")))
        return metrics

    def _run_ood_loader(self):
        """The loader of the run's OOD set (:func:`csg.posterior.rundata.run_ood_loader`), or None."""
        return run_ood_loader(self)

    def function_draws(self, loader: Iterable | None = None, probabilities: bool = False):
        """Every member's log-likelihood and predicted class of every example of ``loader`` (``(x, y)`` batches;
        ``None``: the run's test set), with ``probabilities`` its class probabilities: a FunctionDraws (CPU)."""
        from csg.posterior.draws import function_draws

        return function_draws(self, self._probs, self._pairs(loader), chains=self.chains, names=self.names,
                              keep_probs=probabilities)

    def diagnostics(self, loader: Iterable | None = None):
        """Do the chains agree, and does the chain sample? A :class:`~csg.evaluation.diagnostics.ChainDiagnostics`:
        split-R-hat and ESS of the members' log-likelihoods across chains and each chain's autocorrelation
        (:mod:`csg.evaluation.diagnostics`; its ``reading`` says whether the chains agree), with the sampler's
        ``temperatures`` as the run measured them (:mod:`csg.evaluation.monitor`), the members' ``spread``
        (:mod:`csg.evaluation.spread`) and the end-of-run ``sampling_check`` line. Without ``loader``: what the run's
        final evaluation wrote to ``metrics.json`` where it did, else computed on the run's test set; with
        ``loader``, the chains' diagnostics and the spread computed on its ``(x, y)`` batches."""
        from csg.posterior.draws import run_diagnostics

        return run_diagnostics(self, loader)

    def to_inference_data(self, loader: Iterable | None = None, probabilities: bool = True):
        """ArviZ's ``InferenceData`` (0.x) or ``DataTree`` (1.x) of the function-space draws on ``loader``'s
        ``(x, y)`` batches (``None``: the run's test set), dimensions ``chain`` and ``draw`` as the chains made them:
        ``log_likelihood["y"]`` (chain, draw, example), ``posterior_predictive["label"]`` and (with
        ``probabilities``) ``["probs"]`` (chain, draw, example, class), ``observed_data["y"]``, ``sample_stats["weight"]``."""
        attrs = {"source": str(self.source), "method": str(self.cfg.sampler.name if self.cfg else "own"),
                 "weighting": self.weighting}
        return self.function_draws(loader, probabilities).to_inference_data(attrs)

    @property
    def data(self):
        """The run's data bundle (``train``, ``test``, ``train_eval`` loaders, ...), built at first use from the
        run's config (its ``data.root``, or :attr:`data_root`): :func:`csg.posterior.rundata.run_data`."""
        if self._data is None and self.cfg is None:
            raise ConfigError("loader", "None", "a loader of (x, y) batches: a posterior of state dicts has no run "
                              "data")
        if self._data is None:
            self._data = run_data(self)
        return self._data

    def __repr__(self) -> str:
        what = f"{self.cfg.sampler.name} on {self.cfg.data.name}" if self.cfg else "from state dicts"
        return (f"Posterior({str(self.source or 'state dicts')!r}: {len(self)} members, {self.weighting} weights, "
                f"{what}, {self.device})")
