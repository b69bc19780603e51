"""A run's settings as typed, frozen values, read from the composed config once, at the boundary
(:mod:`csg.engine.build`); the functions below it take these values, not the config.

:class:`EvaluationSettings`: what makes a run's ensemble out of its samples and how the ensemble is scored
(:func:`csg.posterior.evaluate.evaluate_store`), built by :func:`csg.engine.build.evaluation_settings` from a
train.py config or a run's saved one. The other sections of a run (data, model, likelihood, sampler, schedule,
trainer) are still read from the config, by the engine's boundary (:mod:`csg.engine.build`, ``chain``, ``limits``,
``job_checks``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EvaluationSettings", "SwagSettings"]


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
