"""A finished run's posterior as a Python object: its samples, their weights, and the model average.

:class:`Posterior` reads a run directory of ``train.py`` (or of :func:`csg.train`) and gives the Bayesian model
average of its samples,

.. math:: p(y \\mid x) \\approx \\sum_i w_i\\, p(y \\mid x, \\theta_i), \\qquad \\sum_i w_i = 1,

over exactly the members and weights the run's own evaluation averaged
(:func:`csg.posterior.evaluate.ensemble_members`): every chain's samples, equal, harmonic (Appendix F) or contour importance weights, only the lowest temperature's
samples under replica exchange, cyclical-SWAG draws where the run made them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException
from torch import Tensor, nn

from csg.errors import ConfigError, describe

class Posterior:
    """The samples of a finished run and their weights: ``len``, iteration, ``predict``, ``evaluate``.

    Build one with :meth:`load` (or :func:`csg.train`). Its members: :attr:`names` (each member's sample file, or
    SWAG draw), :attr:`weights` (w_i, summing to 1), :attr:`chains`, :attr:`weighting` (``equal``, ``harmonic``,
    ``importance``).

    Memory: by default one model is held, and the samples are read from the run directory one at a time whenever
    they are needed (every :meth:`predict` call reads them all again); ``keep_on_device=True`` holds every
    member's state dict on the device for repeated prediction, at the memory of ``len(posterior)`` models.
    Predictions use the run's ``trainer.precision`` (autocast), as its evaluation did.

    Attributes:
        model: the one module every sample is loaded into.
        device: where the model (and, with ``keep_on_device``, every sample) lives.
        cfg: the run's saved config (``.hydra/config.yaml``).
        metrics: the run's ``metrics.json``.
        run_dir: the run directory.
        num_classes: the number of classes (from ``metrics.json``).
        input_shape: the shape of one input (from ``metrics.json``).
        keep_on_device: whether every sample's state dict is held on the device.
        precision: the run's ``trainer.precision``, under which :meth:`predict` runs.
    """

    def __init__(self, *, run_dir: Path, cfg: DictConfig, metrics: dict[str, Any], model: nn.Module, members,
                 device: torch.device, precision, num_classes: int, input_shape: tuple[int, ...], data=None,
                 keep_on_device: bool = False, trust_code: bool = False):
        self.run_dir, self.cfg, self.metrics, self.model, self.device = run_dir, cfg, metrics, model, device
        self.trust_code = bool(trust_code)
        self.precision, self.num_classes, self.input_shape = precision, int(num_classes), tuple(input_shape)
        self._members, self._data = members, data
        self.keep_on_device = bool(keep_on_device)
        self._states: list[dict[str, Tensor]] | None = None
        if self.keep_on_device:
            self._states = [{key: value.to(device) for key, value in state.items()} for state in members.states()]

    # ------------------------------------------------------------------------------------------------- loading
    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto",
             keep_on_device: bool = False, trust_code: bool = False) -> "Posterior":
        """The posterior of the finished run in ``run_dir`` (a directory with ``metrics.json``), on ``device``.

        ``device``: ``auto`` (the GPU if CUDA is present, else the CPU), ``cpu``, ``cuda``, ``cuda:1``, ``mps`` or a
        ``torch.device``. ``keep_on_device``: hold every member's state dict on the device (see the class).
        The members are the samples the run recorded (``samples/manifest.json``; a run from before manifests:
        the files its metrics.json names), never a listing of the folder. The run's saved config is checked as
        ``scripts/evaluate_run.py`` checks it, and every sample file is checked (complete, the file its manifest
        records, a sample of the run's model) before anything is computed; anything else (no such
        directory, a run that has not finished, a study on analytic targets, a damaged sample) is a one-line
        :class:`~csg.errors.ConfigError` naming ``run_dir`` (or the sample file) and what is allowed.

        The run directory is read as data (:mod:`csg.io.trust`): weights-only tensors, YAML within limits, and only
        csg's own components; a config naming a ``_target_`` (a custom model, data set or sampler) is refused
        before anything is imported or called, and the run's data (for :meth:`evaluate` without a loader, harmonic
        weights) are not read from inside the run directory nor, for CIFAR's pickled batches, at all.
        ``trust_code=True`` (as Hugging Face's ``trust_remote_code``) builds what the run names: pass it for
        your own runs of your own components, and for run directories whose author you trust.

        The model is built from the run's config and the ``num_classes`` and ``input_shape`` its metrics.json
        records, without reading the data; the data set is built only when needed (:meth:`evaluate` without a
        loader, harmonic weights, or a run whose metrics.json predates those keys). The model's initial weights are
        drawn from a forked random state: torch's global random state stays as the caller had it.
        """
        from csg.engine.samples import SampleStore
        from csg.engine.devices import resolve_device
        from csg.posterior.evaluate import ensemble_members
        from csg.posterior.store import finished_metrics, load_run_config, sample_paths
        from csg.engine.devices import Precision

        run_dir = Path(run_dir)
        cfg = load_run_config(run_dir, trust_code=trust_code)
        metrics = finished_metrics(run_dir, cfg)
        device = _device(device, resolve_device)
        store = SampleStore(run_dir / "samples")
        # the samples the run recorded (its manifests), each checked, before the model or the data is built
        store.verify(sample_paths(store, int(cfg.sampler.get("chains", 1))))
        precision = Precision(str(cfg.trainer.precision), device)
        recorded = metrics.get("num_classes"), metrics.get("input_shape")
        with _own_random_state(device):
            if None in recorded:  # a run from before metrics.json recorded them: the data tells
                data, model = _build(cfg, device, run_dir, trust_code)
                recorded = data.num_classes, tuple(data.input_shape)
            else:
                data = None
                _, model = _build(cfg, device, run_dir, trust_code, shape=SimpleNamespace(
                    num_classes=int(recorded[0]), input_shape=tuple(recorded[1])))
            holder: dict[str, Any] = {"data": data}

            def training_data():
                if holder["data"] is None:
                    holder["data"], _ = _build(cfg, device, run_dir, trust_code)
                return holder["data"]

            members = ensemble_members(cfg, model, store, training_data, device, precision)
        model.eval()
        return cls(run_dir=run_dir, cfg=cfg, metrics=metrics, model=model, members=members, device=device,
                   precision=precision, num_classes=recorded[0], input_shape=recorded[1], data=holder["data"],
                   keep_on_device=keep_on_device, trust_code=trust_code)

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
            average = _accumulate(average, self._probs(model, x), weight / total)
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
        batches = _repeatable(loader)
        total = float(sum(self._members.weights))
        average: Tensor | None = None
        for model, weight in self:
            probs = [self._probs(model, self._inputs(batch, f"loader[{index}].x"))
                     for index, batch in enumerate(batches)]
            if not probs:
                raise ConfigError("loader", type(loader).__name__, "a loader that yields at least one batch (it yielded "
                                  "none)")
            average = _accumulate(average, torch.cat(probs), weight / total)
        return average.float().to(self.device)

    def _probs(self, model: nn.Module, x: Tensor) -> Tensor:
        """softmax of one member's logits, float32, on the device: :func:`csg.evaluation.batch_probs`, as the run's
        evaluation computes them (under autocast, a batch whose logits overflow is computed again in float32)."""
        from csg.evaluation import batch_probs

        return batch_probs(model, x, self.precision.autocast if self.precision.dtype is not None else None)

    def _inputs(self, batch: Any, name: str) -> Tensor:
        """The inputs of a batch (``x``, or the first item of ``(x, y)``), checked against the run's input shape and
        moved to the posterior's device and the model's dtype (:func:`_checked_inputs`)."""
        parameter = next(self.model.parameters(), None)
        dtype = parameter.dtype if parameter is not None and parameter.is_floating_point() else torch.float32
        x = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
        return _checked_inputs(x, name, self.input_shape, self.device, dtype)

    # --------------------------------------------------------------------------------------------- evaluation
    def evaluate(self, loader: Iterable | None = None) -> dict[str, float]:
        """Metrics of the model average: ``test_error_pct``, ``nll``, ``ece``, ``brier``, ``num_samples``.

        Without ``loader``: on the run's own test set, with its config (``evaluation.ece_bins``, precision,
        loader): the numbers of ``metrics.json``'s ``ensemble`` (on the device the run evaluated on). With a
        ``loader`` of ``(x, y)`` batches (``x`` as the run's loaders yield it, ``y`` integer labels in
        ``[0, num_classes)``): on those data, read once per member, so in the same order every time (a
        ``DataLoader`` without shuffling, a list; a one-pass iterator is first read into a list). Each batch is
        checked as it is read (``x`` as :meth:`predict` checks it; ``y`` one integer label per example, each in
        range): a bad one is a one-line :class:`~csg.errors.ConfigError` (a ``ValueError``), never a torch error.
        Computed by :func:`csg.evaluation.evaluate_samples`, one member at a time.
        """
        from csg.evaluation import evaluate_samples

        if loader is None:
            loader = self.data.test
        else:
            loader = _CheckedPairs(_repeatable(loader), self, type(loader).__name__)
        result = evaluate_samples(self.model, self._state_dicts(), self._members.weights, loader, self.device,
                                  n_bins=int(self.cfg.evaluation.ece_bins), autocast=self.precision.autocast)
        return result.ensemble

    @property
    def data(self):
        """The run's data bundle (``train``, ``test``, ``train_eval`` loaders, ...), built at first use."""
        if self._data is None:
            with _own_random_state(self.device):
                self._data, _ = _build(self.cfg, self.device, self.run_dir, self.trust_code)
        return self._data

    def __repr__(self) -> str:
        return (f"Posterior({str(self.run_dir)!r}: {len(self)} members, {self.weighting} weights, "
                f"{self.cfg.sampler.name} on {self.cfg.data.name}, device {self.device})")


