"""csg-tune: pick a sampler's settings on held-out training data, without a reference, and write them as overrides.

    csg-tune [OVERRIDES ...] --grid KEY=V1,V2[,...] [--grid ...] [--seeds 0,1] [--holdout 0.1]
             [--runs csg-tune-runs] [--out tuned.yaml]
    csg-tune experiment=posterior_benchmark --grid sampler.lr0=0.1,0.2,0.4 --grid sampler.explore=0.8,0.5

OVERRIDES are train.py's (the run you want tuned); each --grid KEY=V1,V2 adds a key's values, and every combination
is a grid point. Each point runs at every seed of --seeds (`csg.train`, in this process) on the training split less
the share --holdout held out (`data.holdout`: one permutation for every point and seed), and is scored by its
ensemble's NLL on the held-out examples. The pick is csg.evaluation.tuning's rule: the best held-out NLL, then,
among the points within one standard error of it, those whose end-of-run sampling check passed and the most
effective members (the members' spread). No reference and no test example is read.

Writes --out (a YAML: the picked overrides, the command line that trains with them on the whole training split,
the rule's reason and every point's scores) and prints the same. The runs go under --runs, one folder per point
and seed; a folder with a finished run is read, not run again (run the command again to finish a tuning).
Every point's command is checked before any run starts: bad input is a one-line `error:` (exit status 2) and
changes no file.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import sys
from pathlib import Path

from csg.errors import ConfigError
from csg.launch.cli import run_or_exit

__all__ = ["console", "main", "parse"]

RESERVED = ("seed", "data.holdout", "hydra.run.dir")  # csg-tune sets them per run
OPTIONS = ("--grid", "--seeds", "--holdout", "--runs", "--out")


def _grid_item(value: str, grid: dict) -> None:
    key, equals, values = value.partition("=")
    key = key.strip()
    items = [v.strip() for v in values.split(",")] if equals else []
    if not key or not items or "" in items:
        raise ConfigError("--grid", value, "KEY=V1,V2,... (a config key and its comma-separated values, e.g. "
                          "sampler.lr0=0.1,0.2,0.4)")
    if key.lstrip("+~") in RESERVED or key.startswith("hydra."):
        raise ConfigError("--grid", value, f"a key other than {', '.join(RESERVED)} and hydra.* (csg-tune sets them)")
    if key in grid:
        raise ConfigError("--grid", value, f"each key once ({key} is given twice)")
    grid[key] = items


def parse(argv: list[str]) -> dict:
    """The command line as ``overrides``, ``grid`` (key -> values), ``seeds``, ``holdout``, ``runs``, ``out``; a
    :class:`~csg.errors.ConfigError` naming the argument for a bad one."""
    options = {"overrides": [], "grid": {}, "seeds": [0, 1], "holdout": 0.1, "runs": Path("csg-tune-runs"),
               "out": Path("tuned.yaml")}
    words = iter(argv)
    for word in words:
        name, equals, value = word.partition("=")
        if name not in OPTIONS:
            if word.startswith("-"):
                raise ConfigError(word, True, f"no option but --help, {', '.join(OPTIONS)}")
            if word.partition("=")[0].strip().lstrip("+~") in RESERVED:
                raise ConfigError(word.partition("=")[0], word, "left to csg-tune (it sets seed, data.holdout and "
                                  "hydra.run.dir per run: use --seeds, --holdout, --runs)")
            options["overrides"].append(word)
            continue
        value = value if equals else next(words, None)
        if value is None:
            raise ConfigError(name, None, "a value after it")
        if name == "--grid":
            _grid_item(value, options["grid"])
        elif name == "--seeds":
            try:
                seeds = [int(s) for s in value.split(",")]
            except ValueError:
                seeds = []
            if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
                raise ConfigError("--seeds", value, "distinct integers >= 0, comma-separated, e.g. 0,1,2")
            options["seeds"] = seeds
        elif name == "--holdout":
            try:
                share = float(value)
            except ValueError:
                share = math.nan
            if not 0 < share < 1:
                raise ConfigError("--holdout", value, "a number in (0, 1): the share of the training split held out")
            options["holdout"] = share
        elif name == "--out":
            if Path(value).suffix not in (".yaml", ".yml") or Path(value).is_dir():
                raise ConfigError("--out", value, "a .yaml file path")
            options["out"] = Path(value)
        else:
            options["runs"] = Path(value)
    if not options["grid"]:
        raise ConfigError("--grid", None, "at least one --grid KEY=V1,V2,... (--help)")
    return options


def points(options: dict) -> list[tuple[str, ...]]:
    """Every combination of the grid's values, as overrides."""
    keys = list(options["grid"])
    return [tuple(f"{k}={v}" for k, v in zip(keys, values))
            for values in itertools.product(*(options["grid"][k] for k in keys))]


