"""What ``train.py`` does around Hydra: report errors in one line (its checks before Hydra starts: :mod:`csg.checks`;
the lines and exit codes: :mod:`csg.launch.messages`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

from csg.checks import StudyChecks, check_train_command
from csg.errors import CommandRefused, CsgError, Preempted, ended_before_start
from csg.launch.messages import report, to_log_files

__all__ = ["check_or_exit", "run_or_exit"]


def run_or_exit(function: Callable[[], Any], run_dir: Path | None = None) -> Any:
    """Call ``function``; errors the user can act on end the process with one line, and no traceback:

    - a :class:`CsgError` (bad input, a refused directory or checkpoint, a diverged chain): its message and its
      exit code; a refusal (raised before the run directory was changed) is not written to the run's log;
    - a file-system error (a full disk, a read-only file system, a path that is a file): what happened to
      which file, and how to go on (exit 1);
    - Ctrl-C (SIGINT, unless ``trainer.checkpoint.signals`` lists it): exit 130, and how to go on;
    - a preemption signal (SIGTERM, SIGUSR1, SIGUSR2; :class:`csg.errors.Preempted`), in training after its
      checkpoint, anywhere else at once: what was kept and how to go on, then the signal is handed back to its
      previous owner: the process ends as the signal would have ended it (128 + signal), or submitit requeues it.

    The lines and exit codes are :func:`csg.launch.messages.report`'s. ``run_dir`` (default: Hydra's output
    directory, if any) is where the "how to go on" looks for a checkpoint.
    """
    try:
        return function()
    except (CsgError, OSError, KeyboardInterrupt, Preempted) as error:
        ended = report(error, run_dir)
        if ended.logged:
            to_log_files(ended.line)
        print(ended.line, file=sys.stderr)
        if isinstance(error, Preempted):
            from csg.engine.checkpoint import let_signal_act  # torch: imported by the run, never by a refusal

            let_signal_act(error)  # the process ends as the signal would have ended it, or submitit requeues it
        raise SystemExit(ended.exit_code) from None


def check_or_exit(argv: list[str], config_dir: Path, *, study_checks: StudyChecks = None) -> None:
    """``train.py``'s first step: every job of the command checked before Hydra starts one
    (:func:`csg.checks.check_train_command`); a command that would be refused ends with its one line and exit 2,
    as :func:`run_or_exit` reports it, having changed no file."""

    def check() -> None:
        message = check_train_command(argv, config_dir, study_checks=study_checks)
        if message is not None:
            raise ended_before_start(CommandRefused(message, key="overrides", value=list(argv)))

    run_or_exit(check)
