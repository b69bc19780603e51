"""Where a :class:`~csg.posterior.posterior.Posterior` comes from: a finished run directory
(:func:`posterior_from_run`, :meth:`csg.Posterior.load`), or your own model and state dicts, without a run directory or
a config (:func:`posterior_parts`, :meth:`csg.Posterior.from_states`); a posterior file
is :mod:`csg.posterior.export`'s.

Of your own states: the members are the given state dicts theta_i, each a state of ``model`` (checked: the same keys
and shapes before anything is computed), with weights w_i (equal by default, normalised to sum to 1), and the model average
is p(y | x) = sum_i w_i softmax(f(x; theta_i)), as for a run. ``model`` is a module or a callable that builds one
(your model factory); it is moved to ``device`` and put in eval mode.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

from csg.errors import ConfigError, describe

__all__ = ["checked_states", "own_model", "posterior_from_run", "posterior_parts"]


def own_model(model: nn.Module | Callable[[], nn.Module], device: torch.device) -> nn.Module:
    """A copy of ``model`` (a module: the caller's stays as it is, its weights and mode untouched), or what a
    factory returns (called once), on ``device``, in eval mode; a one-line ConfigError (key ``model``) else."""
    if isinstance(model, nn.Module):
        model = copy.deepcopy(model)
    else:
        if not callable(model):
            raise ConfigError("model", type(model).__name__, "a torch.nn.Module or a callable that returns one")
        model = model()
        if not isinstance(model, nn.Module):
            raise ConfigError("model", f"a factory that returned {type(model).__name__}", "a torch.nn.Module")
    return model.to(device).eval()


def _numbers(key: str, values: Any, kind: type, what: str) -> tuple:
    """``values`` as a tuple of ``kind`` (a one-line ConfigError naming ``key`` for anything else)."""
    try:
        return tuple(kind(value) for value in values)
    except (TypeError, ValueError):
        raise ConfigError(key, str(values)[:80], what) from None


def checked_states(states: Sequence[dict[str, Tensor]], reference: dict[str, Tensor], key: str = "states"
                   ) -> list[dict[str, Tensor]]:
    """``states`` as a list of CPU state dicts, each with ``reference``'s keys and shapes (a one-line ConfigError
    naming ``key`` and the first member that differs)."""
    states = list(states)
    if not states:
        raise ConfigError(key, "[]", "at least one state dict of the model")
    for index, state in enumerate(states):
        if not isinstance(state, dict) or set(state) != set(reference):
            have = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ConfigError(f"{key}[{index}]", str(have)[:120], f"a state dict of the model, with its keys "
                              f"{sorted(reference)[:6]}{' ...' if len(reference) > 6 else ''}")
        for name, tensor in state.items():
            if not isinstance(tensor, Tensor) or tuple(tensor.shape) != tuple(reference[name].shape):
                shape = list(tensor.shape) if isinstance(tensor, Tensor) else type(tensor).__name__
                raise ConfigError(f"{key}[{index}]", f"{name} of shape {shape}",
                                  f"the model's shape {list(reference[name].shape)}")
            if tensor.is_floating_point() != reference[name].is_floating_point() or tensor.is_meta:
                raise ConfigError(f"{key}[{index}]", f"{name} of dtype {tensor.dtype} on {tensor.device.type}",
                                  f"a tensor holding values of the model's kind ({reference[name].dtype})")
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise ConfigError(f"{key}[{index}]", f"{name} with non-finite values", "finite weights (a member "
                                  "whose weights hold NaN or infinity would make every prediction NaN)")
    # copies: the caller's later training must not move the posterior's members
    return [{name: tensor.detach().to("cpu", copy=True) for name, tensor in state.items()} for state in states]


def posterior_parts(model: nn.Module | Callable[[], nn.Module], states: Sequence[dict[str, Tensor]], *,
                    input_shape: Sequence[int], weights: Sequence[float] | None = None,
                    chains: Sequence[int] | None = None, names: Sequence[str] | None = None,
                    num_classes: int | None = None, device: str | torch.device = "cpu", precision: str = "32",
                    ece_bins: int = 15, likelihood=None, target_scale=None) -> dict[str, Any]:
    """The keyword arguments of :class:`~csg.posterior.posterior.Posterior` for ``model`` and ``states``
    (see :meth:`~csg.posterior.posterior.Posterior.from_states`), each argument checked in one line."""
    from csg.checks.config import PRECISIONS
    from csg.engine.devices import Precision
    from csg.posterior.evaluate import EnsembleMembers
    from csg.posterior.inputs import device_of, weights_usable

    device = device_of(device)
    from csg.likelihoods import attach

    likelihood = checked_likelihood(likelihood, target_scale)
    model = attach(likelihood, own_model(model, device))  # a copy: the caller's module stays as it was
    states = checked_states(states, model.state_dict())
    count = len(states)
    shape_rule = "positive whole numbers: one input's shape"
    input_shape = _numbers("input_shape", input_shape, int, shape_rule)
    if not input_shape or min(input_shape) < 1:
        raise ConfigError("input_shape", str(list(input_shape)), shape_rule)
    weights = [1.0] * count if weights is None else _numbers("weights", weights, float, "numbers")
    if len(weights) != count or not weights_usable(weights):
        raise ConfigError("weights", str(weights)[:120], f"{count} finite non-negative numbers with a finite "
                          "positive sum")
    weights = [w / sum(weights) for w in weights]
    chains = [0] * count if chains is None else list(_numbers("chains", chains, int, "whole numbers"))
    if not isinstance(ece_bins, int) or isinstance(ece_bins, bool) or ece_bins < 1:
        raise ConfigError("ece_bins", str(ece_bins), "a positive whole number")
    names = [f"sample_{index:04d}" for index in range(count)] if names is None else [str(n) for n in names]
    for key, values in (("chains", chains), ("names", names)):
        if len(values) != count:
            raise ConfigError(key, f"{len(values)} values", f"one per state dict ({count})")
    if precision not in PRECISIONS:
        raise ConfigError("precision", str(precision), ", ".join(PRECISIONS[:-1]) + f" or {PRECISIONS[-1]}")
    try:  # what the model says: one forward pass of zeros
        with torch.no_grad():
            model.load_state_dict(states[0])
            outputs = int(model(torch.zeros(1, *input_shape, device=device)).shape[-1])
    except Exception as error:  # noqa: BLE001 - the model's own complaint, in one line
        raise ConfigError("input_shape", str(list(input_shape)), f"the shape of one input the model takes "
                          f"(a batch of it: {describe(error, limit=120)})") from None
    if num_classes is None:
        num_classes = outputs
    elif likelihood.task == "classification" and num_classes != outputs:
        raise ConfigError("num_classes", str(num_classes), f"None or the model's {outputs} outputs (one per class)")
    members = EnsembleMembers(names, chains, weights, "equal" if len(set(weights)) == 1 else "given",
                              lambda: iter(states))
    facts = {"num_classes": int(num_classes), "input_shape": list(input_shape), "num_samples": count,
             "precision": str(precision), "ece_bins": int(ece_bins), "task": likelihood.task,
             **regression_facts(likelihood, target_scale)}
    return dict(run_dir=None, source=None, cfg=None, metrics=facts, model=model,
                members=members, device=device, precision=Precision(str(precision), device),
                num_classes=int(num_classes), input_shape=input_shape, ece_bins=int(ece_bins), likelihood=likelihood,
                target_scale=target_scale)


def checked_likelihood(likelihood, target_scale):
    """``likelihood`` (None: categorical), a :class:`csg.likelihoods.Likelihood`, with ``target_scale`` None or a
    :class:`csg.data.splits.TargetScale` of a regression likelihood; a one-line ConfigError else."""
    from csg.data.splits import TargetScale
    from csg.likelihoods import Categorical, Likelihood

    likelihood = Categorical() if likelihood is None else likelihood
    if not isinstance(likelihood, Likelihood):
        raise ConfigError("likelihood", type(likelihood).__name__, "a csg.likelihoods.Likelihood, or None (categorical)")
    if target_scale is not None and (likelihood.task != "regression" or not isinstance(target_scale, TargetScale)):
        raise ConfigError("target_scale", type(target_scale).__name__, "None, or a csg.data.splits.TargetScale with "
                          "a regression likelihood")
    return likelihood


def regression_facts(likelihood, target_scale) -> dict[str, Any]:
    """What a posterior file records of a regression posterior: its built-in likelihood (``likelihood``: the name
    and keys :func:`csg.likelihoods.create_likelihood` takes) and ``target_scale``."""
    from csg.likelihoods import LIKELIHOODS

    facts: dict[str, Any] = {}
    name = next((n for n, kind in LIKELIHOODS.items() if type(likelihood) is kind), None)
    if name is not None and name != "categorical":
        facts["likelihood"] = {"name": name, **vars(likelihood)}
    if target_scale is not None:
        facts["target_scale"] = target_scale.as_dict()
    return facts


def recorded_regression(metrics: dict[str, Any], likelihood=None) -> tuple[Any, Any]:
    """``(likelihood, target_scale)`` of a run (or posterior file): ``likelihood`` (its config's, built already), else
    the one its metrics record (a file of :meth:`csg.Posterior.from_states`), else categorical; ``target_scale`` as
    its metrics record it."""
    from csg.data.splits import TargetScale
    from csg.likelihoods import create_likelihood

    if likelihood is None:
        spec = dict(metrics.get("likelihood") or {"name": "categorical"})
        likelihood = create_likelihood(spec.pop("name"), **spec)
    scale = metrics.get("target_scale")
    return likelihood, TargetScale.from_dict(scale) if isinstance(scale, dict) else None


def posterior_class(cls: type, parts: dict[str, Any]) -> type:
    """The class of a posterior with these parts: ``cls`` or its subclass for the likelihood's task
    (:class:`csg.posterior.regression.RegressionPosterior`, whose ``task`` is regression)."""
    task = getattr(parts.get("likelihood"), "task", "classification")
    kinds = [cls, *cls.__subclasses__()]
    return next((kind for kind in kinds if getattr(kind, "task", "classification") == task), cls)


def posterior_from_run(run_dir: Path, device: torch.device, trust_code: bool, data_root: str | None = None
                       ) -> dict[str, Any]:
    """The keyword arguments of :class:`~csg.posterior.posterior.Posterior` for the finished run ``run_dir`` (see
    :meth:`~csg.posterior.posterior.Posterior.load`): its saved config and metrics, the samples its manifests
    record (each checked before the model or the data is built), the model (built from a forked random state,
    without the data where metrics.json records the classes and input shape) and the ensemble's members. The data,
    where loading needs them (harmonic weights, a run older than metrics.json's shapes), are read from
    ``data_root`` when given (:func:`csg.posterior.rundata.data_config`), else from the root the config names."""
    from csg.engine.devices import Precision
    from csg.engine.samples import SampleStore
    from csg.engine.settings import evaluation_settings
    from csg.posterior.evaluate import ensemble_members
    from csg.posterior.inputs import build_run, own_random_state, run_likelihood
    from csg.posterior.rundata import data_config, given_keys
    from csg.checks.saved import load_run_config
    from csg.posterior.store import check_recorded_members, finished_metrics, sample_paths

    cfg = load_run_config(run_dir, trust_code=trust_code)
    metrics = finished_metrics(run_dir, cfg)
    store = SampleStore(run_dir / "samples")
    store.verify(sample_paths(store, int(cfg.sampler.get("chains", 1)), recorded=metrics))
    precision = Precision(str(cfg.trainer.precision), device)
    recorded = metrics.get("num_classes"), metrics.get("input_shape")
    holder: dict[str, Any] = {"data": None}
    likelihood, target_scale = recorded_regression(metrics, run_likelihood(cfg, run_dir))
    data_cfg, given = data_config(cfg, data_root), given_keys(data_root)
    with own_random_state(device):
        if None in recorded:  # a run from before metrics.json recorded them: the data tell
            holder["data"], model = build_run(data_cfg, device, run_dir, trust_code, likelihood=likelihood, given=given)
            recorded = holder["data"].num_classes, tuple(holder["data"].input_shape)
        else:
            _, model = build_run(cfg, device, run_dir, trust_code, shape=SimpleNamespace(
                num_classes=int(recorded[0]), input_shape=tuple(recorded[1])), likelihood=likelihood)

        def training_data():
            if holder["data"] is None:
                holder["data"], _ = build_run(data_cfg, device, run_dir, trust_code, likelihood=likelihood, given=given)
            return holder["data"]

        members = ensemble_members(evaluation_settings(cfg), model, store, training_data, device, precision,
                                   likelihood=likelihood)
    check_recorded_members(run_dir, members.names, metrics)
    return dict(run_dir=run_dir, cfg=cfg, metrics=metrics, model=model.eval(), members=members, device=device,
                precision=precision, num_classes=recorded[0], input_shape=recorded[1], data=holder["data"],
                likelihood=likelihood, target_scale=target_scale)
