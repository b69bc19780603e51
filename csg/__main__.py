"""``csg-train`` (``python -m csg``, ``python train.py``): train one SG-MCMC chain, collect posterior samples,
evaluate their Bayesian model average.

    csg-train                                     # cSGHMC, MLP, the embedded MNIST subset
    csg-train sampler=csghmc data=cifar100        # any data / model / sampler of csg's configs
    csg-train -m sampler=csgld,csghmc seed=0,1,2  # a Hydra multirun sweep
    csg-train synthetic=table4                    # a study on analytic targets (configs/synthetic/)
    csg-train --config-dir my_configs model=my_net   # your own YAML files (group folders), searched first

Run directories (config, log, samples/, metrics.json) go under runs/ (multirun/ for sweeps) of the folder the
command runs in; a ``_target_`` of yours imports from there too.

Every job of the command is checked first (:func:`csg.checks.check_train_command`), then Hydra composes
csg's configs (:data:`csg.paths.CONFIGS`) and runs :func:`task`. ``--config-dir DIR`` puts ``DIR`` ahead of
csg's configs in Hydra's search path (Hydra itself puts it after them), so a file of yours replaces a
built-in option of the same name; ``hydra.searchpath`` folders come after csg's (new names only). The
environment variable ``CSG_EXTRA_OVERRIDES`` holds overrides appended to every command (after its own: they win).
The entry point sits above every room of the package (tests/test_layout.py): it is what ``train.py`` was.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence

from omegaconf import DictConfig

from csg.launch.cli import check_or_exit, run_or_exit
from csg.launch.studies import import_registered, registered_studies, remember_modules, run_study
from csg.paths import CONFIGS


# overrides appended to every command (``CSG_EXTRA_OVERRIDES="trainer.epochs=2 logger=none"``): small budgets
# for documented commands run as written (tests/launch/test_docs_run.py), a scratch setting for a whole session
EXTRA_OVERRIDES = "CSG_EXTRA_OVERRIDES"


def extra_overrides() -> list[str]:
    """``CSG_EXTRA_OVERRIDES`` as overrides: ``key=value`` words only (a flag there, ``-m`` say, would turn every
    command into something else); a one-line :class:`~csg.errors.ConfigError` naming the variable otherwise."""
    from csg.errors import ConfigError

    text = os.environ.get(EXTRA_OVERRIDES, "")
    try:
        words = shlex.split(text)
    except ValueError as error:  # an unbalanced quote
        raise ConfigError(EXTRA_OVERRIDES, text, f"key=value overrides as a shell would split them ({error})") from None
    for word in words:
        if word.startswith("-") or ("=" not in word and not word.startswith("~")):
            raise ConfigError(EXTRA_OVERRIDES, text, f"key=value overrides only, appended to every command ({word!r} "
                              "is not one: flags such as --multirun belong on the command line)")
    return words


def unregistered_study(keys) -> None:
    """A one-line refusal of a study's key (``synthetic=<study>``) among ``keys`` whose study no imported package
    registered: csg's own studies are the repository's ``studies/``, which a clone's ``train.py`` imports."""
    from csg.checks.preflight import STUDY_KEYS
    from csg.errors import ConfigError

    for key in keys:
        if key in STUDY_KEYS and key not in registered_studies():
            raise ConfigError(key, "...", "a study an installed package registers: csg's own are the repository's "
                              "studies/ (run a clone's train.py, or pip install path/to/csg/studies), yours by "
                              "csg.register_study in a csg.studies entry point")


def task(cfg: DictConfig) -> float | None:
    """One job: a study on analytic targets (``synthetic=``), or a network's chains; returns the ensemble's NLL
    (what a Hydra sweeper would minimise)."""
    run_or_exit(import_registered)
    if any(cfg.get(key) for key in registered_studies()):
        run_or_exit(lambda: run_study(cfg))
        return None
    run_or_exit(lambda: unregistered_study([key for key in cfg if cfg.get(key)]))
    from csg.launch.run import run

    metrics = run_or_exit(lambda: run(cfg))
    return metrics["ensemble"]["nll"]


def main(argv: Sequence[str] | None = None) -> None:
    """The command line ``argv`` (default ``sys.argv[1:]``) checked, then run by Hydra."""
    import hydra

    from csg.checks.groups import split_config_dir
    from csg.launch.studies import study_checks

    run_or_exit(import_registered)
    remember_modules()  # the command's job processes (a SLURM job) register the same studies

    argv = list(sys.argv[1:] if argv is None else argv)
    argv += run_or_exit(extra_overrides)  # after the command's own: the last value wins
    run_or_exit(lambda: unregistered_study([item.split("=")[0].lstrip("+~").split(".")[0] for item in argv]))
    # every job of the command, before Hydra starts one (a study's own checks for synthetic=<study>)
    check_or_exit(argv, CONFIGS, study_checks=study_checks())
    first, rest = split_config_dir(argv)
    # the user's folder as Hydra's primary one and csg's after it: the user's files win
    app = hydra.main(version_base="1.3", config_path=str(first or CONFIGS), config_name="config")(task)
    program = sys.argv[0]
    sys.argv = [program, *rest, *(["--config-dir", str(CONFIGS)] if first is not None else [])]
    try:
        app()
    finally:
        sys.argv = [program, *argv]


if __name__ == "__main__":
    main()
