"""Do cycles pay on multimodal posteriors? The samplers against exact and tempered references (issue 36).

- :mod:`.targets`: two Gaussian mixtures with unequal weights and variances (2-D and 10-D: exact density,
  draws and mode weights) and a 1-2-1 tanh network whose hidden units are ordered and sign-fixed, so that its
  posterior's modes are different explanations of the data, not permutation copies;
- :mod:`.reference`: the network's reference: 32 NumPyro NUTS chains from dispersed starts, pooled once R-hat
  across them passes, checked against parallel tempering (mode weights, predictive TV);
- :mod:`.metrics`: mode-weight error, MMD, W2 between samples, the regression's predictive TV;
- :mod:`.chains`: SGLD, SGHMC, cSGLD, cSGHMC, 4 chains of each, reSGLD, CSGLD, ICSGLD at one gradient budget,
  every method, step size and seed as one vectorised run;
- :mod:`.study`, :mod:`.report`: ``results/csgmcmc/accuracy_multimodal.{md,csv,png}`` and the verdicts.
"""
