"""A finished run as a posterior: :class:`~csg.posterior.posterior.Posterior` (``csg.Posterior``), and loading
and evaluating a run directory's samples (:mod:`csg.posterior.store`)."""

from csg.posterior.posterior import Posterior

__all__ = ["Posterior"]
