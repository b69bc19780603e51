"""A finished run as a posterior: :class:`~csg.posterior.posterior.Posterior` (``csg.Posterior``); reading a run
directory's metrics and the samples it recorded (:mod:`csg.posterior.store`; its saved config:
:mod:`csg.checks.saved`); evaluating them
(:mod:`csg.posterior.evaluate`); a posterior as one file (:mod:`csg.posterior.export`); its function-space draws
(:mod:`csg.posterior.draws`); runs side by side (:mod:`csg.posterior.compare`, ``csg.compare``)."""

from csg.posterior.posterior import Posterior
from csg.posterior.regression import Prediction, RegressionPosterior

__all__ = ["Posterior", "Prediction", "RegressionPosterior"]
