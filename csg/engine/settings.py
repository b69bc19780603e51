"""A run's settings as typed, frozen values, read from the composed config once, here, at the engine's boundary;
the functions that take them (:mod:`csg.engine.build`'s schedule and plans, :mod:`csg.posterior.evaluate`) take no
config.

- :class:`ScheduleSettings` (:func:`schedule_settings`): the step-size schedule and the collection plan;
- :class:`TraceSettings` (:func:`trace_settings`): the parameter trace;
- :class:`EvaluationSettings` (:func:`evaluation_settings`): what makes a run's ensemble out of its samples and how
  the ensemble is scored, from a train.py config or a run's saved one.

The other sections of a run (data, model, likelihood, sampler, trainer) are still read from the config, by the
engine's boundary (:mod:`csg.engine.build`, ``chain``, ``limits``, ``job_checks``). Values are kept as the config
holds them (checked by :mod:`csg.checks` before any run): reading them here changes no number of a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from csg.components import Config, select
from csg.schedules import SCHEDULE_OPTIONS

__all__ = ["EvaluationSettings", "ScheduleSettings", "SwagSettings", "TraceSettings", "evaluation_settings",
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


def schedule_settings(cfg: Config) -> ScheduleSettings:
    """The :class:`ScheduleSettings` of a run's config (``sampler``, ``trainer.epochs``)."""
    sampler = cfg.sampler
    return ScheduleSettings(
        schedule=sampler.schedule, lr0=sampler.lr0, cycles=sampler.cycles, explore=sampler.explore,
        samples_per_cycle=sampler.get("samples_per_cycle"), epochs=cfg.trainer.epochs,
        options=MappingProxyType({key: sampler[key] for key in SCHEDULE_OPTIONS if key in sampler}))


def trace_settings(cfg: Config) -> TraceSettings:
    """The :class:`TraceSettings` of a run's config (``trace``)."""
    return TraceSettings(enabled=bool(cfg.trace.enabled), burnin=cfg.trace.burnin, samples=cfg.trace.samples)


def evaluation_settings(cfg: Config) -> EvaluationSettings:
    """The :class:`~csg.engine.settings.EvaluationSettings` of a run's config (train.py's, or a run's saved one)."""
    sampler, evaluation = cfg.sampler, cfg.evaluation
    swag, contour, params = sampler.get("swag"), sampler.get("contour"), sampler.get("params")
    return EvaluationSettings(
        seed=int(cfg.seed), chains=int(sampler.get("chains", 1)), replica=sampler.get("replica") is not None,
        importance=contour is not None and contour.get("ensemble_weights", "importance") == "importance",
        swag=(SwagSettings(int(swag.draws_per_cycle), int(swag.rank), float(swag.scale))
              if swag is not None and int(swag.draws_per_cycle) > 0 else None),
        cycle_weights=str(evaluation.cycle_weights), ece_bins=int(evaluation.ece_bins),
        reference=None if evaluation.get("reference") is None else str(evaluation.reference),
        ood=str(select(cfg, "ood.name", "none")), rest=str(sampler.get("rest", "frozen")),
        params=params if params is None or isinstance(params, str) else tuple(str(p) for p in params))