# ----------------------------------------------------------------------------------------------------- helpers
def _device(device: str | torch.device, resolve) -> torch.device:
    """``device`` as a torch.device; a one-line ConfigError (key ``device``) for one this machine lacks."""
    try:
        return resolve(str(device))
    except ConfigError as error:
        raise ConfigError("device", str(device), error.allowed) from None
    except (RuntimeError, ValueError):  # torch.device's own complaint about the name
        raise ConfigError("device", str(device), "auto, cpu, cuda, cuda:<index> or mps") from None


def _build(cfg: DictConfig, device: torch.device, run_dir: Path, trust_code: bool, shape=None):
    """(data, model) of the run: ``build_data_and_model``; with ``shape`` (num_classes, input_shape) no data is read.
    Targets resolve without the current folder on ``sys.path``; the data's root and format are checked first
    (:func:`csg.io.trust.check_run_data`)."""
    from csg.engine.build import build_data_and_model
    from csg.components import run_directory_targets
    from csg.posterior.store import SAVED_CONFIG
    from csg.io.trust import check_run_data

    if shape is None:
        check_run_data(cfg, run_dir, trust_code=trust_code)
    try:
        with run_directory_targets():
            return build_data_and_model(cfg, device, data=shape)
    except OmegaConfBaseException as error:  # a key the saved config lacks
        raise ConfigError("run_dir", str(run_dir), f"a run directory of train.py: its {SAVED_CONFIG} is not a "
                          f"train.py config ({describe(error, limit=160)})") from None


