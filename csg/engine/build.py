"""From a run's settings to its objects: seeds, data, model, schedule, sampler, interaction, plans.

Every function takes the run's :class:`~csg.engine.settings.RunSettings` (read once from the composed config by
:func:`csg.engine.settings.run_settings`), or the section of it it needs, and the objects built already (the
likelihood, built once per run), and returns one object, or raises a one-line :class:`~csg.errors.ConfigError`
when the setting cannot work, before any training; the checks of memory, the model against the data and the step's
values are :mod:`csg.engine.limits`'. A user's ``_target_`` is resolved here (:mod:`csg.components`).
:mod:`csg.engine.chain` calls them for each chain, :mod:`csg.posterior` to rebuild a run's data and model,
:func:`csg.build` for a command's parts.
"""

from __future__ import annotations

import numpy as np
import torch

from csg.engine import distributed
from csg.schedules import (capacity, collection_points, eligible_epochs, first_sampling_iteration, sampling_iterations,
                           schedule_for)
from csg.engine.prior import weight_decay
from csg.engine.limits import check_labels, check_memory, check_model_fits, check_step_values, check_task
from csg.errors import ConfigError, describe
from csg.evaluation.ess import ParameterTrace
from csg.engine.step.single import prepare_model
from csg.components import keyword_arguments
from csg.engine.settings import Component, RunSettings, SamplerSettings, ScheduleSettings, TraceSettings
from csg.models.custom import KEYS as MODEL_KEYS  # the model group's keys that are csg's, not the factory's

__all__ = ["MAX_STEPS", "MODEL_KEYS", "build_data_and_model", "build_interaction", "build_likelihood", "build_model",
           "build_ood_loader", "build_part", "build_sampler", "build_schedule", "check_trace", "interaction_kind",
           "load_model_weights", "optimise_rest", "part_of", "plan_collection",
           "plan_trace", "seed_streams"]


def seed_streams(seed: int, chain: int = 0) -> dict[str, int]:
    """Independent 63-bit seeds for model initialisation, data order and sampler noise of one chain.

    Chain 0 of a run with seed s uses the same seeds as a one-chain run with seed s.
    """
    entropy = seed if chain == 0 else [seed, chain]
    children = np.random.SeedSequence(entropy).spawn(3)
    init, data, noise = (int(child.generate_state(1, np.uint64)[0] >> np.uint64(1)) for child in children)
    return {"init": init, "data": data, "noise": noise}


def build_data_and_model(settings: RunSettings, device: torch.device, data_seed: int = 0,
                         layout: distributed.Layout | None = None, data=None, chains: int = 1, *, likelihood):
    """The run's data bundle (sharded for this process) and a freshly initialised model on ``device``.

    ``data``: a bundle built already, or any object with the run's ``num_classes`` and ``input_shape`` (what
    :class:`csg.Posterior` passes): the model is built for it, and no data is read. ``chains``: how many chains
    of this model the process will hold (:mod:`csg.launch.run` passes them all with its first chain, 0 with the
    others): before the model is allocated, their memory is estimated on the meta device and a run that
    cannot fit is refused (:func:`check_memory`). ``likelihood``: the run's, built once (:func:`build_likelihood`)."""
    from csg.data import build_data

    layout = layout or distributed.Layout()
    task = likelihood.task
    data = data if data is not None else build_data(
        settings.data.name,
        seed=data_seed,
        device=device,
        rank=layout.chain_rank,
        world_size=layout.chain_size,
        eval_rank=layout.rank,
        eval_world_size=layout.world_size,
        **settings.data.options(drop=("name", "recipe")),
        **({"task": task} if settings.data.custom else {}),
    )
    check_task(settings, task, getattr(data, "task", task))  # a shape alone (csg.Posterior) has no task to check
    check_labels(settings.data, data)
    if chains:
        from csg.engine.memory import meta_model

        check_memory(settings, meta_model(lambda: build_model(settings, data, likelihood)), device, chains)
    model = prepare_model(build_model(settings, data, likelihood).to(device), device)
    check_model_fits(model, data, settings, processes=layout.chain_size, likelihood=likelihood,
                     sync_batchnorm=settings.trainer.sync_batchnorm)
    return data, model


