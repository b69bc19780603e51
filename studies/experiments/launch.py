"""How a paper target starts its runs: ``train.py`` as Hydra multiruns, under ``torchrun`` or on SLURM.

The driver (``scripts/reproduce.py``) runs every ``train.py`` job as a child process, exactly as a
user would type it, so that a run made by a paper target and one typed by hand are the same run
(same run directory, config record, log and ``metrics.json``). Every command is printed before it
starts; a failed one ends the target with a one-line error that says where the finished runs are.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from csg.errors import CsgError, first_line
from studies.experiments.sweeps import expected_runs

from csg.paths import CONFIGS, TRAIN_PY  # noqa: E402

# how a run starts, after the interpreter: train.py in a clone (the command its docs show), else (an installed
# csg, the driver started as csg-reproduce) `python -m csg`, the same command
TRAIN = [str(TRAIN_PY)] if TRAIN_PY.is_file() else ["-m", "csg"]


class LaunchFailed(CsgError):
    """A ``train.py`` child process failed; its own error is already on the console."""


def without_launcher(overrides: list[str]) -> list[str]:
    """``overrides`` less the launcher's settings (``hydra.launcher.*``: they exist only under ``hydra/launcher=slurm``,
    which the sweeps add; train.py checks them when it starts each sweep, before any job is submitted)."""
    return [override for override in overrides if not override.lstrip("+~").startswith("hydra.launcher.")]


def preset_epochs(preset: str | None, overrides: list[str]) -> int:
    """trainer.epochs of the composed preset (with the user's overrides), for sweeps of half the budget.

    An unknown preset, an override Hydra cannot apply, or epochs that are no positive integer is a one-line
    :class:`~csg.errors.ConfigError`, before anything runs or is written."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    import csg  # noqa: F401  (registers the config resolvers)
    from csg.errors import ConfigError

    presets = sorted(path.stem for path in (CONFIGS / "experiment").glob("*.yaml"))
    if preset is not None and preset not in presets:
        raise ConfigError("--preset", preset, f"one of {', '.join(presets)}")
    try:
        with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
            base = [f"experiment={preset}"] if preset else []
            cfg = compose("config", overrides=[*base, *without_launcher(overrides)])
        epochs = cfg.trainer.epochs
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError("overrides", " ".join(overrides), f"overrides train.py takes ({first_line(error)})") from None
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs <= 0:
        raise ConfigError("trainer.epochs", epochs, "a positive integer")
    return epochs


def added_method(text: str, preset: str | None, protocol: list[str], overrides: list[str], runs: Path,
                 fixed: set[str]) -> tuple[list[str], str]:
    """One ``--add``: its overrides (``text`` split on spaces) and the method's name (its ``sampler.name``).

    The added method's sweep (``protocol``, the added overrides, the user's ``overrides``) is checked as train.py
    checks a multirun (every job composed and validated, :func:`csg.checks.check_train_command`), so that a key or a
    value train.py would refuse is a one-line :class:`~csg.errors.ConfigError` (``--add``) before anything runs.
    Refused too: no override, a sweep (one ``--add`` is one method), ``experiment=`` (that is ``--preset``), a
    ``hydra`` key, a key in ``fixed`` (the protocol's: the same for every method of the table), or a key of the
    user's ``overrides`` (they go to every method, and would win)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from csg.errors import ConfigError
    import csg

    added = text.split()
    if not added:
        raise ConfigError("--add", text, "a space-separated list of train.py overrides, one method (e.g. "
                          "--add \"sampler=csgld sampler.name=my_csgld sampler.temperature=0.5\")")
    try:
        parsed = OverridesParser.create().parse_overrides(added)
    except Exception as error:  # noqa: BLE001 - Hydra's grammar error, in one line
        raise ConfigError("--add", text, f"overrides train.py takes ({first_line(error)})") from None
    everyone = {override.split("=", 1)[0].lstrip("+~") for override in overrides}
    for override_text, override in zip(added, parsed):
        key = override.key_or_group
        if override.is_sweep_override():
            raise ConfigError("--add", text, f"one method, not a sweep ({override_text}): give each method its own "
                              "--add and its own sampler.name")
        why = ("the preset is --preset's" if key == "experiment" else
               "hydra settings go to every run, as KEY=VALUE" if key.startswith("hydra") else
               "the table's protocol sets it, the same for every method" if key in fixed else
               "a KEY=VALUE override sets it for every method" if key in everyone else None)
        if why is not None:
            raise ConfigError("--add", text, f"overrides of the method, not of {key} ({why})")
    base = [f"experiment={preset}"] if preset else []
    argv = ["-m", *base, *protocol, *added, *without_launcher(overrides), f"hydra.sweep.dir={runs}"]
    message = csg.check_command(argv)  # as train.py
    if message is not None:
        raise ConfigError("--add", text, f"overrides train.py takes ({message})")
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        name = compose("config", overrides=[*base, *added, *without_launcher(overrides)]).sampler.name
    return added, str(name)


def _call(command: list[str], what: str, runs: Path | None) -> None:
    print("+ " + " ".join(str(part) for part in command[1:]), flush=True)
    if subprocess.run(command).returncode != 0:  # in the driver's working folder (the repository, or the user's)
        where = f"; the runs that finished stay in {runs}, and --report-only --runs {runs} aggregates them" if runs else ""
        raise LaunchFailed(f"{what} failed (its error is above){where}")


def run_sweeps(preset: str | None, sweeps: list[list[str]], runs: Path, launcher: str, overrides: list[str],
               processes: dict[int, int] | None = None, folders: list[str] | None = None,
               gpus_per_run: int | None = None) -> None:
    """Each sweep as one Hydra multirun into ``runs/sweep<i>`` (or ``runs/<folders[i]>``); a sweep of interacting
    chains (``processes``: sweep -> P) runs each of its points under ``torchrun --nproc_per_node=P`` locally, or as
    SLURM jobs of P tasks; any other sweep's SLURM jobs take ``gpus_per_run`` GPUs and as many tasks (None: the
    launcher's own setting)."""
    processes, given = processes or {}, overrides
    base = [f"experiment={preset}"] if preset else []
    for index, sweep in enumerate(sweeps):
        if not sweep:
            continue
        folder = folders[index] if folders else f"sweep{index}"
        tasks = processes.get(index, 1)
        overrides = not_set_by(sweep, given)
        if tasks > 1 and launcher == "local":
            for number, point in enumerate(expected_runs([sweep])):
                pairs = [f"{key}={value}" for key, value in point.items()]
                name = "_".join(value for key, value in point.items() if key in ("sampler", "model", "seed"))
                command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={tasks}",
                           *TRAIN, *base, *pairs, *overrides,
                           f"hydra.run.dir={runs / folder / f'{number}_{name}'}"]
                _call(command, f"the run `{' '.join(pairs)}`", runs)
            continue
        command = [sys.executable, *TRAIN, "-m", *base, *sweep, *overrides, f"hydra.sweep.dir={runs / folder}"]
        if launcher == "slurm":
            command.append("hydra/launcher=slurm")
            gpus = tasks if tasks > 1 else gpus_per_run
            if gpus is not None:
                command += [f"hydra.launcher.tasks_per_node={gpus}", f"hydra.launcher.gpus_per_node={gpus}"]
        _call(command, f"the multirun `{' '.join(sweep)}`", runs)


