"""Everything that reproduces or goes beyond the papers, above the engine:

- :mod:`csg.studies.experiments`: paper tables and figures from runs, and the registry of every make target;
- :mod:`csg.studies.accuracy`: samplers against reference posteriors;
- :mod:`csg.studies.synthetic`: studies on analytic targets (:mod:`csg.studies.targets`);
- :mod:`csg.studies.bandit`: the ICSGLD contextual bandit;
- :mod:`csg.studies.paper`: the papers' published numbers.
"""
