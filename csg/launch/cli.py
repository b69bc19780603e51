"""What ``train.py`` does around Hydra: reject unknown config-group choices early, report errors in one line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Callable

from csg.errors import CsgError

log = logging.getLogger("csg")


def group_choices(config_dir: Path) -> dict[str, list[str]]:
    """The options of every config group: ``{"sampler": ["csghmc", ...], "hydra/launcher": [...], ...}``."""
    groups: dict[str, list[str]] = {}
    for directory in sorted(p for p in config_dir.rglob("*") if p.is_dir()):
        options = sorted(f.stem for f in directory.glob("*.yaml"))
        if options:
            groups[directory.relative_to(config_dir).as_posix()] = options
    return groups


def search_path_dirs(overrides) -> list[Path]:
    """The folders a command adds to Hydra's config search path (``'hydra.searchpath=[file://my_configs]'``):
    ``file://`` folders (relative ones from the working directory) and ``pkg://`` packages."""
    import importlib.util

    folders = []
    for override in overrides:
        if override.key_or_group != "hydra.searchpath" or override.is_sweep_override() or override.is_delete():
            continue
        entries = override.value()
        for entry in entries if isinstance(entries, list) else [entries]:
            scheme, _, where = str(entry).partition("://")
            if scheme == "file":
                folders.append(Path(where))
            elif scheme == "pkg":
                try:
                    spec = importlib.util.find_spec(where.replace("/", "."))
                except (ImportError, ValueError):
                    spec = None
                if spec is not None and spec.submodule_search_locations:
                    folders += [Path(location) for location in spec.submodule_search_locations]
    return folders


def all_group_choices(config_dir: Path, overrides) -> dict[str, list[str]]:
    """:func:`group_choices` of ``config_dir`` and of every folder the command adds to the search path."""
    groups = group_choices(config_dir)
    for folder in search_path_dirs(overrides):
        if folder.is_dir():
            for group, options in group_choices(folder).items():
                groups[group] = sorted({*groups.get(group, []), *options})
    return groups


def check_group_choices(argv: list[str], config_dir: Path) -> str | None:
    """The one-line error for the first override that picks an unknown option of a config group, else None.

    Uses Hydra's own command-line and override parsers, so sweeps
    (``sampler=csgld,csghmc``) are checked choice by choice. Groups that Hydra
    itself provides (``hydra/launcher=submitit_slurm``, ...) are left to Hydra.
    """
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        overrides = OverridesParser.create().parse_overrides(get_args_parser().parse_args(argv).overrides)
    except (HydraException, SystemExit):
        return None  # malformed command lines are Hydra's to report
    groups = all_group_choices(config_dir, overrides)
    for override in overrides:
        group = override.key_or_group
        if group.startswith("hydra/") or group not in groups or override.package or override.is_delete():
            continue
        if override.is_sweep_override():
            if not override.is_choice_sweep():
                continue
            values = list(override.sweep_string_iterator())
        else:
            values = [override.get_value_element_as_str()]
        for value in values:
            if value not in groups[group]:
                return f"{group}={value} is not allowed: one of {', '.join(groups[group])}"
    return None


def run_or_exit(function: Callable[[], Any], run_dir: Path | None = None) -> Any:
    """Call ``function``; errors the user can act on end the process with one line, and no traceback:

    - a :class:`CsgError` (bad input, a refused directory or checkpoint, a diverged chain): its message and its
      exit code; a refusal (raised before the run directory was changed) is not written to the run's log;
    - a file-system error (a full disk, a read-only file system, a path that is a file): what happened to
      which file, and how to go on (exit 1);
    - Ctrl-C (SIGINT, unless ``trainer.checkpoint.signals`` lists it): exit 130, and how to go on;
    - a preemption signal (SIGTERM, SIGUSR1, SIGUSR2; :class:`csg.engine.checkpoint.Preempted`), in training after its
      checkpoint, anywhere else at once: what was kept and how to go on, then the signal is handed back to its
      previous owner: the process ends as the signal would have ended it (128 + signal), or submitit requeues it.

    ``run_dir`` (default: Hydra's output directory, if any) is where the "how to go on" looks for a checkpoint.
    """
    from csg.engine.checkpoint import Preempted, let_signal_act

    try:
        return function()
    except CsgError as error:
        _end(f"error: {error}", error.exit_code, logged=not getattr(error, "refused", False))
    except OSError as error:
        what = f"{error.strerror or type(error).__name__}: {error.filename}" if error.filename else str(error)
        _end(f"error: {what}; {_how_to_go_on(error, run_dir)}", 1, logged=not getattr(error, "refused", False))
    except KeyboardInterrupt as error:
        _end(f"interrupted (Ctrl-C){_phase(error)}; {_how_to_go_on(error, run_dir)}", 130,
             logged=not getattr(error, "refused", False))
    except Preempted as stop:
        message = stop_line(stop, run_dir)
        if not getattr(stop, "refused", False):
            _to_log_files(message)
        print(message, file=sys.stderr)
        let_signal_act(stop)


def stop_line(stop, run_dir: Path | None) -> str:
    """The line of a run stopped by a preemption signal (:class:`csg.engine.checkpoint.Preempted`)."""
    if stop.checkpointed:
        return f"{stop}; run the same command in the same run directory to resume"
    return f"{stop}; {_how_to_go_on(stop, run_dir)}"


def _phase(error: BaseException) -> str:
    """`` during the final evaluation`` (where Ctrl-C stopped the run, when it matters to how to go on)."""
    from csg.engine.checkpoint import EVALUATING

    return f" {EVALUATING}" if getattr(error, "phase", None) == EVALUATING else ""


def _end(message: str, code: int, *, logged: bool) -> None:
    if logged:
        _to_log_files(message)
    print(message, file=sys.stderr)
    raise SystemExit(code) from None


def _how_to_go_on(error: BaseException, run_dir: Path | None) -> str:
    """What the user can do after a stop that was not a refusal: resume, or start again."""
    from csg.engine.checkpoint import EVALUATING

    run_dir = run_dir if run_dir is not None else _hydra_run_dir()
    checkpoints = sorted(Path(run_dir).glob("checkpoint*.pt")) if run_dir is not None else []
    if getattr(error, "refused", False):
        if checkpoints:  # a resume stopped before it changed anything
            return f"nothing in {run_dir} was changed, and the same command resumes the run from {checkpoints[0].name}"
        return "nothing was written; run the same command again"
    if run_dir is None:
        return "run the same command again"
    if (Path(run_dir) / "metrics.json").exists():
        return f"the run had finished: its results in {run_dir} are complete"
    if checkpoints and getattr(error, "phase", None) == EVALUATING:
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


def _hydra_run_dir() -> Path | None:
    from hydra.core.hydra_config import HydraConfig

    from csg.engine.rundir import hydra_output_dir

    return hydra_output_dir() if HydraConfig.initialized() else None


def _to_log_files(message: str) -> None:
    """Write ``message`` to the run's log file(s) only; the console gets it once, on stderr."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
