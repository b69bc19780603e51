"""What a user hands a :class:`~csg.posterior.posterior.Posterior`: inputs and labels checked against the run, and
the helpers that load it (its device, its model and data, a forked random state).

Every check is a one-line :class:`~csg.errors.ConfigError` (a ``ValueError``) naming what was given and what is
allowed, raised before any member is evaluated on it, never a torch error.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from csg.components import Config
from csg.errors import ConfigError, describe

__all__ = ["CheckedInputs", "CheckedPairs", "accumulate", "build_run", "checked_inputs", "checked_labels",
           "device_of", "own_random_state", "repeatable", "run_likelihood", "weights_usable"]


def device_of(device: str | torch.device) -> torch.device:
    """``device`` as a torch.device (``auto``, ``cpu``, ``cuda``, ``cuda:1``, ``mps`` or a torch.device); a
    one-line ConfigError (key ``device``) for one this machine lacks."""
    from csg.engine.devices import resolve_device

    if str(device).split(":")[0] == "meta":
        raise ConfigError("device", str(device), "a device that holds values: auto, cpu, cuda, cuda:<index> or mps "
                          "(meta holds shapes only)")
    try:
        return resolve_device(str(device))
    except ConfigError as error:
        raise ConfigError("device", str(device), error.allowed) from None
    except (RuntimeError, ValueError):  # torch.device's own complaint about the name
        raise ConfigError("device", str(device), "auto, cpu, cuda, cuda:<index> or mps") from None


def build_run(cfg: Config, device: torch.device, source: Path, trust_code: bool, shape=None, *,
              key: str = "run_dir", config: str = "a run directory of train.py: its .hydra/config.yaml",
              likelihood, given: tuple[str, ...] = ()):
    """(data, model) of a run's config: ``build_data_and_model``; with ``shape`` (num_classes, input_shape) no data
    is read. Targets resolve without the current folder on ``sys.path``; the data's root and format are checked
    first (:func:`csg.checks.saved.check_run_data`: not inside ``source``, the run directory or posterior file). A config
    that lacks a key is a one-line ConfigError naming ``key`` (``source``) and ``config``, what holds it.
    ``likelihood``: the run's, built once (:func:`run_likelihood`); ``given``: the data keys the
    caller set (``data.root``: a root of the caller's own, from which CIFAR's pickles may be read)."""
    from csg.checks.saved import check_run_data
    from csg.engine.build import build_data_and_model
    from csg.engine.settings import run_settings

    if shape is None:
        check_run_data(cfg, source, trust_code=trust_code, given=given)
    with _saved_config(source, key, config):
        return build_data_and_model(run_settings(cfg, data=shape is None), device, data=shape, likelihood=likelihood)


def run_likelihood(cfg: Config, source: Path, *, key: str = "run_dir",
                   config: str = "a run directory of train.py: its .hydra/config.yaml"):
    """The :class:`csg.likelihoods.Likelihood` of a run's config, built once for its model and its members
    (:func:`csg.engine.build.build_likelihood`), its ``_target_`` resolved as :func:`build_run` resolves targets."""
    from csg.engine.build import build_likelihood
    from csg.engine.settings import run_settings

    with _saved_config(source, key, config):
        return build_likelihood(run_settings(cfg, data=False).likelihood)


@contextlib.contextmanager
def _saved_config(source: Path, key: str, config: str):
    """Targets resolved as a run directory's (:func:`csg.components.run_directory_targets`); a key the saved config
    lacks is a one-line ConfigError naming ``key`` (``source``) and ``config``
    (:func:`csg.checks.saved.saved_config_errors`)."""
    from csg.checks.saved import saved_config_errors
    from csg.components import run_directory_targets

    with saved_config_errors(source, key, config), run_directory_targets():
        yield


@contextlib.contextmanager
def own_random_state(device: torch.device):
    """Building a model draws its initial weights: leave torch's global random state as the caller had it."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        yield


