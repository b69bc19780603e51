"""Train one SG-MCMC chain, collect posterior samples, evaluate their Bayesian model average: ``csg-train`` run
from a clone (csg/__main__.py has the command; ``python -m csg`` is the same, without the clone's studies/).

    python train.py                                   # cSGHMC, MLP, the embedded MNIST subset
    python train.py sampler=csghmc data=cifar100      # any data / model / sampler from configs/
    python train.py -m sampler=csgld,csghmc seed=0,1,2  # a Hydra multirun sweep
    python train.py synthetic=table4                  # a study on analytic targets (configs/synthetic/)

Run directories (config, log, samples/, metrics.json) go under runs/ (multirun/ for sweeps).
"""

import studies  # noqa: F401  (the clone's studies register their own train.py jobs: synthetic=<study>)
from csg.__main__ import main

if __name__ == "__main__":
    main()
