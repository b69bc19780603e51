"""The checks of a ``train.py`` command line before Hydra starts anything: every job of a sweep, every key.

Hydra composes, writes and launches one job at a time, so a sweep whose last point is bad would train all
the others first, and a key that does not exist surfaces as Hydra's multi-line message (or, with ``+``, is
silently added and never read). :func:`check_command` composes the config of every job of the command line
(a multirun's sweeps expanded as Hydra's basic sweeper expands them) with Hydra's own compose API and checks
each as the run will (:func:`csg.checks.config.validate`, or for ``synthetic=`` the study's checks the entry point
passes), before the first job starts. It returns the first problem as a one-line message.

A sweep whose jobs run here one after another (Hydra's basic launcher) is also checked as each job checks
itself once its data are built (:func:`csg.engine.job_checks.check_job`: the model against the data, memory, the
schedule and collection plan, the step's values), every job before the first trains: each data set is built
once for the whole sweep, on the CPU, and built again by the job that uses it (a single run checks all this
itself before training, and is not built twice). ``hydra/launcher=slurm`` on a machine without SLURM is
refused before Hydra starts.

A user's ``--config-dir`` folder is searched before csg's configs, as the entry point (:mod:`csg.__main__`) has
Hydra search it, so the option checked is the option run; a folder that does not exist is one line.

``+key=value`` adds a key only where the config documents free keys: under ``model.`` (keyword arguments of
the model's factory, e.g. ``+model.drop_rate=0.1`` for a timm model) and ``hydra.``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from csg.checks.groups import (all_group_choices, check_group_choices, check_sections, check_user_yaml,
                               override_grammar_error, parse_command_line, split_config_dir)
from csg.checks.launcher import no_controller, no_slurm
from csg.errors import CsgError, first_line

__all__ = ["STUDY_KEYS", "StudyChecks", "check_command", "check_train_command"]

# a study's config key (`train.py synthetic=table4`) -> the study's checks of a composed config (raising CsgError)
StudyChecks = Mapping[str, Callable[[DictConfig], None]] | None
STUDY_KEYS = ("synthetic",)  # the config keys that make a command a study, whose values its own checks read

FREE_KEYS = ("model.", "hydra.", "callbacks.")  # groups whose keys are keyword arguments: `+key` may add to them
# ... and, where the group names a user's callable, its keyword arguments
FREE_UNDER_TARGET = {"data.": "data", "sampler.optimizer.": "sampler.optimizer", "likelihood.": "likelihood"}
_HYDRA_ONLY_FLAGS = {"--help", "-h", "--hydra-help", "--version", "--cfg", "-c", "--info", "-i", "--shell-completion",
                     "-sc", "--resolve", "--package", "-p"}


def _jobs(args, overrides) -> list[list[str]]:
    """The override list of each job the command starts (one, or every point of a multirun): a multirun's jobs as
    Hydra's basic sweeper makes them (``BasicSweeper.split_arguments``), with Hydra's public override API: every
    value of each choice or range sweep, the product in the order the keys first appear, a key given twice taking
    its last value. Another kind of sweep (``interval(...)``) raises: only another sweeper understands it."""
    if not args.multirun:
        return [list(args.overrides)]
    import itertools

    from hydra.errors import HydraException

    values: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise HydraException(f"the basic sweeper does not support sweep type: {override.value_type.name}")
    return [list(job) for job in itertools.product(*values.values())]


def _key_of(override) -> str:
    return override.key_or_group if override.package is None else f"{override.key_or_group}@{override.package}"


def _known_keys(cfg: DictConfig, key: str) -> str:
    """What the config has where ``key`` was asked for: the keys of its parent node."""
    parent, _, _ = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if isinstance(node, DictConfig):
        keys = sorted(str(k) for k in node.keys() if str(k) != "hydra")
        return f"{parent or 'the config'} has {', '.join(keys)}"
    return f"{parent} is not a group of keys"


def _refuse_key(cfg: DictConfig, override_text: str, key: str, added: bool) -> str:
    how = (f"`+` adds keys only under {', '.join(FREE_KEYS)} and, for data=custom / sampler=custom / "
           "likelihood=custom, under "
           f"{', '.join(FREE_UNDER_TARGET)} (keyword arguments); " if added else "")
    return f"{override_text} is not allowed: {key} is not a key of the config; {how}{_known_keys(cfg, key)}"


def _compose(config_dirs: tuple[Path, ...], config_name: str, overrides: list[str], composed: dict) -> DictConfig:
    """Hydra's composition of ``overrides``; ``composed`` keeps each distinct list's (a sweep repeats them)."""
    key = tuple(overrides)
    if key not in composed:
        composed[key] = _compose_once(config_dirs, config_name, overrides)
    return composed[key]


def _compose_once(config_dirs: tuple[Path, ...], config_name: str, overrides: list[str]) -> DictConfig:
    """Composed from ``config_dirs`` in their order (the user's ``--config-dir`` folder, then csg's), then the
    command's ``hydra.searchpath`` folders: the order in which the entry point (:mod:`csg.__main__`) searches."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from csg.checks.hydra_internals import search_also

    first, *after = (str(Path(folder).resolve()) for folder in config_dirs)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=first, version_base="1.3"):
            if after:
                search_also(first, after)  # Hydra's internals: csg.checks.hydra_internals
            return compose(config_name, overrides=overrides, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


def _check_job(config_dirs: tuple[Path, ...], config_name: str, job: list[str], groups: set[str], multirun: bool,
               composed: dict, study_checks: StudyChecks) -> str | None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(job)
    plain = [text for text, override in zip(job, parsed)
             if _key_of(override) in groups or override.key_or_group.startswith("hydra")]
    try:
        base = _compose(config_dirs, config_name, plain, composed)  # the group choices alone: what the keys must exist in
    except Exception as error:  # noqa: BLE001 - Hydra's message, in one line
        return f"{' '.join(plain)} is not allowed: {first_line(error)}"
    message = check_sections(base)
    if message is not None:
        return message
    for text, override in zip(job, parsed):
        key = override.key_or_group
        if _key_of(override) in groups or key.startswith("hydra") or override.is_delete():
            continue
        exists = _exists(base, key)
        if override.is_add() or override.is_force_add():
            if not exists and not _free(base, key):
                return _refuse_key(base, text, key, added=True)
        elif not exists:
            return _refuse_key(base, text, key, added=False)
    try:
        cfg = _compose(config_dirs, config_name, job, composed)
    except Exception as error:  # noqa: BLE001
        return f"{' '.join(job) or 'the command'} is not allowed: {first_line(error)}"
    return check_sections(cfg) or _check_config(cfg, study_checks) or _check_run_dir(cfg, multirun)


_MISSING = object()


def _exists(cfg: DictConfig, key: str) -> bool:
    """Whether the config has ``key``, a value to be given (``???``, as ``data._target_`` of data=custom) included."""
    if OmegaConf.select(cfg, key, default=_MISSING, throw_on_missing=False) is not _MISSING:
        return True
    parent, _, last = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    return isinstance(node, DictConfig) and last in node.keys()  # `in node` is False for a `???` value


def _free(cfg: DictConfig, key: str) -> bool:
    """Whether ``+key`` may add ``key``: a keyword argument of a model, or of a user's data set or sampler."""
    from csg.components import has_target

    if key.startswith(FREE_KEYS):
        return True
    return any(key.startswith(prefix) and has_target(OmegaConf.select(cfg, node, default=None))
               for prefix, node in FREE_UNDER_TARGET.items())


def _unresolved(cfg: DictConfig) -> str | None:
    """The first value (outside ``hydra``, which Hydra resolves itself) whose interpolation cannot be resolved: an
    unset environment variable, an unknown resolver, a value that refers to itself; one line naming its key."""
    for key in cfg:
        if key == "hydra":
            continue
        try:
            OmegaConf.to_container(cfg[key] if OmegaConf.is_config(cfg[key]) else OmegaConf.create({key: cfg[key]}),
                                   resolve=True)
        except Exception as error:  # noqa: BLE001 - omegaconf's resolution errors, in one line
            from csg.checks.config import raw_value

            where = getattr(error, "full_key", None) or key
            where = where if str(where).startswith(str(key)) else f"{key}.{where}"
            return (f"{where}={raw_value(cfg, str(where))!r} is not allowed: a value csg can resolve before training "
                    f"({first_line(error)}){_lacking(cfg, first_line(error))}")
    return None


def _lacking(cfg: DictConfig, error: str) -> str:
    """For an interpolation to a key the chosen option of a group lacks (``${data.recipe.lr0}`` with a user's data
    file without ``recipe``): which option lacks which key; else ''."""
    import re

    match = re.search(r"Interpolation key '([\w.]+)' not found", error)
    if match is None:
        return ""
    parts = match.group(1).split(".")
    for depth in range(1, len(parts)):
        if OmegaConf.select(cfg, ".".join(parts[:depth + 1]), default=_MISSING,
                            throw_on_resolution_failure=False) is _MISSING:
            choices = OmegaConf.select(cfg, "hydra.runtime.choices", default=None) or {}
            chosen = choices.get(parts[0])
            option = f"{parts[0]}={chosen}" if chosen is not None else ".".join(parts[:depth])
            return (f"; {option} has no {'.'.join(parts[:depth + 1])}, which csg's {parts[0]} options have (copy it "
                    "from one of them into your file)")
    return ""


def _check_config(cfg: DictConfig, study_checks: StudyChecks) -> str | None:
    """The config's values: :func:`csg.checks.config.validate`, or for a study (``synthetic=``) the check
    ``study_checks`` names for it; a study no check is given for is not checked here (it checks itself before
    any work)."""
    unresolved = _unresolved(cfg)
    if unresolved is not None:
        return unresolved
    try:
        study = next((key for key in (*STUDY_KEYS, *(study_checks or {})) if cfg.get(key)), None)
        if study is None:
            from csg.checks.config import validate
            from csg.engine.loggers import check_wandb_online

            validate(cfg)
            if cfg.logger.name == "wandb":
                check_wandb_online(cfg.logger)
        elif study in (study_checks or {}):
            study_checks[study](cfg)
    except CsgError as error:
        return str(error)
    return None


def _check_run_dir(cfg: DictConfig, multirun: bool) -> str | None:
    """A run (or sweep) directory that cannot be made or written: one line now, not Hydra's traceback later."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        path = Path(str(OmegaConf.select(cfg, key)))
    except Exception:  # noqa: BLE001 - a run.dir Hydra resolves at run time only: Hydra checks it
        return None
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{key}='{path}' is not allowed: a directory; {existing} is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{key}='{path}' is not allowed: a directory this user can write; {existing} is not writable"
    if path.resolve() in (Path.cwd().resolve(), Path(path.resolve().anchor), Path.home().resolve()):
        return (f"{key}='{OmegaConf.select(cfg, key)}' is not allowed: a folder of the run's own (e.g. runs/<name>); "
                f"{path.resolve()} is the folder the command runs in, the file system's root or the home folder")
    hydra = cfg.get("hydra")   # the raw value: csg's own resolver gives null on ranks other than 0, by design
    if hydra is not None and "output_subdir" in hydra and OmegaConf.to_container(hydra)["output_subdir"] is None:
        return ("hydra.output_subdir=null is not allowed: csg's record of the run (.hydra/config.yaml) is what loads "
                "it later as a posterior, resumes it and evaluates it")
    if not multirun:
        from csg.engine.rundir import foreign_entries, remember_absent

        remember_absent(path)  # a run refused once it has started removes the folders Hydra makes for it
        foreign = foreign_entries(path)
        if foreign:
            shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
            return (f"{key}='{path}' is not allowed: a new or empty folder, or one of csg's run folders; it holds "
                    f"{shown}, which csg did not write (nothing of it is touched); use another {key}")
    return None


def check_command(argv: list[str], config_dir: Path, config_name: str = "config", *,
                  study_checks: StudyChecks = None) -> str | None:
    """The one-line message of the first job of ``argv`` that would be refused, else None.

    ``study_checks``: a study's config key -> its checks of a composed config
    (:func:`csg.launch.studies.study_checks`: ``synthetic`` -> :func:`studies.synthetic.validate`), given by the
    entry point that may run a study (``train.py``): csg.checks sits below studies and imports none of them.
    Without it a study's values are not checked here (the study checks them itself, before any work)."""
    from hydra.errors import HydraException

    from csg.engine.rundir import forget_absent

    forget_absent()
    first, argv = split_config_dir(argv)
    if first is not None and not first.is_dir():
        return (f"--config-dir={first} is not allowed: a folder of your YAML files, one subfolder per config group "
                f"(model/, data/, sampler/); {'it is a file' if first.exists() else 'it does not exist'}")
    try:
        args, overrides = parse_command_line(argv)
    except HydraException:  # an override Hydra's grammar cannot read: one line, not Hydra's several
        return override_grammar_error([word for word in argv if not word.startswith("-")])
    except SystemExit:
        return None  # a malformed command line (a flag without its value): argparse reports it
    message = check_user_yaml(first, overrides)  # before Hydra reads any of them, for --cfg too
    if message is not None or any(arg.split("=")[0] in _HYDRA_ONLY_FLAGS for arg in argv):
        return message  # Hydra's own flags print, and run nothing
    if args.config_name not in (None, config_name) or args.config_path is not None or args.experimental_rerun:
        return None  # another primary config: Hydra composes it
    config_dirs = (first, config_dir) if first is not None else (config_dir,)
    try:
        jobs = _jobs(args, overrides)
    except Exception:  # noqa: BLE001 - a sweep only another sweeper understands: that sweeper checks it
        return None
    groups, composed = set(all_group_choices(config_dir, overrides, first)), {}
    for number, job in enumerate(jobs):
        message = _check_job(config_dirs, config_name, job, groups, bool(args.multirun), composed, study_checks)
        if message is not None:
            where = f" (job {number} of the sweep: {' '.join(job)})" if len(jobs) > 1 else ""
            return message + where
    configs = [_compose(config_dirs, config_name, job, composed) for job in jobs]
    if args.multirun:
        message = _check_launcher(configs[0])
        if message is not None:
            return message
    if len(jobs) > 1 and _runs_here(configs[0]):
        data_cache, checked = {}, set()
        for number, (job, cfg) in enumerate(zip(jobs, configs)):
            message = _check_job_data(cfg, data_cache, checked)
            if message is not None:
                return f"{message} (job {number} of the sweep: {' '.join(job)})"
    return None


# the `_target_` of Hydra's own hydra/launcher=basic config: a value Hydra writes into the composed config, compared,
# never imported (Hydra 1.3 gives the basic launcher no public name)
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def _check_launcher(cfg: DictConfig) -> str | None:
    """A SLURM launcher on a machine without SLURM: one line now, not submitit's traceback once Hydra has started."""
    target = str(OmegaConf.select(cfg, "hydra.launcher._target_", default="") or "")
    if not target.endswith("SlurmLauncher"):
        return None
    choice = OmegaConf.select(cfg, "hydra.runtime.choices", default={}).get("hydra/launcher", "slurm")
    return no_slurm(choice) or no_controller(choice)


def _runs_here(cfg: DictConfig) -> bool:
    """Whether the sweep's jobs run in this process, one after another (Hydra's basic launcher): then a job that
    trains before the next is checked is what the data-dependent checks of every job prevent. Other launchers
    run jobs elsewhere (a SLURM node, which may see other data and memory), where each job checks itself."""
    return str(OmegaConf.select(cfg, "hydra.launcher._target_", default="")) == BASIC_LAUNCHER


def _check_job_data(cfg: DictConfig, data_cache: dict, checked: set) -> str | None:
    """The checks a job makes once its data are built (:func:`csg.engine.job_checks.check_job`): its data, its model
    against them, memory, the schedule and collection plan, the step's values; and, without a launcher, that its chains
    need none (interacting chains). Each data set is built once for the whole sweep (``data_cache``); jobs that
    differ only in their seed are checked once (``checked``). An error other than a one-line refusal is left to
    the job itself."""
    import json

    from csg.engine import distributed
    from csg.engine.build import build_likelihood, interaction_kind
    from csg.engine.job_checks import check_job, data_facts
    from csg.engine.settings import run_settings
    from csg.engine.devices import resolve_device
    from csg.errors import CsgError
    from csg.engine.distributed import check_interacting_layout

    if cfg.get("synthetic"):
        return None
    try:
        plain = OmegaConf.to_container(cfg, resolve=False)
        plain.pop("hydra", None)
        plain.pop("seed", None)
        key = json.dumps(plain, sort_keys=True, default=str)
        if key in checked:
            return None
        device = resolve_device(str(cfg.trainer.device))
        # under torchrun or SLURM tasks each process group trains one chain; else this process trains them all
        launched = int(os.environ.get("WORLD_SIZE", "1")) > 1 or distributed.launched_by_slurm_tasks()
        settings = run_settings(cfg)
        chains = settings.sampler.chains
        if not launched:  # chains that step together need a launcher: the run's own refusal, for every job
            check_interacting_layout(interaction_kind(settings.sampler), chains, distributed.Layout(chains=chains))
        likelihood = build_likelihood(settings.likelihood)  # once, for the data's task and every check of the job
        check_job(settings, data_facts(settings, data_cache, likelihood=likelihood), device, 1 if launched else chains,
                  likelihood)
        checked.add(key)
    except CsgError as error:
        return str(error)
    except Exception:  # noqa: BLE001 - not a refusal: the job reports it itself, as before this check
        return None
    return None


def check_train_command(argv: list[str], config_dir: Path, *, study_checks: StudyChecks = None) -> str | None:
    """Every check of a command before Hydra starts: its group choices (:func:`csg.checks.groups.check_group_choices`),
    then every job (:func:`check_command`); the first problem's one-line message, else None."""
    return check_group_choices(argv, config_dir) or check_command(argv, config_dir, study_checks=study_checks)