def _run_overrides(options: dict, point: tuple[str, ...], seed: int) -> list[str]:
    slug = hashlib.sha256("\0".join([*options["overrides"], *point]).encode()).hexdigest()[:12]
    run_dir = (options["runs"] / slug / f"seed{seed}").resolve()
    return [*options["overrides"], *point, f"seed={seed}", f"data.holdout={options['holdout']}",
            "logger=none", "trainer.progress=false", f"hydra.run.dir={run_dir}"]


def _check_all(options: dict, grid: list[tuple[str, ...]]) -> None:
    """Every point's command, checked as train.py checks it, before any run starts."""
    from csg.checks import check_train_command
    from csg.paths import CONFIGS

    for point in grid:
        message = check_train_command(_run_overrides(options, point, options["seeds"][0]), CONFIGS)
        if message is not None:
            raise ConfigError("--grid", " ".join(point), f"a point train.py accepts; it refused: {message}")


def _score(overrides: list[str]) -> tuple[float, float, str]:
    """(held-out NLL, effective members, the end-of-run check's line) of one run, run here or read from its folder."""
    import json

    from csg.errors import DivergenceError
    from csg.launch.api import train

    metrics_file = Path(overrides[-1].partition("=")[2]) / "metrics.json"
    if metrics_file.is_file():
        metrics = json.loads(metrics_file.read_text())
    else:
        try:
            metrics = train(overrides).metrics
        except DivergenceError as error:  # a diverged run scores infinity, and says why
            return math.inf, math.nan, f"diverged: {str(error).splitlines()[0][:160]}"
    spread = metrics.get("spread") or {}
    return (float(metrics["ensemble"]["nll"]), float(spread.get("effective_members", math.nan)),
            str(metrics.get("sampling_check") or ""))


def tune(options: dict) -> list:
    """Run the grid (:func:`parse`'s options); its :class:`csg.evaluation.tuning.GridPoint` s."""
    from csg.evaluation.tuning import GridPoint

    grid = points(options)
    _check_all(options, grid)
    scored = []
    for point in grid:
        runs = [_score(_run_overrides(options, point, seed)) for seed in options["seeds"]]
        scored.append(GridPoint(point, tuple(r[0] for r in runs), tuple(r[1] for r in runs),
                                tuple(r[2] for r in runs)))
    return scored


def write(options: dict, chosen, scored, argv: list[str]) -> str:
    """Write --out atomically; return what it says."""
    import shlex

    import yaml

    from csg.io.atomic import atomic_write_text

    command = shlex.join(["csg-train", *options["overrides"], *chosen.point.overrides])
    record = {"overrides": list(chosen.point.overrides), "command": command, "rule": chosen.reason,
              "tuned_with": {"argv": list(argv), "seeds": options["seeds"], "holdout": options["holdout"]},
              "points": [{"overrides": list(p.overrides), "heldout_nll": _finite(p.mean_nll),
                          "stderr": _finite(p.stderr_nll), "effective_members": _finite(p.mean_effective_members),
                          "check_passed": p.samples} for p in scored]}
    text = yaml.safe_dump(record, sort_keys=False, width=120)
    options["out"].parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(options["out"], f"# csg-tune's pick (csg.evaluation.tuning): train with `command`\n{text}")
    return text


def _finite(value: float):
    return round(value, 6) if math.isfinite(value) else None


def main(argv: list[str]) -> None:
    if argv and argv[0] in {"-h", "--help"}:
        print(__doc__)
        raise SystemExit(0)

    def run() -> str:
        from csg.evaluation.tuning import pick

        options = parse(argv)
        scored = tune(options)
        try:
            chosen = pick(scored)
        except ValueError as error:  # every point diverged
            raise ConfigError("--grid", " ".join(f"{k}={','.join(v)}" for k, v in options["grid"].items()),
                              str(error)) from None
        write(options, chosen, scored, argv)
        return f"picked: {' '.join(chosen.point.overrides)} ({chosen.reason})\ntrain: " \
               f"csg-train {' '.join([*options['overrides'], *chosen.point.overrides])}\nwritten: {options['out']}"

    print(run_or_exit(run))


def console() -> None:
    """The ``csg-tune`` command of the installed package."""
    main(sys.argv[1:])
