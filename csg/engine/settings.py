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

Values are kept as the config holds them (checked by :mod:`csg.checks` before any run): reading them here changes
no number of a run. A key a run saved by an earlier version lacks reads as that version's default.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from csg.components import TARGET, Config, select
from csg.schedules import SCHEDULE_OPTIONS

__all__ = ["Component", "ContourSettings", "EnergySettings", "EvaluationSettings", "PriorSettings", "ReplicaSettings",
           "RunSettings", "SamplerSettings", "ScheduleSettings", "SwagSettings", "TraceSettings", "TrainerSettings",
           "config_fingerprint", "evaluation_settings", "node_options", "prior_settings", "resolved", "run_settings",
           "schedule_settings", "trace_settings"]


@dataclass(frozen=True)
class ScheduleSettings:
    """The step-size schedule (``sampler.schedule``: cyclical, decreasing, constant or step; ``lr0``, ``cycles``,
    ``explore``, and ``options``, the optional keys :func:`csg.schedules.schedule_for` reads: ``lr_final``,
    ``gamma``, ...) and the collection plan (``samples_per_cycle`` samples in each cycle's sampling stage, over
    ``trainer.epochs`` = ``epochs``)."""

    schedule: str
    lr0: float
    cycles: int
    explore: float
    samples_per_cycle: int
    epochs: int
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def sampler(self) -> dict[str, Any]:
        """The keys of a ``sampler:`` section that :func:`csg.schedules.schedule_for` reads."""
        return {"schedule": self.schedule, "lr0": self.lr0, "cycles": self.cycles, "explore": self.explore,
                **self.options}


@dataclass(frozen=True)
class TraceSettings:
    """The parameter trace (``trace``): when ``enabled``, ``samples`` draws of the sampling-stage iterations after
    the first ``burnin`` (:class:`csg.evaluation.ess.ParameterTrace`)."""

    enabled: bool
    burnin: int
    samples: int


@dataclass(frozen=True)
class SwagSettings:
    """Cyclical SWAG (``sampler.swag``): ``draws_per_cycle`` draws of a Gaussian of mean, diagonal and ``rank``
    low-rank covariance fitted to each cycle's snapshots, its covariance times ``scale``
    (:func:`csg.evaluation.swag.cyclical_swag`)."""

    draws_per_cycle: int
    rank: int
    scale: float


@dataclass(frozen=True)
class EvaluationSettings:
    """How a run's samples become its ensemble, and how the ensemble is scored.

    - ``seed``: the run's seed (cyclical SWAG's draws derive theirs from it);
    - ``chains``: the run's chains (``sampler.chains``), whose sample manifests are read;
    - ``replica``: a replica-exchange run, whose ensemble is the lowest temperature's samples only;
    - ``importance``: a contour sampler's importance weights w_i (``sampler.contour.ensemble_weights``);
    - ``swag``: cyclical-SWAG draws instead of the samples (None: the samples);
    - ``cycle_weights``: ``equal``, or ``harmonic`` (Appendix F: each cycle weighted by the harmonic-mean estimate
      of its evidence, from its samples' training log-likelihoods);
    - ``ece_bins``: the bins of the expected calibration error; ``reference``: a reference predictive's ``.npz``
      to score the ensemble against (None: none); ``ood``: the out-of-distribution set's name (``none``);
    - ``params``, ``rest``: the sampled part (``sampler.params``, ``sampler.rest``): a sampled last layer is
      evaluated with the frozen trunk run once.
    """

    seed: int
    chains: int = 1
    replica: bool = False
    importance: bool = False
    swag: SwagSettings | None = None
    cycle_weights: str = "equal"
    ece_bins: int = 15
    reference: str | None = None
    ood: str = "none"
    params: tuple[str, ...] | str | None = None  # a str: refused by csg.engine.part.select_part, naming the key
    rest: str = "frozen"


