"""``csg.train``: what ``python train.py <overrides>`` runs, from Python or a notebook, returning the posterior.

The command is checked as train.py checks it (:func:`csg.checks.check_train_command`), composed by Hydra from
csg's configs (:data:`csg.paths.CONFIGS`: the repository's ``configs/``, or an install's) with the same
overrides, and run by :func:`csg.launch.run.run` in this process, so a ``_target_`` importable here (the
caller's own modules) works. The run directory, its ``.hydra/``, ``train.log`` and ``metrics.json`` are those
train.py writes. Errors are raised, not ``SystemExit``: a
:class:`~csg.errors.CsgError` whose message is the line train.py prints after ``error:``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from csg.errors import CommandRefused, ConfigError, CsgError, Preempted

if TYPE_CHECKING:
    from csg.posterior import Posterior

from csg.paths import CONFIGS, ROOT  # noqa: E402


class RunStopped(CsgError):
    """A run that ended on a file-system error or a preemption signal: train.py's line (without ``error:``)."""

    def __init__(self, message: str, exit_code: int = 1):
        self.exit_code = exit_code
        super().__init__(message)


def train(overrides: Sequence[str] = ()) -> Posterior:
    """Run ``python train.py <overrides>`` in this process; return the finished run's :class:`csg.Posterior`.

    ``overrides``: train.py's ``key=value`` arguments, e.g. ``["trainer.epochs=20", "sampler=csgld", "seed=1"]``
    (``hydra.run.dir=<path>`` picks the run directory; else ``runs/<date>/<time>_<sampler>_<data>_seed<seed>``
    under the current directory, as train.py). Every check of train.py happens first, and a refused command
    raises :class:`~csg.errors.CommandRefused` (a :class:`~csg.errors.ConfigError`) with train.py's one-line
    message before any run directory is made; a refusal found once the data are known leaves no run directory
    either. Other stops raise what train.py reports (:func:`csg.launch.messages.report`): a
    :class:`~csg.errors.CsgError` (a diverged chain, a damaged checkpoint: :class:`~csg.errors.DamagedFileError`),
    :class:`~csg.launch.api.RunStopped` (a full disk; a preemption signal, after its checkpoint in training, at once
    elsewhere), ``KeyboardInterrupt``.
    One job only: ``-m`` (multirun), Hydra's other flags and ``synthetic=`` studies are refused; under
    torchrun use train.py. The posterior is loaded on the device the run trained on, with ``trust_code=True``: the
    components it builds are the ones the caller named.

    Hydra configures logging for the run (its console and ``train.log`` handlers); the root logger's handlers
    and level, and Hydra's global state, are put back as they were when the call returns.
    """
    from csg.posterior import Posterior
    from csg.checks import check_train_command

    overrides = checked_overrides(overrides)
    _fresh_stamp(overrides)
    message = check_train_command(overrides, CONFIGS)
    if message is not None:
        raise CommandRefused(message, key="overrides", value=overrides)
    outcome = _run_under_hydra(overrides)
    error = outcome.get("error")
    if error is not None:
        _raise(error, outcome.get("run_dir"))
    # the run this call just made from the caller's own overrides: its _target_ objects are the caller's own
    return Posterior.load(outcome["run_dir"], device=outcome["metrics"]["device"], trust_code=True)


def check_command(overrides: Sequence[str], config_dir: str | Path | None = None) -> str | None:
    """train.py's one-line refusal of the command ``overrides``, or None: every check train.py makes before Hydra
    starts (:func:`csg.checks.check_train_command`; a multirun's ``-m`` and ``a,b`` sweeps are checked job by
    job, a registered study's key by its own checks: :mod:`csg.launch.studies`), against csg's configs or
    ``config_dir``'s. Nothing runs and nothing is written."""
    from csg.checks import check_train_command
    from csg.launch.studies import study_checks

    return check_train_command(list(overrides), Path(config_dir) if config_dir is not None else CONFIGS,
                               study_checks=study_checks())


def _fresh_stamp(overrides: list[str]) -> None:
    """A new time stamp for this call's default run directory (``runs/<date>/<time>_...``; preflight resolves it),
    one that no run of this directory has: calls within one second would otherwise share a directory."""
    import time

    import csg

    csg._STAMP = None
    if any(item.partition("=")[0].lstrip("+~") == "hydra.run.dir" for item in overrides):
        return
    while list(Path("runs").glob(f"{csg._run_stamp()}_*")):
        time.sleep(0.05)
        csg._STAMP = None