@contextlib.contextmanager
def _own_random_state(device: torch.device):
    """Building a model draws its initial weights: leave torch's global random state as the caller had it."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        yield


def _checked_inputs(x: Any, name: str, input_shape: tuple[int, ...], device: torch.device,
                    dtype: torch.dtype) -> Tensor:
    """``x`` on ``device`` as ``dtype`` once it is a floating tensor of shape ``(batch, *input_shape)`` (batch >= 1);
    else a one-line ConfigError naming ``name`` (``x``, ``loader[3].x``), what it is and what is allowed."""
    wanted = f"(batch, {', '.join(map(str, input_shape))})" if input_shape else "(batch,)"
    if not isinstance(x, Tensor):
        raise ConfigError(name, type(x).__name__, f"a tensor of inputs of shape {wanted} (or an (x, y) pair of them)")
    shape = tuple(x.shape)
    if shape[1:] != tuple(input_shape) or len(shape) != len(input_shape) + 1 or shape[0] == 0:
        hint = ("; one example: x.unsqueeze(0)" if shape == tuple(input_shape)
                else "; at least one example" if shape[1:] == tuple(input_shape) else "")
        raise ConfigError(f"{name}.shape", shape, f"{wanted}: a batch of the run's inputs, whose input_shape is "
                          f"{tuple(input_shape)}{hint}")
    if not x.is_floating_point():
        raise ConfigError(f"{name}.dtype", str(x.dtype).replace("torch.", ""),
                          "a floating dtype (float32, as the run's loaders yield inputs, normalised; raw integer "
                          "pixels need the run's normalisation)")
    try:
        return x.to(device, dtype, non_blocking=True)
    except Exception as error:  # noqa: BLE001 - a meta tensor, a device torch cannot copy from
        raise ConfigError(f"{name}.device", str(x.device), f"a tensor that can be moved to the posterior's device "
                          f"{device}: {describe(error, limit=120)}") from None


def _checked_labels(y: Any, name: str, batch: int, num_classes: int) -> Tensor:
    """``y`` as a tensor of ``batch`` integer labels in ``[0, num_classes)``; else a one-line ConfigError."""
    allowed = f"{batch} integer labels in [0, {num_classes}) (the run's {num_classes} classes), one per example"
    if not isinstance(y, Tensor):
        try:
            y = torch.as_tensor(y)
        except Exception:  # noqa: BLE001 - not numbers
            raise ConfigError(name, type(y).__name__, allowed) from None
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ConfigError(f"{name}.dtype", str(y.dtype).replace("torch.", ""), f"{allowed}: an integer dtype (int64)")
    if tuple(y.shape) != (batch,):
        raise ConfigError(f"{name}.shape", tuple(y.shape), allowed)
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= num_classes:
        raise ConfigError(name, low if low < 0 else high, allowed)
    return y


class _CheckedPairs:
    """A user's ``(x, y)`` batches for :meth:`Posterior.evaluate`, each checked as it is read (every member's pass
    reads them): inputs by :func:`_checked_inputs`, labels by :func:`_checked_labels`; no batch at all is refused."""

    def __init__(self, batches: Iterable, posterior: Posterior, what: str):
        self.batches, self.posterior, self.what = batches, posterior, what

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        count = 0
        for index, batch in enumerate(self.batches):
            if not isinstance(batch, (tuple, list)) or len(batch) != 2:
                raise ConfigError(f"loader[{index}]", type(batch).__name__, "an (x, y) pair: a batch of inputs and "
                                  "its integer labels")
            x = self.posterior._inputs(batch, f"loader[{index}].x")
            yield x, _checked_labels(batch[1], f"loader[{index}].y", len(x), self.posterior.num_classes)
            count += 1
        if not count:
            raise ConfigError("loader", self.what, "a loader that yields at least one (x, y) batch (it yielded none)")


def _repeatable(loader: Iterable) -> Iterable:
    """``loader`` if it can be read again in the same order; a one-pass iterator as a list; a shuffling
    DataLoader refused (its batches would not line up member by member)."""
    from torch.utils.data import RandomSampler

    if isinstance(getattr(loader, "sampler", None), RandomSampler):
        raise ValueError("predict_loader needs a loader that gives the same batches in the same order on every "
                         "pass: a DataLoader with shuffle=False")
    return list(loader) if isinstance(loader, Iterator) else loader


def _accumulate(average: Tensor | None, probs: Tensor, weight: float) -> Tensor:
    """``average + weight * probs`` in float64 (as :func:`csg.evaluation.evaluate_samples` sums); on the CPU for a
    device without float64 (MPS)."""
    where = probs.device if probs.device.type != "mps" else torch.device("cpu")
    contribution = probs.to(where, torch.float64) * weight
    return contribution if average is None else average.add_(contribution)
