"""Studies that run as train.py jobs under a config key of their own (``synthetic=<study>``, say), not a network's.

A study's package registers its key once, when it is imported: ``csg.register_study(key, check, run)``. Then
``train.py`` / ``csg-train`` (and :func:`csg.check_command`) check every job of a command that sets ``key`` with
``check(cfg)`` before Hydra starts (a one-line :class:`~csg.errors.ConfigError`), and run such a job with
:func:`run_study`: in its run directory, locked (one writer), checked again, then ``run(cfg, run_dir)`` instead of
training a network. csg's own studies register themselves this way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Study", "register_study", "registered_studies", "run_study", "study_checks"]


@dataclass(frozen=True)
class Study:
    """A config key whose jobs are a study's: ``check(cfg)`` refuses a job in one line, ``run(cfg, run_dir)``
    runs it, writing into ``run_dir``."""

    key: str
    check: Callable[[Any], None]
    run: Callable[[Any, Path], Any]


_STUDIES: dict[str, Study] = {}


def register_study(key: str, check: Callable[[Any], None], run: Callable[[Any, Path], Any]) -> None:
    """Register the study key ``key`` (a top-level config key; registering it again replaces it)."""
    if not isinstance(key, str) or not key.isidentifier():
        raise ValueError(f"key={key!r}: a top-level config key, e.g. 'synthetic'")
    if not callable(check) or not callable(run):
        raise ValueError(f"study {key!r}: check and run must be callables taking the composed config")
    _STUDIES[key] = Study(key, check, run)


def registered_studies() -> dict[str, Study]:
    """Every study registered in this process (csg's entry point imports :mod:`csg.studies`, whose studies
    register themselves)."""
    return dict(_STUDIES)


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
