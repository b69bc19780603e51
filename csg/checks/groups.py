"""The options of every config group, and the first override of a command that picks one that does not exist.

:func:`parse_command_line` reads a ``train.py`` command line as Hydra does; :func:`check_group_choices` refuses
an unknown option of a config group (``sampler=csgdl``) in one line, choice by choice for sweeps;
:func:`check_user_yaml` holds the YAML files of the user's folders (``--config-dir``, ``hydra.searchpath``) to the
limits of a run directory's, and :func:`check_sections` refuses a chosen option that is not a mapping of keys.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIG_DIR_FLAGS", "SECTIONS", "all_group_choices", "check_group_choices", "check_sections",
           "check_user_yaml", "group_choices", "override_grammar_error", "parse_command_line", "search_path_dirs",
           "split_config_dir"]

CONFIG_DIR_FLAGS = ("--config-dir", "-cd")  # Hydra's flag that adds a folder of the user's YAML files
SECTIONS = ("data", "model", "likelihood", "sampler", "trainer", "logger", "ood", "evaluation")  # mappings of keys, every one


def parse_command_line(argv: list[str]):
    """``(args, overrides)``: Hydra's reading of a ``train.py`` command line (its flags: ``args.multirun``,
    ``args.config_name``, ...) and its parsed overrides (:class:`hydra.core.override_parser.types.Override`).

    Hydra's argument parser has no public API (:func:`csg.checks.hydra_internals.args_parser`). The overrides
    are parsed with Hydra's public :class:`~hydra.core.override_parser.overrides_parser.OverridesParser`.
    Raises Hydra's ``HydraException`` (or ``SystemExit``, argparse's) for a malformed command line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from csg.checks.hydra_internals import args_parser

    args = args_parser().parse_args(argv)
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


def check_user_yaml(first: Path | None, overrides) -> str | None:
    """The one-line error for the first YAML file of the user's ``--config-dir`` folder ``first`` or of a
    ``hydra.searchpath`` folder that is beyond the limits csg applies to a run directory's YAML
    (:func:`csg.io.trust.check_yaml_limits`: a special file, more than 1 MiB, an alias bomb), else None: Hydra
    would read such a file without limit (a 1 KB alias bomb or a 30 MB file hangs the composition)."""
    from csg.io.trust import UntrustedFile, check_yaml_limits

    folders = [("--config-dir", first)] if first is not None else []
    folders += [("hydra.searchpath", folder) for folder in search_path_dirs(overrides)]
    for flag, folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.yaml")):
            try:
                check_yaml_limits(path)
            except UntrustedFile as error:
                return (f"{flag}={folder} is not allowed: a folder of config files within csg's limits (1 MiB, no "
                        f"alias bombs); {path.relative_to(folder)}: {error.reason}")
    return None


def check_sections(cfg) -> str | None:
    """The one-line error for a composed config whose chosen option of a group (``data=mine``) is not a mapping of
    keys (a YAML list, a number), else None."""
    from omegaconf import OmegaConf

    from csg.checks.hydra_internals import raw_section

    choices = OmegaConf.select(cfg, "hydra.runtime.choices", default=None) or {}
    for section in SECTIONS:
        kind = raw_section(cfg, section)
        if kind is not None:
            chosen = choices.get(section)
            what = f"{section}={chosen}" if chosen is not None else section
            return (f"{what} is not allowed: a {section} option is a mapping of keys (name: ..., as csg's "
                    f"configs/{section}/*.yaml); it is {kind}")
    return None


def override_grammar_error(overrides: list[str]) -> str | None:
    """The one-line error for the first override Hydra's grammar cannot read (a key with a letter outside ASCII, a
    value with unbalanced brackets such as ``${oc.create:{a:1}}`` unquoted), else None: Hydra's own message spans
    several lines, points with a caret and ends with its traceback hint."""
    from hydra.errors import HydraException
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for text in overrides:
        try:
            parser.parse_overrides([text])
        except HydraException as error:
            lines = str(error).splitlines()
            caret = next((line.index("^") for line in lines[1:2] if line.strip() == "^"), None)
            prefix = "LexerNoViableAltException: "
            if caret is not None and lines[0].startswith(prefix) and 0 <= caret - len(prefix) < len(text):
                why = f"Hydra's grammar stops at character {caret - len(prefix) + 1}, {text[caret - len(prefix)]!r}"
            else:
                why = f"Hydra's grammar: {lines[1] if len(lines) > 1 and not lines[1].startswith('See ') else lines[0]}"
            return (f"{text} is not allowed: an override in Hydra's grammar, key=value with a key of ASCII letters, "
                    f"digits and _ . - / (a value Hydra cannot read goes in quotes: 'key=\"...\"'); {why}")
    return None
