"""Everything that reproduces or goes beyond the papers, above the engine:

- :mod:`csg.studies.experiments`: paper tables and figures from runs, and the registry of every make target;
- :mod:`csg.studies.accuracy`: samplers against reference posteriors;
- :mod:`csg.studies.synthetic`: studies on analytic targets (:mod:`csg.studies.targets`);
- :mod:`csg.studies.bandit`: the ICSGLD contextual bandit;
- :mod:`csg.studies.paper`: the papers' published numbers.
"""

from __future__ import annotations

from omegaconf import DictConfig


def check_synthetic(cfg: DictConfig) -> None:
    """``synthetic=<study>``: the study's checks (:func:`csg.studies.synthetic.validate`), imported when called."""
    from csg.studies.synthetic import validate

    validate(cfg)


# what train.py passes to csg.checks (which imports no study): a study's config key -> its checks of a config
STUDY_CHECKS = {"synthetic": check_synthetic}
