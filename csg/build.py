"""From a composed config to the objects of a run: seeds, data, model, schedule, sampler, interaction, plans.

Every function takes the run's ``DictConfig`` (see ``configs/``) and returns one object, or raises a
one-line :class:`~csg.errors.ConfigError` when the setting cannot work (a collection plan or a trace
that does not fit the schedule), before any training. :mod:`csg.run` calls them for each chain;
:mod:`csg.evaluation.store` and the studies call them to rebuild a run's data and model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from csg import distributed
from csg.collection import capacity, collection_points, eligible_epochs
from csg.errors import ConfigError, describe
from csg.evaluation.ess import ParameterTrace
from csg.step import prepare_model
from csg.components import has_target, keyword_arguments, target_of


def seed_streams(seed: int, chain: int = 0) -> dict[str, int]:
    """Independent 63-bit seeds for model initialisation, data order and sampler noise of one chain.

    Chain 0 of a run with seed s uses the same seeds as a one-chain run with seed s.
    """
    entropy = seed if chain == 0 else [seed, chain]
    children = np.random.SeedSequence(entropy).spawn(3)
    init, data, noise = (int(child.generate_state(1, np.uint64)[0] >> np.uint64(1)) for child in children)
    return {"init": init, "data": data, "noise": noise}


def node_options(node: DictConfig, drop: tuple[str, ...] = ("name",)) -> dict[str, Any]:
    options = OmegaConf.to_container(node, resolve=True)
    return {key: value for key, value in options.items() if key not in drop}


def build_data_and_model(cfg: DictConfig, device: torch.device, data_seed: int = 0,
                         layout: distributed.Layout | None = None, data=None):
    """The run's data bundle (sharded for this process) and a freshly initialised model on ``device``.

    ``data``: a bundle built already, or any object with the run's ``num_classes`` and ``input_shape`` (what
    :class:`csg.Posterior` passes): the model is built for it, and no data is read."""
    from csg.data import build_data
    from csg.models import create_model
    from csg.models.custom import create_custom_model

    layout = layout or distributed.Layout()
    data = data if data is not None else build_data(
        cfg.data.name,
        seed=data_seed,
        device=device,
        rank=layout.chain_rank,
        world_size=layout.chain_size,
        eval_rank=layout.rank,
        eval_world_size=layout.world_size,
        **node_options(cfg.data, drop=("name", "recipe")),
    )
    if has_target(cfg.model):
        model = create_custom_model(target_of(cfg, "model._target_"), num_classes=data.num_classes,
                                    input_shape=data.input_shape, **keyword_arguments(cfg.model, ("name",), "model"))
        model = prepare_model(model.to(device), device)
        check_model_fits(model, data, cfg)
        return data, model
    options = node_options(cfg.model)
    try:
        model = create_model(cfg.model.name, num_classes=data.num_classes, input_shape=data.input_shape, **options)
    except ConfigError:
        raise
    except (TypeError, ValueError, RuntimeError) as error:  # a factory's own complaint about its keywords
        raise ConfigError("model.name", str(cfg.model.name),
                          f"a model built with its group's keys {options}: {describe(error)}") from None
    model = prepare_model(model.to(device), device)
    check_model_fits(model, data, cfg)
    return data, model


def check_model_fits(model: torch.nn.Module, data, cfg: DictConfig) -> None:
    """One forward pass of one example of the data set's input shape (zeros, no gradient, eval mode, no random
    number drawn): the model takes the data and gives ``num_classes`` outputs, and no parameter is empty."""
    shape = tuple(data.input_shape)
    key, name = ("model._target_", str(cfg.model._target_)) if has_target(cfg.model) else ("model.name", str(cfg.model.name))
    empty = [label for label, parameter in model.named_parameters() if parameter.numel() == 0]
    if empty:
        raise ConfigError(key, name, f"a model without empty parameters: {empty[0]} has shape "
                          f"{tuple(model.get_parameter(empty[0]).shape)} (a layer of width 0)")
    parameter = next(model.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = model(torch.zeros((1, *shape), device=device))
    except Exception as error:  # noqa: BLE001 - whatever the architecture raises, the answer is the same
        raise ConfigError(key, name, f"a model that takes data={cfg.data.name}'s inputs of shape {shape}: "
                          f"{describe(error)}") from None
    finally:
        model.train(training)
    if not isinstance(output, torch.Tensor) or tuple(output.shape) != (1, data.num_classes):
        got = tuple(output.shape[1:]) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ConfigError(key, name, f"a model with {data.num_classes} outputs (the classes of "
                          f"data={cfg.data.name}) per example: it gives {got}")


def build_ood_loader(cfg: DictConfig, data, layout: distributed.Layout | None = None):
    """The out-of-distribution loader of ``cfg.ood`` (None for ``ood=none``) and its source."""
    from csg.data import build_ood

    layout = layout or distributed.Layout()
    built = build_ood(cfg.ood.name, like=data, batch_size=cfg.data.eval_batch_size, rank=layout.rank,
                      world_size=layout.world_size, **node_options(cfg.ood))
    return built if built is not None else (None, None)


def build_schedule(cfg: DictConfig, total_steps: int):
    from csg.schedules import create_schedule

    if cfg.sampler.schedule == "cyclical" and cfg.sampler.cycles > total_steps:
        raise ConfigError("sampler.cycles", cfg.sampler.cycles,
                          f"at most the run's {total_steps} iterations (trainer.epochs={cfg.trainer.epochs} of "
                          f"{total_steps // cfg.trainer.epochs} batches): a cycle needs at least one iteration")
    if cfg.sampler.schedule == "decreasing" and total_steps < 2:
        raise ConfigError("trainer.epochs", cfg.trainer.epochs,
                          f"a run of at least 2 iterations for sampler.schedule=decreasing (it has {total_steps})")
    return create_schedule(
        cfg.sampler.schedule,
        lr0=cfg.sampler.lr0,
        total_steps=total_steps,
        cycles=cfg.sampler.cycles,
        explore=cfg.sampler.explore,
        lr_final=cfg.sampler.get("lr_final"),
        gamma=cfg.sampler.get("gamma", 0.55),
        hold_sampling_lr=bool(cfg.sampler.get("hold_sampling_lr", False)),
        milestones=tuple(cfg.sampler.get("lr_milestones", (0.5, 0.75))),
        factor=float(cfg.sampler.get("lr_factor", 0.2)),
    )


def build_sampler(cfg: DictConfig, model, num_data: int, layout: distributed.Layout, device: torch.device, generator):
    """The sampler of ``cfg.sampler``: SGLD / SGHMC, or their contour forms when ``sampler.contour`` is set."""
    from csg.samplers import create_sampler

    options = dict(lr=cfg.sampler.lr0, num_data=num_data, temperature=cfg.sampler.temperature,
                   weight_decay=cfg.sampler.weight_decay, generator=generator)
    if has_target(cfg.sampler.get("optimizer")):
        from csg.samplers.custom import create_custom_sampler

        return create_custom_sampler(target_of(cfg, "sampler.optimizer._target_"), model.parameters(), **options,
                                     **keyword_arguments(cfg.sampler.optimizer, (), "sampler.optimizer._target_"))
    contour = cfg.sampler.get("contour")
    if contour is None:
        return create_sampler(cfg.sampler.update_rule, model.parameters(), momentum=cfg.sampler.momentum, **options)
    from csg.interaction import ChainCollectives
    from csg.samplers.contour import ContourSGHMC, ContourSGLD, EnergyPartition, default_sa_step

    sa_step = default_sa_step if contour.sa_step is None else (lambda k, omega=float(contour.sa_step): omega)
    partition = EnergyPartition(num_data * float(contour.low), num_data * float(contour.width), int(contour.partitions),
                                zeta=float(contour.zeta), sa_step=sa_step,
                                multiplier_clip=tuple(float(v) for v in contour.multiplier_clip),
                                difference=str(contour.get("difference", "backward")), device=device)
    gather = ChainCollectives(layout, device).gather_chains if interacts(cfg) == "contour" else None
    if cfg.sampler.update_rule == "sghmc":
        return ContourSGHMC(model.parameters(), partition=partition, momentum=cfg.sampler.momentum, gather=gather,
                            **options)
    return ContourSGLD(model.parameters(), partition=partition, gather=gather, **options)


def build_interaction(cfg: DictConfig, sampler, chain: int, layout: distributed.Layout, device: torch.device,
                      num_data: int, schedule, batches_per_epoch: int):
    """The :mod:`csg.interaction` of a contour or replica-exchange sampler (None for the others)."""
    from csg.data.bundle import derive_seed
    from csg.interaction import ChainCollectives, ContourInteraction, ControlVariate, EnergyEstimator, ReplicaExchange

    contour, replica = cfg.sampler.get("contour"), cfg.sampler.get("replica")
    if contour is None and replica is None:
        return None
    energy = cfg.sampler.get("energy") or {}
    control_variate = None
    if energy.get("variance_reduction", False):
        first = next((k for k in range(schedule.total_steps or 0) if schedule.sampling(k)), 0)
        control_variate = ControlVariate(int(energy.refresh_every_epochs), first // batches_per_epoch)
    estimator = EnergyEstimator(num_data, ChainCollectives(layout, device), control_variate)
    if contour is not None:
        return ContourInteraction(estimator, sampler, contour.get("weight_exponent"))
    return ReplicaExchange(estimator, chain, list(replica.temperatures), list(replica.step_sizes),
                           num_data * float(replica.correction), int(replica.swap_every),
                           derive_seed(int(cfg.seed), 104729))


def interacts(cfg: DictConfig) -> str | None:
    """"contour" (ICSGHMC: chains share theta), "replica" (reSGHMC), or None: chains that must step together."""
    chains = int(cfg.sampler.get("chains", 1))
    if cfg.sampler.get("replica") is not None:
        return "replica"
    if cfg.sampler.get("contour") is not None and bool(cfg.sampler.contour.interacting) and chains > 1:
        return "contour"
    return None


def plan_collection(cfg: DictConfig, schedule, batches_per_epoch: int):
    """The collection points, or a ConfigError if ``samples_per_cycle`` does not fit."""
    epochs = cfg.trainer.epochs
    wanted = cfg.sampler.samples_per_cycle
    fits = capacity(eligible_epochs(schedule, epochs, batches_per_epoch))
    if wanted > fits:
        setting = f"trainer.epochs={epochs}, sampler.cycles={cfg.sampler.cycles}, sampler.explore={cfg.sampler.explore}"
        allowed = (
            f"1..{fits}: the sampling stage of each cycle holds {fits} epoch end{'s' if fits > 1 else ''} ({setting})"
            if fits
            else f"none fit: no cycle's sampling stage contains an epoch end ({setting}); "
            "raise trainer.epochs or lower sampler.cycles or sampler.explore"
        )
        raise ConfigError("sampler.samples_per_cycle", wanted, allowed)
    return collection_points(schedule, epochs, batches_per_epoch, wanted)


def plan_trace(cfg: DictConfig, schedule, total_steps: int, model) -> ParameterTrace | None:
    """The parameter trace of ``cfg.trace``, or a ConfigError if the run is too short to fill it."""
    if not cfg.trace.enabled:
        return None
    available = sum(1 for k in range(cfg.trace.burnin, total_steps) if schedule.sampling(k))
    if cfg.trace.samples > available:
        raise ConfigError(
            "trace.samples", cfg.trace.samples,
            f"at most {available}: the sampling-stage iterations after trace.burnin={cfg.trace.burnin} "
            f"in {total_steps} iterations; raise trainer.epochs",
        )
    return ParameterTrace(model, burnin=cfg.trace.burnin, samples=cfg.trace.samples, keep=schedule.sampling)
