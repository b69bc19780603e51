"""Everything that reproduces or goes beyond the papers, above the engine:

- :mod:`studies.experiments`: paper tables and figures from runs, and the registry of every make target;
- :mod:`studies.accuracy`: samplers against reference posteriors;
- :mod:`studies.nuts`: NumPyro's NUTS, one settings class and one runner, for every reference posterior;
- :mod:`studies.synthetic`: studies on analytic targets (:mod:`studies.targets`);
- :mod:`studies.bandit`: the ICSGLD contextual bandit;
- :mod:`studies.paper`: the papers' published numbers.
"""

from __future__ import annotations

from omegaconf import DictConfig

import csg


def check_synthetic(cfg: DictConfig) -> None:
    """``synthetic=<study>``: the study's checks (:func:`studies.synthetic.validate`), imported when called."""
    from studies.synthetic import validate

    validate(cfg)


def run_synthetic(cfg: DictConfig, run_dir):
    """``synthetic=<study>``: the study run in ``run_dir`` (:func:`studies.synthetic.run_in`), imported when
    called."""
    from studies.synthetic import run_in

    return run_in(cfg, run_dir)


csg.register_study("synthetic", check_synthetic, run_synthetic)  # train.py's synthetic=<study> jobs