@dataclass(frozen=True)
class Component:
    """A config group as data (``data``, ``model``, ``likelihood``, ``adapter``, ``ood``, ``sampler.optimizer``):
    ``group``, its dotted key, and ``values``, its keys resolved into plain values. A user's ``_target_`` stays a
    path here; :mod:`csg.engine.build` and :mod:`csg.components` resolve it."""

    group: str
    values: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def custom(self) -> bool:
        """Whether the group names a user's component (has a ``_target_``)."""
        return TARGET in self.values

    @property
    def name(self) -> Any:
        return self.values.get("name")

    @property
    def key(self) -> str:
        """The key an error names: ``<group>._target_`` for a user's component, else ``<group>.name``."""
        return f"{self.group}.{TARGET if self.custom else 'name'}"

    @property
    def label(self) -> str:
        """The value at :attr:`key`, as text."""
        return str(self.values.get(TARGET) if self.custom else self.name)

    def get(self, key: str, default: Any = None) -> Any:
        """The group's value at ``key`` (a copy: the settings stay as read)."""
        return copy.deepcopy(self.values.get(key, default))

    def options(self, drop: tuple[str, ...] = ("name",)) -> dict[str, Any]:
        """The group's keys but those of ``drop``, as keyword arguments (copies)."""
        return {key: copy.deepcopy(value) for key, value in self.values.items() if key not in drop}

    def target_path(self) -> str:
        """The dotted path of a user's component (:func:`csg.components.target_of`'s one-line error without one)."""
        from csg.components import target_of

        value = self.values.get(TARGET)
        nested: dict[str, Any] = {TARGET: None if value == "???" else value}
        for part in reversed(self.group.split(".")):
            nested = {part: nested}
        return target_of(nested, f"{self.group}.{TARGET}")


@dataclass(frozen=True)
class ContourSettings:
    """A contour sampler's energy partition and weights (``sampler.contour``; :mod:`csg.samplers.contour`)."""

    low: float
    width: float
    partitions: int
    zeta: float
    sa_step: float | None
    multiplier_clip: tuple[float, ...]
    difference: str = "backward"
    interacting: bool = False
    weight_exponent: float | None = None
    ensemble_weights: str = "importance"


@dataclass(frozen=True)
class ReplicaSettings:
    """Replica exchange (``sampler.replica``): each replica's temperature and step-size factors, the swap's
    correction (per example) and how often a swap is tried."""

    temperatures: tuple[float, ...]
    step_sizes: tuple[float, ...]
    correction: float
    swap_every: int


@dataclass(frozen=True)
class EnergySettings:
    """The energy estimate of interacting chains (``sampler.energy``): a control variate refreshed every
    ``refresh_every_epochs`` epochs when ``variance_reduction``."""

    variance_reduction: bool = False
    refresh_every_epochs: int = 1


@dataclass(frozen=True)
class PriorSettings:
    """The Gaussian prior (:mod:`csg.engine.prior`): ``prior.variance`` (None: unset, or a run saved before the key),
    else ``sampler.weight_decay`` as ``decay``."""

    variance: float | None
    decay: float

    def arguments(self) -> dict[str, Any]:
        """Keyword arguments of :func:`csg.engine.prior.weight_decay` and ``prior_record``."""
        return {"variance": self.variance, "decay": self.decay}


@dataclass(frozen=True)
class SamplerSettings:
    """The sampler's step (``sampler``): ``update_rule`` (sgld, sghmc, psgld; pSGLD's ``alpha`` and ``eps``), the
    first step size ``lr0``, ``temperature``, ``momentum``, a user's ``optimizer`` (a :class:`Component`), the
    ``chains``, the sampled part (``params``, ``rest``), and a contour sampler's, replica exchange's and the
    interacting chains' energy settings."""

    update_rule: str | None
    lr0: float
    temperature: float
    momentum: float | None = None
    chains: int = 1
    params: tuple[str, ...] | str | None = None  # a str: refused by csg.engine.part.select_part, naming the key
    rest: str = "frozen"
    alpha: float | None = None
    eps: float | None = None
    optimizer: Component | None = None
    contour: ContourSettings | None = None
    replica: ReplicaSettings | None = None
    energy: EnergySettings | None = None
    schedule: str = "cyclical"


