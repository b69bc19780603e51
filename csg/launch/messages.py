"""The one place where a run that ends on an error is put into words: its line, its exit code, and how to go on.

:func:`report` turns what ended a run (:mod:`csg.errors`' typed errors, a file-system error, Ctrl-C) into a
:class:`Report`; ``train.py`` and the scripts print it (:func:`csg.launch.cli.run_or_exit`), :func:`csg.train`
raises it (:mod:`csg.launch.api`), and both write it to the run's log unless the command ended before its run
started (:attr:`csg.errors.EndsRun.before_start`: nothing in the run directory was changed, and no log is
written there). The lines and codes:

- a :class:`~csg.errors.CsgError` (refused, a damaged file, a diverged chain): ``error: <its message>``, its
  :attr:`~csg.errors.CsgError.exit_code` (2 for a refusal, else 1);
- a file-system error: ``error: <what happened>: <file>; <how to go on>``, exit 1;
- Ctrl-C: ``interrupted (Ctrl-C)[ during the final evaluation]; <how to go on>``, exit 130;
- a preemption signal (:class:`~csg.errors.Preempted`): :func:`stop_line`, exit 128 + the signal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from csg.errors import CsgError, EndsRun, Preempted, before_start

__all__ = ["Report", "how_to_go_on", "report", "stop_line", "to_log_files"]

log = logging.getLogger("csg")


@dataclass(frozen=True)
class Report:
    """How a run that ended on an error is reported.

    ``message``: the line after ``error:`` (what :func:`csg.train`'s exception says); ``line``: what train.py
    prints on stderr and writes to the run's log; ``exit_code``: train.py's exit status; ``logged``: whether the
    line goes to the run's log (not for a command that ended before its run started)."""

    message: str
    line: str
    exit_code: int
    logged: bool


def report(error: BaseException, run_dir: Path | None = None) -> Report | None:
    """The :class:`Report` of ``error``, or None for an error that is not a stop the user can act on (a bug: its
    traceback shows). ``run_dir`` (default: Hydra's output directory, if any) is where "how to go on" looks."""
    logged = not before_start(error)
    if isinstance(error, CsgError):
        return Report(str(error), f"error: {error}", error.exit_code, logged)
    if isinstance(error, OSError):
        what = f"{error.strerror or type(error).__name__}: {error.filename}" if error.filename else str(error)
        message = f"{what}; {how_to_go_on(error, run_dir)}"
        return Report(message, f"error: {message}", 1, logged)
    if isinstance(error, KeyboardInterrupt):
        message = f"interrupted (Ctrl-C){_phase_words(error)}; {how_to_go_on(error, run_dir)}"
        return Report(message, message, 130, logged)
    if isinstance(error, Preempted):
        message = stop_line(error, run_dir)
        return Report(message, message, 128 + error.signum, logged)
    return None


def stop_line(stop: Preempted, run_dir: Path | None) -> str:
    """The line of a run stopped by a preemption signal (:class:`csg.errors.Preempted`)."""
    if stop.checkpointed:
        return f"{stop}; run the same command in the same run directory to resume"
    return f"{stop}; {how_to_go_on(stop, run_dir)}"


def how_to_go_on(error: BaseException, run_dir: Path | None) -> str:
    """What the user can do after ``error`` stopped the run: run it again, resume, or start over."""
    from csg.engine.checkpoint import EVALUATING

    run_dir = run_dir if run_dir is not None else _hydra_run_dir()
    checkpoints = sorted(Path(run_dir).glob("checkpoint*.pt")) if run_dir is not None else []
    if before_start(error):
        if checkpoints:  # a resume stopped before it changed anything
            return f"nothing in {run_dir} was changed, and the same command resumes the run from {checkpoints[0].name}"
        return "nothing was written; run the same command again"
    if run_dir is None:
        return "run the same command again"
    if (Path(run_dir) / "metrics.json").exists():
        return f"the run had finished: its results in {run_dir} are complete"
    if checkpoints and isinstance(error, EndsRun) and error.phase == EVALUATING:
        return (f"training had finished: its samples and {checkpoints[0].name} in {run_dir} are kept, and the same "
                "command evaluates them")
    if checkpoints:
        return (f"the files already written in {run_dir} are kept, and the same command resumes the run from "
                f"{checkpoints[0].name}")
    from csg.engine.rundir import earlier_results

    if earlier_results(run_dir):  # samples or logs without a checkpoint: the same command would refuse them
        return (f"no checkpoint had been written in {run_dir}: the same command with trainer.checkpoint.resume=false "
                "moves what it holds into earlier/<time>/ and starts the run again")
    return f"no checkpoint had been written in {run_dir}: the same command starts the run again"


def to_log_files(line: str) -> None:
    """Write ``line`` to the run's log file(s) only; the console gets it once, on stderr."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, line, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def _phase_words(error: BaseException) -> str:
    """`` during the final evaluation`` (where Ctrl-C stopped the run, when it matters to how to go on)."""
    from csg.engine.checkpoint import EVALUATING

    return f" {EVALUATING}" if isinstance(error, EndsRun) and error.phase == EVALUATING else ""


def _hydra_run_dir() -> Path | None:
    from hydra.core.hydra_config import HydraConfig

    from csg.engine.rundir import hydra_output_dir

    return hydra_output_dir() if HydraConfig.initialized() else None
