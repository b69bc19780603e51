"""Paper tables from finished runs: collect every run's config and metrics, compare with the papers.

- :mod:`csg.experiments.aggregate`: run directories -> one pandas DataFrame (missing runs kept);
- :mod:`csg.experiments.table5`: cSG-MCMC Table 5 (Bayesian logistic regression ESS).

``scripts/report.py <table> <runs dir>`` writes a table's CSV and Markdown.
"""
