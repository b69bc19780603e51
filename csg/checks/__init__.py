"""Checking a command before anything runs, in one place: :func:`check_train_command` (what ``train.py``,
:func:`csg.train` and the scripts call: group choices, then every job; the line it returns is reported by
:func:`csg.launch.cli.check_or_exit`, ``train.py``'s first step).

- :mod:`csg.checks.groups`: the options of every config group, and Hydra's reading of a command line;
- :mod:`csg.checks.preflight`: every job of a command composed and checked before Hydra starts one;
- :mod:`csg.checks.config`: the values of one composed config, group by group;
- :mod:`csg.checks.launcher`: whether the launcher a command names can run here (SLURM's clients).

csg.checks sits above the engine and below csg.posterior, csg.launch and studies: a study's own checks
(``synthetic=``) are passed in by the entry point (``study_checks``: :func:`csg.launch.studies.study_checks`,
the registered studies').
"""

from csg.checks.config import validate
from csg.checks.groups import check_group_choices
from csg.checks.preflight import StudyChecks, check_command, check_train_command

__all__ = ["StudyChecks", "check_command", "check_group_choices", "check_train_command", "validate"]
