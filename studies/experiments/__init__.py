"""Paper tables from finished runs: collect every run's config and metrics, compare with the papers.

- :mod:`studies.experiments.aggregate`: run directories -> one pandas DataFrame (missing runs kept);
- :mod:`studies.experiments.sweeps`: what a paper table is and which runs it expects;
- :mod:`studies.experiments.tables`: cSG-MCMC Tables 1-3 and ICSGLD Table 1 (their presets, sweeps and claims);
- :mod:`studies.experiments.table_report`: paper-vs-reproduced tables from the runs (and
  :mod:`studies.experiments.added`: a user's method beside the paper's);
- :mod:`studies.experiments.fig1`, :mod:`studies.experiments.fig3`, :mod:`studies.experiments.fig4`: the figures;
- :mod:`studies.experiments.table5`: cSG-MCMC Table 5 (Bayesian logistic regression ESS);
- :mod:`studies.experiments.launch`: how a target starts its ``train.py`` runs (multiruns, torchrun, SLURM);
- :mod:`studies.experiments.registry`: every paper target (what ``make <target>`` runs), one registry
  (:mod:`studies.experiments.job`: one call of the driver; :mod:`studies.experiments.in_process`: the
  targets that run in the driver's process).

``scripts/reproduce.py <target>`` is the one driver: it runs a target's experiments and writes its
tables and figures (``make table1``, ``make icsgld-bandit``, ...; ``make -n <target>`` shows the call).
"""
