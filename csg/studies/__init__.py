"""Everything that reproduces or goes beyond the papers, above the engine:

- :mod:`csg.studies.experiments`: paper tables and figures from runs, and the registry of every make target;
- :mod:`csg.studies.accuracy`: samplers against reference posteriors;
- :mod:`csg.studies.synthetic`: studies on analytic targets (:mod:`csg.studies.targets`);
- :mod:`csg.studies.bandit`: the ICSGLD contextual bandit;
- :mod:`csg.studies.paper`: the papers' published numbers.
"""

from __future__ import annotations

from omegaconf import DictConfig

import csg


def check_synthetic(cfg: DictConfig) -> None:
    """``synthetic=<study>``: the study's checks (:func:`csg.studies.synthetic.validate`), imported when called."""
    from csg.studies.synthetic import validate

    validate(cfg)


def run_synthetic(cfg: DictConfig, run_dir):
    """``synthetic=<study>``: the study run in ``run_dir`` (:func:`csg.studies.synthetic.run_in`), imported when
    called."""
    from csg.studies.synthetic import run_in

    return run_in(cfg, run_dir)


csg.register_study("synthetic", check_synthetic, run_synthetic)  # train.py's synthetic=<study> jobs
