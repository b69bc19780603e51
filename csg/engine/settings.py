"""A run's settings as typed, frozen values, read from the composed config once, here: the engine's boundary.

:func:`run_settings` resolves the config (its interpolations, once) into plain values and returns a
:class:`RunSettings`, the tree every builder below takes (:mod:`csg.engine.build`, ``chain``, ``limits``,
``job_checks``, :mod:`csg.posterior`); none of them takes the config or imports omegaconf (tests/test_layout.py):

- ``data``, ``model``, ``likelihood``, ``adapter``, ``ood``: :class:`Component`, a config group as data: its key,
  a user's ``_target_`` path or a built-in name, and its options, resolved by the builder (a user's code is
  imported there, after the saved config has been checked, never here);
- ``sampler`` (:class:`SamplerSettings`, with its :class:`ContourSettings`, :class:`ReplicaSettings`,
  :class:`EnergySettings`), ``prior`` (:class:`PriorSettings`), ``schedule`` (:class:`ScheduleSettings`: the
  step-size schedule and the collection plan), ``trainer`` (:class:`TrainerSettings`), ``trace``
  (:class:`TraceSettings`), ``evaluation`` (:class:`EvaluationSettings`);
- ``fingerprint``: what a checkpoint must share with the run that resumes it (:func:`config_fingerprint`).

Values are kept as the config holds them (checked by :mod:`csg.checks` before any run; converted only where the
old code converted them): reading them here changes no number of a run, nor a message. Each key is read (and its
interpolation resolved) on its own, as the builders read them before, so a key no builder reads (``logger``,
``study``, a cluster's ``${oc.env:...}``) never has to resolve where a saved run is loaded; a component's group is
resolved whole, as its builder passes it on. A key a run saved by an earlier version lacks reads as None, or as the
default csg gave it. Nested values are frozen (mappings read-only, lists as tuples); a builder gets plain copies.
"""

from __future__ import annotations

import copy
from types import MappingProxyType
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from csg.components import TARGET, Config, select
from csg.engine.runsettings import (Component, ContourSettings, EnergySettings, EvaluationSettings, PriorSettings,
                                    ReplicaSettings, RunSettings, SamplerSettings, ScheduleSettings, SwagSettings,
                                    TraceSettings, TrainerSettings, frozen, thawed)
from csg.schedules import SCHEDULE_OPTIONS

__all__ = ["Component", "ContourSettings", "EnergySettings", "EvaluationSettings", "PriorSettings", "ReplicaSettings",
           "RunSettings", "SamplerSettings", "ScheduleSettings", "SwagSettings", "TraceSettings", "TrainerSettings",
           "config_fingerprint", "evaluation_settings", "frozen", "node_options", "prior_settings", "resolved",
           "run_settings", "schedule_settings", "thawed", "trace_settings"]


def resolved(cfg: Config) -> dict[str, Any]:
    """A config (or a group of it) as plain containers, its interpolations resolved (a DictConfig), or a copy."""
    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    return copy.deepcopy({key: value for key, value in cfg.items()})


def node_options(node: Config, drop: tuple[str, ...] = ("name",)) -> dict[str, Any]:
    """A config group's options as keyword arguments: its node resolved, without the keys of ``drop``."""
    return {key: value for key, value in resolved(node).items() if key not in drop}


def _plain(value: Any) -> Any:
    """A config's node as plain containers, resolved; any other value as it is."""
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


_NOT_IN_FINGERPRINT = {"trainer.progress", "trainer.log_every_n_steps", "trainer.log_every_n_epochs",
                       "trainer.checkpoint", "trainer.threads", "logger", "hydra", "callbacks"}


def config_fingerprint(cfg: Config) -> dict[str, Any]:
    """The settings a checkpoint must share with the run that resumes it (all but logging and checkpointing): the
    resolved config's dotted keys and values (Hydra's own node, in a sweep's composed job, left out unresolved)."""
    from csg.reporting import flat_keys

    def kept(key: str) -> bool:
        parts = key.split(".")
        return not any(".".join(parts[:n]) in _NOT_IN_FINGERPRINT for n in range(1, len(parts) + 1))

    if isinstance(cfg, DictConfig) and "hydra" in cfg:
        cfg = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
    return {key: value for key, value in flat_keys(resolved(cfg)).items() if kept(key)}


def run_settings(cfg: Config, *, data: bool = True, fingerprint: bool = False) -> RunSettings:
    """The :class:`RunSettings` of a composed train.py config or a run's saved one, each key read once.

    ``data=False``: the data group's ``name`` (and ``_target_``) only, for a model built for a recorded shape with
    no data read (:class:`csg.Posterior`): its other keys (a root on another machine) are not resolved.
    ``fingerprint``: also the checkpoint's :func:`config_fingerprint`, which resolves every key (a run's, where
    train.py resolved them all anyway)."""
    sampler, trainer = cfg["sampler"], cfg.get("trainer") or {}
    checkpoint = trainer.get("checkpoint") or {}
    data_node = select(cfg, "data", {})
    if not data:
        data_node = {key: data_node[key] for key in ("name", TARGET) if key in data_node}  # each resolved alone

    def component(group: str, default: dict | None = None) -> Component | None:
        node = select(cfg, group, default)
        return None if node is None else Component(group, _plain(node))

    adapter = component("adapter")
    return RunSettings(
        seed=cfg.get("seed"), data=Component("data", _plain(data_node)), model=component("model", {}),
        likelihood=component("likelihood"), ood=component("ood", {"name": "none"}),
        adapter=None if adapter is None or adapter.values.get("name", "none") == "none" else adapter,
        sampler=_sampler_settings(sampler), prior=prior_settings(cfg), schedule=schedule_settings(cfg),
        trainer=TrainerSettings(
            epochs=trainer.get("epochs"), precision=str(trainer.get("precision", "32")),
            sync_batchnorm=bool(trainer.get("sync_batchnorm", False)), stack_chains=trainer.get("stack_chains"),
            checkpoint_every=int(checkpoint.get("every_n_epochs", 0) or 0),
            checkpoint_signals=frozen(_plain(checkpoint.get("signals")) or ())),
        trace=trace_settings(cfg), evaluation=evaluation_settings(cfg),
        fingerprint=MappingProxyType(config_fingerprint(cfg) if fingerprint else {}))


