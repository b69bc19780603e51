"""One call of the driver (``scripts/reproduce.py <target>``): the target and its flags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Job:
    """One call of the driver: the target and its flags (``None``: the target's default)."""

    target: str
    out: Path                       # where the tables and figures go
    out_given: bool = False         # --out typed by the user (else results/<paper>[/smoke])
    scale: str = "full"
    launcher: str = "local"
    seeds: str | None = None
    report_only: bool = False
    runs: Path | None = None
    preset: str | None = None
    overrides: tuple[str, ...] = ()
    stamp: str = ""                 # <date>_<time>: the folder of this call's runs
    add: tuple[str, ...] = ()       # --add: each a user's method (space-separated train.py overrides)
    tune_factors: str | None = None  # --tune-factors: a tuning stage's grid, x each method's recipe step
    tune_seeds: str | None = None    # --tune-seeds: a tuning stage's seeds


# every flag a target may take, with its default: Target.flags names those a target takes
FLAGS = {"launcher": "local", "seeds": None, "report_only": False, "runs": None, "preset": None, "add": (),
         "tune_factors": None, "tune_seeds": None}


def checked_seeds(flag: str, text: str) -> list[int]:
    """The seeds of a flag's ``0,1,2``: whole numbers >= 0, each once; else a one-line ConfigError naming ``flag``."""
    from csg.errors import ConfigError

    words = text.split(",")
    if not all(word.strip().isdigit() for word in words):
        raise ConfigError(flag, text, "comma-separated whole numbers >= 0 (e.g. 0,1,2)")
    if len({int(word) for word in words}) < len(words):
        raise ConfigError(flag, text, "each seed once (e.g. 0,1,2)")
    return [int(word) for word in words]
