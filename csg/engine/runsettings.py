"""The typed tree of a run's settings (:class:`RunSettings` and its sections): frozen dataclasses of plain values,
read from a composed config by :func:`csg.engine.settings.run_settings` (the boundary, which imports omegaconf; this
module does not). Nested values are frozen (:func:`frozen`: mappings read-only, lists as tuples); a builder gets
plain copies (:func:`thawed`, :meth:`Component.options`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from csg.components import TARGET, target_of

__all__ = ["Component", "ContourSettings", "EnergySettings", "EvaluationSettings", "PriorSettings", "ReplicaSettings",
           "RunSettings", "SamplerSettings", "ScheduleSettings", "SwagSettings", "TraceSettings", "TrainerSettings",
           "frozen", "thawed"]


def frozen(value: Any) -> Any:
    """``value`` read-only: mappings as ``MappingProxyType``, sequences (not text) as tuples, all the way down."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: frozen(item) for key, item in value.items()})
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return tuple(frozen(item) for item in value)
    return value


def thawed(value: Any) -> Any:
    """A plain copy of a :func:`frozen` value: dicts and lists, as the config held them."""
    if isinstance(value, Mapping):
        return {key: thawed(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [thawed(item) for item in value]
    return value


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
                **thawed(self.options)}


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", frozen(self.values))

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

    def options(self, drop: tuple[str, ...] = ("name",)) -> dict[str, Any]:
        """The group's keys but those of ``drop``, as keyword arguments: plain copies (dicts and lists)."""
        return {key: thawed(value) for key, value in self.values.items() if key not in drop}

    def target_path(self) -> str:
        """The dotted path of a user's component (:func:`csg.components.target_of`'s one-line error without one)."""
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
    else ``sampler.weight_decay`` as ``decay``; as the config holds them."""

    variance: float | None
    decay: float

    def arguments(self) -> dict[str, Any]:
        """Keyword arguments of :func:`csg.engine.prior.weight_decay` and ``prior_record``, as floats."""
        return {"variance": None if self.variance is None else float(self.variance), "decay": float(self.decay)}


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
