"""Sampling accuracy against gold-standard posteriors (issue: not only ESS).

- :mod:`studies.accuracy.reference`: NUTS reference posteriors (NumPyro; the ``reference`` extra);
- :mod:`studies.accuracy.chains`: the Table 5 samplers run on the same posteriors, at the Table 5 protocol and
  over a grid of step sizes, scored by :mod:`csg.evaluation.posterior_distance`;
- :mod:`studies.accuracy.report`: the table (``results/csgmcmc/accuracy.{csv,md}``) and its figure.
"""