@dataclass(frozen=True)
class TrainerSettings:
    """What the engine reads of ``trainer``: ``epochs``, ``precision``, ``sync_batchnorm``, ``stack_chains``, and
    whether the run checkpoints (``checkpoint_every`` epochs, on ``checkpoint_signals``)."""

    epochs: int
    precision: str = "32"
    sync_batchnorm: bool = False
    stack_chains: bool | str | None = None
    checkpoint_every: int = 0
    checkpoint_signals: tuple[str, ...] = ()

    @property
    def checkpoints(self) -> bool:
        return self.checkpoint_every > 0 or len(self.checkpoint_signals) > 0


@dataclass(frozen=True)
class RunSettings:
    """The typed tree of a run (:func:`run_settings`); see the module's docstring."""

    seed: int
    data: Component
    model: Component
    likelihood: Component | None
    adapter: Component | None
    ood: Component
    sampler: SamplerSettings
    prior: PriorSettings
    schedule: ScheduleSettings
    trainer: TrainerSettings
    trace: TraceSettings
    evaluation: EvaluationSettings
    fingerprint: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


def resolved(cfg: Config) -> dict[str, Any]:
    """A config as plain containers, its interpolations resolved once (a DictConfig), or a copy (a mapping)."""
    if isinstance(cfg, (DictConfig, ListConfig)):
        if isinstance(cfg, DictConfig) and "hydra" in cfg:  # Hydra's own node (a sweep's composed job): not the run's
            cfg = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
        return OmegaConf.to_container(cfg, resolve=True)
    return copy.deepcopy({key: value for key, value in cfg.items()})


def node_options(node: Config, drop: tuple[str, ...] = ("name",)) -> dict[str, Any]:
    """A config group's options as keyword arguments: its node resolved, without the keys of ``drop``."""
    return {key: value for key, value in resolved(node).items() if key not in drop}


_NOT_IN_FINGERPRINT = {"trainer.progress", "trainer.log_every_n_steps", "trainer.log_every_n_epochs",
                       "trainer.checkpoint", "trainer.threads", "logger", "hydra", "callbacks"}


def config_fingerprint(cfg: Config) -> dict[str, Any]:
    """The settings a checkpoint must share with the run that resumes it (all but logging and checkpointing): the
    resolved config's dotted keys and values."""
    from csg.reporting import flat_keys

    def kept(key: str) -> bool:
        parts = key.split(".")
        return not any(".".join(parts[:n]) in _NOT_IN_FINGERPRINT for n in range(1, len(parts) + 1))

    return {key: value for key, value in flat_keys(resolved(cfg)).items() if kept(key)}


def run_settings(cfg: Config) -> RunSettings:
    """The :class:`RunSettings` of a composed train.py config or a run's saved one, resolved once."""
    values = resolved(cfg)
    sampler, trainer = values.get("sampler") or {}, values.get("trainer") or {}
    checkpoint = trainer.get("checkpoint") or {}

    def component(group: str, default: dict | None = None) -> Component | None:
        node = select(values, group, default)
        return None if node is None else Component(group, MappingProxyType(node))

    adapter = component("adapter")
    return RunSettings(
        seed=values.get("seed"), data=component("data", {}), model=component("model", {}),
        likelihood=component("likelihood"), ood=component("ood", {"name": "none"}),
        adapter=None if adapter is None or adapter.values.get("name", "none") == "none" else adapter,
        sampler=_sampler_settings(sampler),
        prior=prior_settings(values),
        schedule=schedule_settings(values), trainer=TrainerSettings(
            epochs=trainer.get("epochs"), precision=str(trainer.get("precision", "32")),
            sync_batchnorm=bool(trainer.get("sync_batchnorm", False)), stack_chains=trainer.get("stack_chains"),
            checkpoint_every=int(checkpoint.get("every_n_epochs", 0) or 0),
            checkpoint_signals=tuple(checkpoint.get("signals") or ())),
        trace=trace_settings(values), evaluation=evaluation_settings(values),
        fingerprint=MappingProxyType(config_fingerprint(values)))