def not_set_by(sweep: list[str], overrides: list[str]) -> list[str]:
    """The user's overrides but ``trainer.epochs`` where the sweep sets it: a sweep's own epochs (a half or a quarter
    of the budget, for chains that share it) were derived from the budget those overrides chose."""
    own = {override.split("=", 1)[0] for override in sweep}
    return [o for o in overrides if not (o.split("=", 1)[0] == "trainer.epochs" and "trainer.epochs" in own)]


def run_study(study: str, out: Path, run_dir: Path, overrides: list[str]) -> None:
    """One study on analytic targets (``train.py synthetic=<study>``, configs/synthetic/) writing into ``out``."""
    command = [sys.executable, *TRAIN, f"synthetic={study}", f"synthetic.output_dir={out}", *overrides,
               f"hydra.run.dir={run_dir}"]
    _call(command, f"the study `synthetic={study}`", None)


def newest_runs(folder: str) -> Path:
    """The newest ``multirun/<folder>/<date>`` (what ``--report-only`` aggregates without ``--runs``)."""
    from csg.errors import ConfigError

    candidates = sorted((Path("multirun") / folder).glob("*"))  # the driver works from the repository
    if not candidates:
        raise ConfigError("--runs", "(none given)", f"a folder of runs: none under multirun/{folder}/, run the "
                          "target first")
    return candidates[-1]
