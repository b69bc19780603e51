"""Studies that run as train.py jobs under a config key of their own (``synthetic=<study>``, say), not a network's.

A study's package registers its key once, when it is imported: ``csg.register_study(key, check, run)``. Then
``train.py`` / ``csg-train`` (and :func:`csg.check_command`) check every job of a command that sets ``key`` with
``check(cfg)`` before Hydra starts (a one-line :class:`~csg.errors.ConfigError`), and run such a job with
:func:`run_study`: in its run directory, locked (one writer), checked again, then ``run(cfg, run_dir)`` instead of
training a network. A package names the module whose import registers its studies in the entry-point group
``csg.studies`` (csg's own studies, the repository's ``studies/``, as the ``csg-studies`` distribution does:
``make install`` installs it), and csg's entry point imports them; a module registered otherwise is named in
``CSG_STUDY_MODULES`` for the command's job processes (a SLURM job imports them again before it runs).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ENTRY_POINTS", "MODULES", "Study", "entry_point_modules", "import_registered", "register_study",
           "registered_studies", "remember_modules", "run_study", "study_checks"]

MODULES = "CSG_STUDY_MODULES"  # comma-separated: the modules whose import registers a command's studies
ENTRY_POINTS = "csg.studies"  # the entry-point group of the packages whose studies register at import


@dataclass(frozen=True)
class Study:
    """A config key whose jobs are a study's: ``check(cfg)`` refuses a job in one line, ``run(cfg, run_dir)``
    runs it, writing into ``run_dir``."""

    key: str
    check: Callable[[Any], None]
    run: Callable[[Any, Path], Any]
    module: str | None = None  # the module that registered it (``run``'s): a job process imports it again


_STUDIES: dict[str, Study] = {}


def register_study(key: str, check: Callable[[Any], None], run: Callable[[Any, Path], Any]) -> None:
    """Register the study key ``key`` (a top-level config key; registering it again replaces it)."""
    if not isinstance(key, str) or not key.isidentifier():
        raise ValueError(f"key={key!r}: a top-level config key, e.g. 'synthetic'")
    if not callable(check) or not callable(run):
        raise ValueError(f"study {key!r}: check and run must be callables taking the composed config")
    _STUDIES[key] = Study(key, check, run, getattr(run, "__module__", None))


def registered_studies() -> dict[str, Study]:
    """Every study registered in this process (csg's entry point imports :mod:`studies`, whose studies
    register themselves)."""
    return dict(_STUDIES)


def entry_point_modules() -> list[str]:
    """The modules the :data:`ENTRY_POINTS` group names (an entry's ``module`` or ``module:attribute``)."""
    from importlib.metadata import entry_points

    return [entry.value.split(":")[0] for entry in entry_points(group=ENTRY_POINTS)]


def remember_modules() -> None:
    """Name the modules of the registered studies that no :data:`ENTRY_POINTS` entry imports in :data:`MODULES`,
    for the job processes a command starts."""
    named = {module.split(".")[0] for module in entry_point_modules()}
    modules = sorted({study.module for study in _STUDIES.values() if study.module and study.module != "__main__"
                      and study.module.split(".")[0] not in named})
    if modules:
        os.environ[MODULES] = ",".join(modules)


def import_registered() -> None:
    """Import the modules of the :data:`ENTRY_POINTS` group (one that fails inside its import is skipped with a
    warning, one that is not there at all silently: its studies stay unregistered) and those :data:`MODULES`
    names (a job process: its command's studies register again)."""
    import logging

    from csg.errors import ConfigError

    for module in entry_point_modules():
        try:
            importlib.import_module(module)
        except ImportError as error:
            if isinstance(error, ModuleNotFoundError) and error.name == module.split(".")[0]:
                continue  # metadata left without its package (another environment's, an uninstall's): none there
            logging.getLogger(__name__).warning("the %s entry point %r does not import (%s): its studies are not "
                                                "registered", ENTRY_POINTS, module, error)
    for module in filter(None, os.environ.get(MODULES, "").split(",")):
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ConfigError(MODULES, module, f"modules this process can import, whose import registers the "
                              f"command's studies ({type(error).__name__}: {error})") from None


def study_checks() -> dict[str, Callable[[Any], None]]:
    """``{key: check}`` of every registered study: what csg's command checks run for a job that sets ``key``."""
    return {key: study.check for key, study in registered_studies().items()}


def run_study(cfg: Any, run_dir: str | Path | None = None) -> Any:
    """Run the job ``cfg`` of the registered study whose key it sets, in ``run_dir`` (default: Hydra's output
    folder of the job): the folder locked (one writer), the study's checks run again, then ``run(cfg, run_dir)``;
    its result returned. A job refused by the check writes nothing there."""
    import csg
    from csg.engine.rundir import RunDirectory, hydra_output_dir

    study = next((study for key, study in _STUDIES.items() if cfg.get(key)), None)
    if study is None:
        raise ValueError(f"the config sets no registered study's key (registered: {', '.join(_STUDIES) or 'none'})")
    run_dir = Path(run_dir if run_dir is not None else hydra_output_dir())
    with RunDirectory(run_dir, leader=csg.process_rank() == 0) as directory:
        directory.lock()
        study.check(cfg)
        directory.accept()
        return study.run(cfg, run_dir)