def checked_inputs(x: Any, name: str, input_shape: tuple[int, ...], device: torch.device,
                   dtype: torch.dtype) -> Tensor:
    """``x`` on ``device`` as ``dtype`` once it is a finite floating tensor of shape ``(batch, *input_shape)``
    (batch >= 1); else a one-line ConfigError naming ``name`` (``x``, ``loader[3].x``), what it is and what is allowed."""
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
        moved = x.to(device, dtype, non_blocking=True)
    except Exception as error:  # noqa: BLE001 - a meta tensor, a device torch cannot copy from
        raise ConfigError(f"{name}.device", str(x.device), f"a tensor that can be moved to the posterior's device "
                          f"{device}: {describe(error, limit=120)}") from None
    if not bool(torch.isfinite(moved).all()):  # NaN inputs give a uniform prediction, counted as an error, silently
        bad = int((~torch.isfinite(moved)).flatten(1).any(1).nonzero()[0])
        raise ConfigError(name, f"a batch with NaN or inf in example {bad}", "finite inputs")
    return moved


def checked_labels(y: Any, name: str, batch: int, num_classes: int) -> Tensor:
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


class CheckedPairs:
    """A user's ``(x, y)`` batches, each checked as it is read (every member's pass reads them): inputs by
    ``inputs(batch, name)`` (:meth:`Posterior._inputs <csg.posterior.posterior.Posterior.predict>`), labels by
    :func:`checked_labels`; no batch at all is refused. ``what``: the loader's type, for the message."""

    def __init__(self, batches: Iterable, inputs: Callable[[Any, str], Tensor], num_classes: int, what: str):
        self.batches, self.inputs, self.num_classes, self.what = batches, inputs, num_classes, what

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        count = 0
        for index, batch in enumerate(self.batches):
            if not isinstance(batch, (tuple, list)) or len(batch) != 2:
                raise ConfigError(f"loader[{index}]", type(batch).__name__, "an (x, y) pair: a batch of inputs and "
                                  "its integer labels")
            x = self.inputs(batch, f"loader[{index}].x")
            yield x, checked_labels(batch[1], f"loader[{index}].y", len(x), self.num_classes)
            count += 1
        if not count:
            raise ConfigError("loader", self.what, "a loader that yields at least one (x, y) batch (it yielded none)")


class CheckedInputs:
    """A user's batches of inputs (``x``, or ``(x, y)`` whose ``y`` is ignored), each checked by ``inputs``, yielded
    as ``(x, zeros)`` pairs for what reads ``(x, y)`` batches (the OOD set of :meth:`Posterior.evaluate
    <csg.posterior.posterior.Posterior.evaluate>`); no batch at all is refused."""

    def __init__(self, batches: Iterable, inputs: Callable[[Any, str], Tensor], what: str, name: str = "ood_loader"):
        self.batches, self.inputs, self.what, self.name = batches, inputs, what, name

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        count = 0
        for index, batch in enumerate(self.batches):
            x = self.inputs(batch, f"{self.name}[{index}].x")
            yield x, torch.zeros(len(x), dtype=torch.long)
            count += 1
        if not count:
            raise ConfigError(self.name, self.what, "a loader that yields at least one batch (it yielded none)")


def repeatable(loader: Iterable) -> Iterable:
    """``loader`` if it can be read again in the same order; a one-pass iterator as a list; a shuffling
    DataLoader refused (its batches would not line up member by member)."""
    from torch.utils.data import RandomSampler

    if isinstance(getattr(loader, "sampler", None), RandomSampler):
        raise ValueError("predict_loader needs a loader that gives the same batches in the same order on every "
                         "pass: a DataLoader with shuffle=False")
    return list(loader) if isinstance(loader, Iterator) else loader


def accumulate(average: Tensor | None, probs: Tensor, weight: float) -> Tensor:
    """``average + weight * probs`` in float64 (as :func:`csg.evaluation.evaluate_samples` sums); on the CPU for a
    device without float64 (MPS)."""
    where = probs.device if probs.device.type != "mps" else torch.device("cpu")
    contribution = probs.to(where, torch.float64) * weight
    return contribution if average is None else average.add_(contribution)


def weights_usable(weights: list) -> bool:
    """Members' weights an average can use: finite non-negative numbers (not booleans) whose sum is finite and > 0."""
    if not all(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) and w >= 0
               for w in weights):
        return False
    total = sum(float(w) for w in weights)   # inf where finite weights overflow (fsum would raise)
    return math.isfinite(total) and total > 0