def prior_settings(cfg: Config) -> PriorSettings:
    """The :class:`PriorSettings` of a run's config (``prior.variance``, ``sampler.weight_decay``)."""
    return PriorSettings(variance=select(cfg, "prior.variance"), decay=select(cfg, "sampler.weight_decay"))


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _params(sampler: Config) -> tuple | str | None:
    params = sampler.get("params")
    return params if params is None or isinstance(params, str) else frozen(_plain(params))


def _sampler_settings(sampler: Config) -> SamplerSettings:
    contour, replica, energy = sampler.get("contour"), sampler.get("replica"), sampler.get("energy")
    optimizer = sampler.get("optimizer")
    return SamplerSettings(
        update_rule=sampler.get("update_rule"), lr0=sampler.get("lr0"), temperature=sampler.get("temperature"),
        momentum=sampler.get("momentum"), chains=int(sampler.get("chains", 1)), rest=str(sampler.get("rest", "frozen")),
        params=_params(sampler), alpha=sampler.get("alpha"), eps=sampler.get("eps"),
        optimizer=None if optimizer is None else Component("sampler.optimizer", _plain(optimizer)),
        contour=None if contour is None else ContourSettings(
            low=float(contour["low"]), width=float(contour["width"]), partitions=int(contour["partitions"]),
            zeta=float(contour["zeta"]), sa_step=_optional_float(contour.get("sa_step")),
            multiplier_clip=tuple(float(v) for v in contour["multiplier_clip"]),
            difference=str(contour.get("difference", "backward")), interacting=bool(contour.get("interacting")),
            weight_exponent=contour.get("weight_exponent"),
            ensemble_weights=contour.get("ensemble_weights", "importance")),
        replica=None if replica is None else ReplicaSettings(
            temperatures=frozen(_plain(replica["temperatures"])), step_sizes=frozen(_plain(replica["step_sizes"])),
            correction=float(replica["correction"]), swap_every=int(replica["swap_every"])),
        energy=None if not energy else EnergySettings(
            variance_reduction=bool(energy.get("variance_reduction", False)),
            refresh_every_epochs=energy.get("refresh_every_epochs", 1)))


def schedule_settings(cfg: Config) -> ScheduleSettings:
    """The :class:`ScheduleSettings` of a run's config (``sampler``, ``trainer.epochs``)."""
    sampler = cfg["sampler"]
    return ScheduleSettings(
        schedule=sampler.get("schedule"), lr0=sampler.get("lr0"), cycles=sampler.get("cycles"),
        explore=sampler.get("explore"), samples_per_cycle=sampler.get("samples_per_cycle"),
        epochs=select(cfg, "trainer.epochs"),
        options=frozen({key: _plain(sampler[key]) for key in SCHEDULE_OPTIONS if key in sampler}))


def trace_settings(cfg: Config) -> TraceSettings:
    """The :class:`TraceSettings` of a run's config (``trace``; a run saved before it: off)."""
    trace = cfg.get("trace")
    if trace is None:
        return TraceSettings(enabled=False, burnin=0, samples=0)
    return TraceSettings(enabled=bool(trace.get("enabled")), burnin=trace.get("burnin"), samples=trace.get("samples"))


def evaluation_settings(cfg: Config) -> EvaluationSettings:
    """The :class:`~csg.engine.settings.EvaluationSettings` of a run's config (train.py's, or a run's saved one)."""
    sampler, evaluation = cfg["sampler"], cfg.get("evaluation") or {}
    swag, contour = sampler.get("swag"), sampler.get("contour")
    reference = evaluation.get("reference")
    return EvaluationSettings(
        seed=int(cfg["seed"]), chains=int(sampler.get("chains", 1)), replica=sampler.get("replica") is not None,
        importance=contour is not None and contour.get("ensemble_weights", "importance") == "importance",
        swag=(SwagSettings(int(swag["draws_per_cycle"]), int(swag["rank"]), float(swag["scale"]))
              if swag is not None and int(swag["draws_per_cycle"]) > 0 else None),
        cycle_weights=str(evaluation.get("cycle_weights", "equal")), ece_bins=int(evaluation.get("ece_bins", 15)),
        reference=None if reference is None else str(reference),
        ood=str(select(cfg, "ood.name", "none")), rest=str(sampler.get("rest", "frozen")), params=_params(sampler))
