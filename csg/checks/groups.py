"""The options of every config group, and the first override of a command that picks one that does not exist.

:func:`parse_command_line` reads a ``train.py`` command line as Hydra does; :func:`check_group_choices` refuses
an unknown option of a config group (``sampler=csgdl``) in one line, choice by choice for sweeps.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIG_DIR_FLAGS", "all_group_choices", "check_group_choices", "group_choices", "parse_command_line",
           "search_path_dirs", "split_config_dir"]

CONFIG_DIR_FLAGS = ("--config-dir", "-cd")  # Hydra's flag that adds a folder of the user's YAML files


def parse_command_line(argv: list[str]):
    """``(args, overrides)``: Hydra's reading of a ``train.py`` command line (its flags: ``args.multirun``,
    ``args.config_name``, ...) and its parsed overrides (:class:`hydra.core.override_parser.types.Override`).

    Hydra's argument parser is ``hydra._internal.utils.get_args_parser``: Hydra 1.3 has no public API for the
    command line ``@hydra.main`` reads (its flags and their spellings), so it is used here, and only here. The
    overrides are parsed with Hydra's public :class:`~hydra.core.override_parser.overrides_parser.OverridesParser`.
    Raises Hydra's ``HydraException`` (or ``SystemExit``, argparse's) for a malformed command line."""
    from hydra._internal.utils import get_args_parser  # no public API: see above
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = get_args_parser().parse_args(argv)
    return args, OverridesParser.create().parse_overrides(args.overrides)


def split_config_dir(argv: list[str]) -> tuple[Path | None, list[str]]:
    """``(folder, the rest of argv)``: the folder a command names with ``--config-dir DIR`` (``-cd DIR``,
    ``--config-dir=DIR``), made absolute, and the command line without the flag; ``(None, argv)`` without one.

    Hydra puts such a folder after the application's own config folder, so a file there could never replace a
    built-in option of the same name; csg's entry point (:mod:`csg.__main__`) puts it first instead, and the
    checks (:mod:`csg.checks.preflight`) compose in that order too."""
    folder, rest, words = None, [], iter(argv)
    for word in words:
        if word in CONFIG_DIR_FLAGS:
            value = next(words, None)
            if value is None:
                return None, list(argv)  # a flag without its value: Hydra's argument parser reports it
            folder = value
        elif word.startswith("--config-dir="):
            folder = word.partition("=")[2]
        else:
            rest.append(word)
    return (Path(folder).resolve(), rest) if folder is not None else (None, rest)


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


def all_group_choices(config_dir: Path, overrides, first: Path | None = None) -> dict[str, list[str]]:
    """:func:`group_choices` of ``config_dir``, of the user's ``--config-dir`` folder ``first``, and of every
    folder the command adds to the search path."""
    groups = group_choices(config_dir)
    for folder in [*([first] if first is not None else []), *search_path_dirs(overrides)]:
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
    from hydra.errors import HydraException

    first, rest = split_config_dir(argv)
    try:
        _, overrides = parse_command_line(rest)
    except (HydraException, SystemExit):
        return None  # malformed command lines are Hydra's to report
    groups = all_group_choices(config_dir, overrides, first)
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
