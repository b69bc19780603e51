"""Paper tables from finished runs: collect every run's config and metrics, compare with the papers.

- :mod:`csg.experiments.aggregate`: run directories -> one pandas DataFrame (missing runs kept);
- :mod:`csg.experiments.tables`: cSG-MCMC Tables 1-3 (their sweeps, and paper-vs-reproduced tables);
- :mod:`csg.experiments.fig1`, :mod:`csg.experiments.fig3`, :mod:`csg.experiments.fig4`: the figures;
- :mod:`csg.experiments.table5`: cSG-MCMC Table 5 (Bayesian logistic regression ESS).

``scripts/reproduce.py <table>`` runs a table's sweeps and writes its CSV and Markdown
(``make table1`` etc.); ``scripts/report.py`` aggregates Table 5 and Figure 4.
"""