def prior_settings(cfg: Config) -> PriorSettings:
    """The :class:`PriorSettings` of a run's config (``prior.variance``, ``sampler.weight_decay``)."""
    return PriorSettings(variance=_optional_float(select(cfg, "prior.variance")),
                         decay=_optional_float(select(cfg, "sampler.weight_decay")))


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _sampler_settings(sampler: Mapping[str, Any]) -> SamplerSettings:
    contour, replica, energy = sampler.get("contour"), sampler.get("replica"), sampler.get("energy")
    params, optimizer = sampler.get("params"), sampler.get("optimizer")
    return SamplerSettings(
        update_rule=sampler.get("update_rule"), lr0=sampler.get("lr0"), temperature=sampler.get("temperature"),
        momentum=sampler.get("momentum"), chains=int(sampler.get("chains", 1)), rest=str(sampler.get("rest", "frozen")),
        params=params if params is None or isinstance(params, str) else tuple(str(p) for p in params),
        alpha=sampler.get("alpha"), eps=sampler.get("eps"), schedule=sampler.get("schedule"),
        optimizer=None if optimizer is None else Component("sampler.optimizer", MappingProxyType(optimizer)),
        contour=None if contour is None else ContourSettings(
            low=float(contour["low"]), width=float(contour["width"]), partitions=int(contour["partitions"]),
            zeta=float(contour["zeta"]), sa_step=_optional_float(contour.get("sa_step")),
            multiplier_clip=tuple(float(v) for v in contour["multiplier_clip"]),
            difference=str(contour.get("difference", "backward")), interacting=bool(contour.get("interacting")),
            weight_exponent=contour.get("weight_exponent"),
            ensemble_weights=contour.get("ensemble_weights", "importance")),
        replica=None if replica is None else ReplicaSettings(
            temperatures=tuple(replica["temperatures"]), step_sizes=tuple(replica["step_sizes"]),
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
        options=MappingProxyType({key: sampler[key] for key in SCHEDULE_OPTIONS if key in sampler}))


def trace_settings(cfg: Config) -> TraceSettings:
    """The :class:`TraceSettings` of a run's config (``trace``; a run saved before it: off)."""
    trace = cfg.get("trace")
    if trace is None:
        return TraceSettings(enabled=False, burnin=0, samples=0)
    return TraceSettings(enabled=bool(trace.get("enabled")), burnin=trace.get("burnin"), samples=trace.get("samples"))


def evaluation_settings(cfg: Config) -> EvaluationSettings:
    """The :class:`~csg.engine.settings.EvaluationSettings` of a run's config (train.py's, or a run's saved one)."""
    sampler, evaluation = cfg["sampler"], cfg.get("evaluation") or {}
    swag, contour, params = sampler.get("swag"), sampler.get("contour"), sampler.get("params")
    reference = evaluation.get("reference")
    return EvaluationSettings(
        seed=int(cfg["seed"]), chains=int(sampler.get("chains", 1)), replica=sampler.get("replica") is not None,
        importance=contour is not None and contour.get("ensemble_weights", "importance") == "importance",
        swag=(SwagSettings(int(swag["draws_per_cycle"]), int(swag["rank"]), float(swag["scale"]))
              if swag is not None and int(swag["draws_per_cycle"]) > 0 else None),
        cycle_weights=str(evaluation.get("cycle_weights", "equal")), ece_bins=int(evaluation.get("ece_bins", 15)),
        reference=None if reference is None else str(reference),
        ood=str(select(cfg, "ood.name", "none")), rest=str(sampler.get("rest", "frozen")),
        params=params if params is None or isinstance(params, str) else tuple(str(p) for p in params))