def checked_overrides(overrides: Sequence[str]) -> list[str]:
    """A list of ``key=value`` strings for one job of a network, or a one-line refusal."""
    if isinstance(overrides, (str, bytes)) or not all(isinstance(item, str) for item in overrides):
        raise ConfigError("overrides", overrides, "a list of key=value strings, as train.py's command line "
                          "takes them, e.g. ['sampler=csgld', 'trainer.epochs=20']")
    overrides = list(overrides)
    for item in overrides:
        key = item.partition("=")[0].strip().lstrip("+~")
        if item.startswith("-"):
            what = "multirun" if item in ("-m", "--multirun") else "Hydra's command-line flags"
            raise CommandRefused(f"{item} is not allowed: csg.train runs one job and returns its posterior ({what} "
                                 "is train.py's: call csg.train once per job, or run `python train.py -m ...`)",
                                 key=key, value=item)
        if key == "hydra.mode":
            raise CommandRefused(f"{item} is not allowed: csg.train runs one job (RUN); for a sweep run "
                                 "`python train.py -m ...`", key=key, value=item.partition("=")[2])
        if key == "synthetic" or key.startswith("synthetic."):
            raise CommandRefused(f"{item} is not allowed: csg.train trains a network and returns its posterior; a "
                                 f"study on analytic targets runs as `python train.py {item}`", key=key,
                                 value=item.partition("=")[2])
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("WORLD_SIZE", os.environ["WORLD_SIZE"], "1: csg.train runs in one process; under "
                          "torchrun or SLURM tasks launch train.py")
    return overrides


def _run_under_hydra(overrides: list[str]) -> dict[str, Any]:
    """Hydra's composition and run directory for ``overrides``, :func:`csg.launch.run.run` inside; returns the outcome
    (``run_dir``, and ``metrics`` or ``error``: the task never raises, so Hydra never exits the process)."""
    import hydra
    from hydra.core.hydra_config import HydraConfig

    outcome: dict[str, Any] = {}

    def task(cfg) -> None:
        from csg.engine.rundir import RunDirectory, hydra_output_dir
        from csg.launch.run import run

        run_dir = outcome["run_dir"] = hydra_output_dir()
        try:
            if cfg.get("synthetic"):  # an experiment preset that chose a study: refused, leaving nothing
                with RunDirectory(run_dir):
                    name = cfg.synthetic.get("name", "?")
                    raise CommandRefused(f"synthetic={name} is not allowed: csg.train trains a network and returns "
                                         "its posterior; a study on analytic targets runs with train.py",
                                         key="synthetic", value=name)
            outcome["metrics"] = run(cfg)
        except BaseException as error:  # noqa: BLE001 - reported by csg.train once Hydra is done
            outcome["error"] = error
            _log_error(error, run_dir)

    task.__module__ = "train"  # Hydra names the job after the task's module: train.log, as train.py's
    main = hydra.main(config_path=str(CONFIGS), config_name="config", version_base="1.3")(task)
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    saved_argv, saved_hydra = sys.argv, HydraConfig.instance().cfg
    sys.argv = [str(ROOT / "train.py"), *overrides]
    try:
        main()
    except SystemExit as stop:  # Hydra's own report of a command it could not run (printed above)
        if "error" not in outcome:
            outcome["error"] = RunStopped(f"Hydra could not run the command {' '.join(overrides)!r} (its message is "
                                          "above)", exit_code=stop.code if isinstance(stop.code, int) else 1)
    finally:
        sys.argv = saved_argv
        HydraConfig.instance().cfg = saved_hydra
        for handler in list(root.handlers):  # Hydra's console and train.log handlers: closed, train.log complete
            if handler not in saved_handlers:
                root.removeHandler(handler)
                handler.close()
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    return outcome


def _log_error(error: BaseException, run_dir: Path | None) -> None:
    """Into train.log, as train.py writes it (:func:`csg.launch.messages.report`: not for a command that ended
    before its run started, which leaves no log)."""
    from csg.launch.messages import report, to_log_files

    ended = report(error, run_dir)
    if ended is not None and ended.logged:
        to_log_files(ended.line)


def _raise(error: BaseException, run_dir: Path | None) -> None:
    """Raise what ended the run: a CsgError as it is, a file-system error or a preemption as RunStopped (the
    signal handed back to its previous owner first, as train.py does), anything else unchanged."""
    from csg.launch.messages import report

    if isinstance(error, OSError):
        raise RunStopped(report(error, run_dir).message) from error
    if isinstance(error, Preempted):
        handler = error.previous_handler
        if handler is not signal.default_int_handler:  # (that one would raise KeyboardInterrupt over the message)
            signal.signal(error.signum, handler if handler is not None else signal.SIG_DFL)
            os.kill(os.getpid(), error.signum)  # SIGTERM's default ends the process here, as it ends train.py
        ended = report(error, run_dir)
        raise RunStopped(ended.message, exit_code=ended.exit_code) from error
    raise error
