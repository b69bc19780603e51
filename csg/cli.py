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


def check_group_choices(argv: list[str], config_dir: Path) -> str | None:
    """The one-line error for the first override that picks an unknown option of a config group, else None.

    Uses Hydra's own command-line and override parsers, so sweeps
    (``sampler=csgld,csghmc``) are checked choice by choice. Groups that Hydra
    itself provides (``hydra/launcher=submitit_slurm``, ...) are left to Hydra.
    """
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    groups = group_choices(config_dir)
    try:
        overrides = OverridesParser.create().parse_overrides(get_args_parser().parse_args(argv).overrides)
    except (HydraException, SystemExit):
        return None  # malformed command lines are Hydra's to report
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


def exit_on_unknown_choice(argv: list[str], config_dir: Path) -> None:
    message = check_group_choices(argv, config_dir)
    if message is not None:
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def run_or_exit(function: Callable[[], Any]) -> Any:
    """Call ``function``; a :class:`CsgError` ends the process with a one-line message and its exit code.

    A preemption signal (SIGTERM, SIGUSR1, SIGUSR2), once the checkpoint is written, is handed back
    to its previous owner: the process ends as the signal would have ended it, or submitit requeues it.
    """
    from csg.checkpoint import Preempted, let_signal_act

    try:
        return function()
    except CsgError as error:
        _to_log_files(f"error: {error}")
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(error.exit_code) from None
    except Preempted as stop:
        message = f"{stop}; run the same command in the same run directory to resume"
        _to_log_files(message)
        print(message, file=sys.stderr)
        let_signal_act(stop)


def _to_log_files(message: str) -> None:
    """Write ``message`` to the run's log file(s) only; the console gets it once, on stderr."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
