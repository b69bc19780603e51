"""Train one SG-MCMC chain, collect posterior samples, evaluate their Bayesian model average.

    python train.py                                   # cSGHMC, MLP, the embedded MNIST subset
    python train.py sampler=csghmc data=cifar100      # any data / model / sampler from configs/
    python train.py -m sampler=csgld,csghmc seed=0,1,2  # a Hydra multirun sweep
    python train.py synthetic=table4                  # a study on analytic targets (configs/synthetic/)

Run directories (config, log, samples/, metrics.json) go under runs/ (multirun/ for sweeps).
"""

import sys

import hydra
from omegaconf import DictConfig

from csg.launch.cli import check_or_exit, run_or_exit
from csg.paths import CONFIGS


@hydra.main(version_base="1.3", config_path=str(CONFIGS), config_name="config")
def main(cfg: DictConfig) -> float | None:
    if cfg.get("synthetic"):
        from csg.studies.synthetic import run_study

        run_or_exit(lambda: run_study(cfg))
        return None
    from csg.launch.run import run

    metrics = run_or_exit(lambda: run(cfg))
    return metrics["ensemble"]["nll"]


if __name__ == "__main__":
    from csg.studies import STUDY_CHECKS

    # every job of the command, before Hydra starts one (a study's own checks for synthetic=<study>)
    check_or_exit(sys.argv[1:], CONFIGS, study_checks=STUDY_CHECKS)
    main()