def build_likelihood(settings: Component | None):
    """The run's :class:`csg.likelihoods.Likelihood` of its ``likelihood`` group (``RunSettings.likelihood``):
    ``likelihood.name``'s with its keys, a user's by ``likelihood._target_`` (its other keys the keyword arguments),
    categorical for a config without the group (None: a run saved before it); a one-line ConfigError naming the
    key."""
    from csg.likelihoods import Likelihood, create_likelihood

    if settings is None:
        return create_likelihood("categorical")
    if not settings.custom:
        return create_likelihood(settings.name, **settings.options())
    from csg.components import call, locate

    path = settings.target_path()
    options = keyword_arguments(settings.options(drop=()), ("name",), "likelihood._target_")
    built = call(locate(path, "likelihood._target_"), "likelihood._target_", path, "a callable that returns a "
                 "csg.likelihoods.Likelihood", **options)
    if not isinstance(built, Likelihood) or built.task not in ("classification", "regression"):
        raise ConfigError("likelihood._target_", path, "a csg.likelihoods.Likelihood whose task is classification or "
                          f"regression; it returned {type(built).__name__}")
    return built


def build_model(settings: RunSettings, data, likelihood) -> torch.nn.Module:
    """A freshly initialised model of ``settings.model`` (with ``settings.adapter``) for ``data``'s classes (or
    target columns) and input shape (on the current default device: the CPU, or ``meta`` inside
    ``with torch.device("meta")``), with ``outputs`` the
    likelihood's :meth:`~csg.likelihoods.Likelihood.num_outputs` and its own parameters attached
    (:func:`csg.likelihoods.attach`). ``likelihood``: the run's, built once (:func:`build_likelihood`)."""
    from csg.likelihoods import attach

    outputs = likelihood.num_outputs(data.num_classes)
    network = _build_network(settings.model, outputs, tuple(data.input_shape))
    return attach(likelihood, _with_adapters(settings.adapter, network))


def _build_network(model: Component, outputs: int, input_shape: tuple[int, ...]) -> torch.nn.Module:
    """``model`` with ``outputs`` outputs (passed as its ``num_classes``) for inputs of ``input_shape``."""
    from csg.models import create_model
    from csg.models.custom import create_custom_model

    if model.custom:
        return create_custom_model(model.target_path(), keyword_arguments(model.options(drop=()), MODEL_KEYS, "model"),
                                   num_classes=outputs, input_shape=input_shape)
    name = model.name
    options = model.options(drop=MODEL_KEYS)
    for key, value in (("num_classes", outputs), ("input_shape", list(input_shape))):
        if key in options:  # what csg passes every built-in model: the user's key either repeats it or clashes
            given = options.pop(key)
            if (list(given) if isinstance(given, (list, tuple)) else given) != value:
                raise ConfigError(f"model.{key}", given, f"the data's {key}={value}, which csg passes to "
                                  f"model.name={name}; leave model.{key} out")
    try:
        return create_model(name, num_classes=outputs, input_shape=input_shape, **options)
    except ConfigError:
        raise
    except (TypeError, ValueError, RuntimeError) as error:  # a factory's own complaint about its keywords
        from csg.models import list_models

        hint = (f"; a timm architecture without the group's keys: model=timm model.name={name}"
                if options and str(name) not in list_models() else "")
        raise ConfigError("model.name", str(name),
                          f"a model built with its group's keys {options}: {describe(error)}{hint}") from None


