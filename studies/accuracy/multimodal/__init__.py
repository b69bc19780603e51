"""Where do cycles pay? cSGLD and cSGHMC against constant steps on posteriors whose barriers we control (issue 45),
and the ICSGLD paper's samplers beside them (issue 54).

- :mod:`.targets`: two-mode mixtures built to a barrier (2 to 16 nats), the paper's 25-Gaussian grid, Wang et
  al.'s unequal-variance grid, and the 1-2-1 tanh network;
- :mod:`.barriers`: each target's barriers, measured on minimum-energy paths (the string method);
- :mod:`.landscapes`, :mod:`.chains`: every method, setting and seed of a group of targets as one vectorised run,
  every budget scored from it;
- :mod:`.contour`: the ICSGLD paper's samplers in that run: reSGLD, CSGLD and ICSGLD x4 (:mod:`.merge` adds
  methods to a finished study);
- :mod:`.tuning`: step grids and the lattices of beta and C, the search that brackets every choice, the edge
  check that refuses the report;
- :mod:`.ceiling`: the mode-weight error of M perfect picks, exactly;
- :mod:`.study`, :mod:`.verdicts`, :mod:`.report`, :mod:`.reading`, :mod:`.figures`:
  ``results/csgmcmc/accuracy_multimodal.{md,csv,png}`` and the tables beside them;
- :mod:`.reference`, :mod:`.importance`: the network with real barriers: its minima, barriers, and the reference
  of its mode weights (importance sampling from two independent proposals; NUTS and parallel tempering fail there).
"""
