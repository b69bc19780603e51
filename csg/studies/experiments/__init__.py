"""Paper tables from finished runs: collect every run's config and metrics, compare with the papers.

- :mod:`csg.studies.experiments.aggregate`: run directories -> one pandas DataFrame (missing runs kept);
- :mod:`csg.studies.experiments.sweeps`: what a paper table is and which runs it expects;
- :mod:`csg.studies.experiments.tables`: cSG-MCMC Tables 1-3 and ICSGLD Table 1 (their presets, sweeps and claims);
- :mod:`csg.studies.experiments.table_report`: paper-vs-reproduced tables from the runs (and
  :mod:`csg.studies.experiments.added`: a user's method beside the paper's);
- :mod:`csg.studies.experiments.fig1`, :mod:`csg.studies.experiments.fig3`, :mod:`csg.studies.experiments.fig4`: the figures;
- :mod:`csg.studies.experiments.table5`: cSG-MCMC Table 5 (Bayesian logistic regression ESS);
- :mod:`csg.studies.experiments.launch`: how a target starts its ``train.py`` runs (multiruns, torchrun, SLURM);
- :mod:`csg.studies.experiments.registry`: every paper target (what ``make <target>`` runs), one registry
  (:mod:`csg.studies.experiments.job`: one call of the driver; :mod:`csg.studies.experiments.in_process`: the
  targets that run in the driver's process).

``scripts/reproduce.py <target>`` is the one driver: it runs a target's experiments and writes its
tables and figures (``make table1``, ``make icsgld-bandit``, ...; ``make -n <target>`` shows the call).
"""
