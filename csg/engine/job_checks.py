"""Every check a run makes once its data are known, without training (:func:`check_job`), for a sweep to check each
job before the first trains (:mod:`csg.checks.preflight`), from the data's facts (:func:`data_facts`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from csg.engine import distributed
from csg.engine.build import build_model, build_part, build_sampler, build_schedule, check_trace, plan_collection
from csg.engine.limits import check_memory, check_model_fits, check_step_values
from csg.engine.settings import RunSettings

__all__ = ["DataFacts", "REAL_CHECK_BYTES", "check_job", "data_facts"]


@dataclass(frozen=True)
class DataFacts:
    """What the checks before training need of a data set (:func:`check_job`): its sizes, classes, input shape."""

    name: str
    num_train: int
    num_test: int
    num_classes: int
    input_shape: tuple[int, ...]
    batch_size: int

    @property
    def batches_per_epoch(self) -> int:
        return -(-self.num_train // self.batch_size)


_BATCHING = ("batch_size", "eval_batch_size", "num_workers", "device_resident")  # build_data's, not the data set's


def data_facts(settings: RunSettings, cache: dict | None = None, *, likelihood) -> DataFacts:
    """The :class:`DataFacts` of ``settings.data``, from the data built once on the CPU (every check of
    :mod:`csg.data` and :mod:`csg.data.custom` included). ``cache`` keeps them per data set and options, so a
    sweep over other keys (or over the batch size) builds each data set once. ``likelihood``: the job's, whose task a
    user's data serve."""
    from csg.data import build_data

    data = settings.data
    options = data.options(drop=("name", "recipe"))
    if data.custom:  # a user's data: labels or real targets, as the likelihood says
        options["task"] = likelihood.task
    key = json.dumps([str(data.name), {k: v for k, v in options.items() if k not in _BATCHING}],
                     sort_keys=True, default=str)
    cache = {} if cache is None else cache
    if key not in cache:
        built = build_data(data.name, device="cpu", **{**options, "device_resident": False, "num_workers": 0})
        cache[key] = (built.num_train, built.num_test, built.num_classes, tuple(built.input_shape))
    num_train, num_test, num_classes, input_shape = cache[key]
    return DataFacts(str(data.name), num_train, num_test, num_classes, input_shape, int(data.values["batch_size"]))


REAL_CHECK_BYTES = 2**30  # check_job builds models up to this size on the CPU, larger ones on the meta device


def check_job(settings: RunSettings, data: DataFacts, device: torch.device, chains: int, likelihood) -> None:
    """Every check a run makes once its data are known, without training and without building the data:
    what :mod:`csg.launch.run` checks while it prepares its chains, for a sweep to check each job before the first
    trains (:mod:`csg.checks.preflight`). In order: memory for ``chains`` chains on ``device`` (0: not checked), the
    model against the data (:func:`check_model_fits`: on the CPU, or on the meta device for a model of more
    than :data:`REAL_CHECK_BYTES` that runs there), the schedule, the collection plan, the trace, the step's
    values and a user's sampler. Raises the run's one-line :class:`ConfigError`. ``likelihood``: the job's, built
    once (:func:`~csg.engine.build.build_likelihood`)."""
    from csg.engine.memory import meta_model

    model = meta_model(lambda: build_model(settings, data, likelihood))
    if model is not None and chains:
        check_memory(settings, model, device, chains)
    if model is None or sum(p.numel() * p.element_size() for p in model.parameters()) <= REAL_CHECK_BYTES:
        model = build_model(settings, data, likelihood)  # a real forward pass: faster than the meta device's first (2-4 s)
    sync = settings.trainer.sync_batchnorm
    try:
        check_model_fits(model, data, settings, sync_batchnorm=sync, likelihood=likelihood)
    except Exception:  # noqa: BLE001 - not every model runs on the meta device: the CPU model's answer counts
        if not any(p.is_meta for p in model.parameters()):
            raise
        model = build_model(settings, data, likelihood)
        check_model_fits(model, data, settings, sync_batchnorm=sync, likelihood=likelihood)
    total_steps = int(settings.trainer.epochs) * data.batches_per_epoch
    schedule = build_schedule(settings.schedule, total_steps)
    plan_collection(settings.schedule, schedule, data.batches_per_epoch)
    if settings.trace.enabled:
        check_trace(settings.trace, schedule, total_steps)
    check_step_values(settings, model, data.num_train)
    if settings.model.values.get("weights"):
        from csg.models.weights import check_weights

        check_weights(model, str(settings.model.values["weights"]))
    part = build_part(settings, model)
    if settings.sampler.optimizer is not None and settings.sampler.optimizer.custom:
        if any(p.is_meta for p in model.parameters()):
            model = build_model(settings, data, likelihood)  # a user's optimizer may read its parameters' values
        build_sampler(settings, model, data.num_train, distributed.Layout(), torch.device("cpu"), torch.Generator(), part,
                      likelihood=likelihood)
