"""A finished run as a posterior: :class:`~csg.posterior.posterior.Posterior` (``csg.Posterior``); reading a run
directory, its saved config and the samples it recorded (:mod:`csg.posterior.store`); evaluating them
(:mod:`csg.posterior.evaluate`)."""

from csg.posterior.posterior import Posterior

__all__ = ["Posterior"]