def _with_adapters(adapter: Component | None, model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with the low-rank adapters of ``adapter`` (:mod:`csg.models.lora`; None, ``adapter=none``: as it
    is)."""
    if adapter is None or adapter.values.get("name", "none") == "none":
        return model
    from csg.models.lora import add_lora

    modules = list(adapter.values["modules"])
    try:
        add_lora(model, rank=int(adapter.values["rank"]), alpha=float(adapter.values["alpha"]), modules=modules)
    except ValueError as error:
        raise ConfigError("adapter.modules", modules, f"patterns of the model's layers: {error}") from None
    return model


def load_model_weights(model_settings: Component, model: torch.nn.Module) -> None:
    """Copy ``model.weights`` (a state dict file, read weights-only: :mod:`csg.models.weights`) into ``model``;
    nothing for ``model.weights=null``."""
    from csg.models.weights import load_weights

    if model_settings.values.get("weights"):
        load_weights(model, str(model_settings.values["weights"]))


def part_of(sampler: SamplerSettings, model: torch.nn.Module):
    """The :class:`csg.engine.part.SampledPart` a run's ``sampler.params`` and ``sampler.rest`` choose."""
    from csg.engine.part import select_part

    return select_part(model, sampler.params, sampler.rest)


def interaction_kind(sampler: SamplerSettings) -> str | None:
    """:func:`csg.engine.distributed.interaction_kind` of a run's ``sampler`` keys."""
    return distributed.interaction_kind(sampler.chains, sampler.replica is not None,
                                        sampler.contour is not None and sampler.contour.interacting)


def build_part(settings: RunSettings, model: torch.nn.Module):
    """The :class:`csg.engine.part.SampledPart` of ``sampler.params`` / ``sampler.rest`` for ``model``; a
    one-line ConfigError for patterns that match nothing or a parameter the model freezes, or for a part sampled
    by stacked chains."""
    from csg.engine.part import check_trainable

    part = part_of(settings.sampler, model)
    check_trainable(model, part, settings.sampler.params)
    if not part.whole and settings.trainer.stack_chains not in (None, False):
        raise ConfigError("trainer.stack_chains", settings.trainer.stack_chains,
                          "false when sampler.params samples part of the model (stacked chains step whole models)")
    return part


def build_ood_loader(settings: RunSettings, data, layout: distributed.Layout | None = None):
    """The out-of-distribution loader of ``settings.ood`` (None for ``ood=none``) and its source."""
    from csg.data import build_ood

    layout = layout or distributed.Layout()
    built = build_ood(settings.ood.name, like=data, batch_size=settings.data.values.get("eval_batch_size"),
                      rank=layout.rank, world_size=layout.world_size, **settings.ood.options())
    return built if built is not None else (None, None)


def build_schedule(settings: ScheduleSettings, total_steps: int):
    """The step-size schedule of ``settings`` (``RunSettings.schedule``) over ``total_steps``
    iterations; a one-line ConfigError for a budget it cannot hold (more cycles than iterations, 2^53 iterations or
    more, a decay beyond a float)."""
    epochs = settings.epochs
    if settings.schedule == "cyclical" and settings.cycles > total_steps:
        raise ConfigError("sampler.cycles", settings.cycles,
                          f"at most the run's {total_steps} iterations (trainer.epochs={epochs} of "
                          f"{total_steps // epochs} batches): a cycle needs at least one iteration")
    if settings.schedule == "decreasing" and total_steps < 2:
        raise ConfigError("trainer.epochs", epochs,
                          f"a run of at least 2 iterations for sampler.schedule=decreasing (it has {total_steps})")
    if total_steps >= MAX_STEPS:
        raise ConfigError("trainer.epochs", epochs,
                          f"a budget of fewer than 2^53 iterations, where the schedule's arithmetic is exact (it has "
                          f"{total_steps:.3g}: {total_steps // epochs} batches per epoch)")
    try:
        return schedule_for(settings.sampler, total_steps)
    except (OverflowError, ZeroDivisionError):  # Decreasing's (lr0 / lr_final)^(1 / gamma) beyond a float
        raise ConfigError("sampler.gamma", settings.options.get("gamma"),
                          f"an exponent for which (lr0 / lr_final)^(1 / gamma) is a finite number (lr0="
                          f"{settings.lr0}, lr_final={settings.options.get('lr_final')})") from None


MAX_STEPS = 2**53  # iterations: k and k mod C are exact in float64 below it


def build_sampler(settings: RunSettings, model, num_data: int, layout: distributed.Layout, device: torch.device,
                  generator, part=None, *, likelihood):
    """The sampler of ``settings.sampler``: SGLD / SGHMC, or their contour forms when ``sampler.contour`` is set, over
    the parameters of ``part`` (a :class:`csg.engine.part.SampledPart`; None: every parameter). With
    ``sampler.rest=sgd`` it is the sampler for the part: :func:`optimise_rest` adds SGD for the rest. ``likelihood``:
    the run's, built once (:func:`build_likelihood`), whose own parameters take no weight decay."""
    from csg.likelihoods import parameter_names
    from csg.samplers import create_sampler

    sampler = settings.sampler
    check_step_values(settings, model, num_data)
    params = _sampled_parameters(model, part, set(parameter_names(likelihood)))
    options = dict(lr=sampler.lr0, num_data=num_data, temperature=sampler.temperature,
                   weight_decay=weight_decay(num_data, **settings.prior.arguments()), generator=generator)
    if sampler.optimizer is not None and sampler.optimizer.custom:
        from csg.samplers.custom import create_custom_sampler

        own = keyword_arguments(sampler.optimizer.options(drop=()), (), "sampler.optimizer._target_")
        return create_custom_sampler(sampler.optimizer.target_path(), params, **options, **own)
    contour = sampler.contour
    if contour is None:
        if sampler.update_rule == "psgld":
            options.update(alpha=float(sampler.alpha), eps=float(sampler.eps))
        return create_sampler(sampler.update_rule, params, momentum=sampler.momentum, **options)
    from csg.engine.interaction import ChainCollectives
    from csg.samplers.contour import ContourSGHMC, ContourSGLD, EnergyPartition, default_sa_step

    sa_step = default_sa_step if contour.sa_step is None else (lambda k, omega=contour.sa_step: omega)
    partition = EnergyPartition(num_data * contour.low, num_data * contour.width, contour.partitions,
                                zeta=contour.zeta, sa_step=sa_step, multiplier_clip=contour.multiplier_clip,
                                difference=contour.difference, device=device)
    gather = ChainCollectives(layout, device).gather_chains if interaction_kind(sampler) == "contour" else None
    if sampler.update_rule == "sghmc":
        return ContourSGHMC(params, partition=partition, momentum=sampler.momentum, gather=gather, **options)
    return ContourSGLD(params, partition=partition, gather=gather, **options)


def _sampled_parameters(model, part, likelihood_names=()) -> list:
    """The sampled parameters: one list, or two param groups when the likelihood has parameters of its own (the
    second without weight decay: their prior is the likelihood's)."""
    sampled = None if part is None or part.whole else set(part.sampled)
    chosen = [(name, p) for name, p in model.named_parameters() if sampled is None or name in sampled]
    own = [p for name, p in chosen if name in likelihood_names]
    if not own:
        return [p for _, p in chosen]
    return [{"params": [p for name, p in chosen if name not in likelihood_names]},
            {"params": own, "weight_decay": 0.0}]


def optimise_rest(settings: SamplerSettings, model, sampler, part):
    """``sampler``, or for ``sampler.rest=sgd`` a :class:`csg.samplers.rest.WithOptimisedRest` stepping the rest
    by SGD beside it (the sampler's momentum where it has one)."""
    if part is None or part.whole or part.mode != "sgd":
        return sampler
    from csg.samplers.rest import WithOptimisedRest

    rest = set(part.rest)
    return WithOptimisedRest(sampler, [p for name, p in model.named_parameters() if name in rest],
                             momentum=float(settings.momentum or 0.0))


def build_interaction(settings: RunSettings, sampler, chain: int, layout: distributed.Layout, device: torch.device,
                      num_data: int, schedule, batches_per_epoch: int, *, likelihood):
    """The :mod:`csg.engine.interaction` of a contour or replica-exchange sampler (None for the others);
    ``likelihood``: the run's, for the control variate's energies."""
    from csg.data.bundle import derive_seed
    from csg.engine.interaction import ChainCollectives, ContourInteraction, ControlVariate, EnergyEstimator, ReplicaExchange

    contour, replica, energy = settings.sampler.contour, settings.sampler.replica, settings.sampler.energy
    if contour is None and replica is None:
        return None
    control_variate = None
    if energy is not None and energy.variance_reduction:
        first = first_sampling_iteration(schedule, schedule.total_steps or 0)
        control_variate = ControlVariate(int(energy.refresh_every_epochs), first // batches_per_epoch,
                                         likelihood)
    estimator = EnergyEstimator(num_data, ChainCollectives(layout, device), control_variate)
    if contour is not None:
        return ContourInteraction(estimator, sampler, contour.weight_exponent)
    return ReplicaExchange(estimator, chain, list(replica.temperatures), list(replica.step_sizes),
                           num_data * replica.correction, replica.swap_every, derive_seed(int(settings.seed), 104729))


def plan_collection(settings: ScheduleSettings, schedule, batches_per_epoch: int):
    """The collection points of ``settings`` under ``schedule``, or a ConfigError if ``samples_per_cycle`` does not
    fit."""
    epochs, wanted = settings.epochs, settings.samples_per_cycle
    fits = capacity(eligible_epochs(schedule, epochs, batches_per_epoch))
    if wanted > fits:
        setting = f"trainer.epochs={epochs}, sampler.cycles={settings.cycles}, sampler.explore={settings.explore}"
        allowed = (
            f"1..{fits}: the sampling stage of each cycle holds {fits} epoch end{'s' if fits > 1 else ''} ({setting})"
            if fits
            else f"none fit: no cycle's sampling stage contains an epoch end ({setting}); "
            "raise trainer.epochs or lower sampler.cycles or sampler.explore"
        )
        raise ConfigError("sampler.samples_per_cycle", wanted, allowed)
    return collection_points(schedule, epochs, batches_per_epoch, wanted)


def plan_trace(trace: TraceSettings, schedule, total_steps: int, model) -> ParameterTrace | None:
    """The parameter trace of ``trace`` (:func:`csg.engine.settings.trace_settings`), or a ConfigError if the run
    is too short to fill it."""
    if not trace.enabled:
        return None
    check_trace(trace, schedule, total_steps)
    return ParameterTrace(model, burnin=trace.burnin, samples=trace.samples, keep=schedule.sampling)


def check_trace(trace: TraceSettings, schedule, total_steps: int) -> int:
    """The sampling-stage iterations after ``trace.burnin`` (counted per cycle); a ConfigError if fewer than
    ``trace.samples``."""
    available = sampling_iterations(schedule, min(int(trace.burnin), total_steps), total_steps)
    if trace.samples > available:
        raise ConfigError(
            "trace.samples", trace.samples,
            f"at most {available}: the sampling-stage iterations after trace.burnin={trace.burnin} "
            f"in {total_steps} iterations; raise trainer.epochs",
        )
    return available
