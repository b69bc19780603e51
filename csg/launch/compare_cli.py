"""csg-compare: compare finished runs, one table grouped by method and the verdicts of csg's shared statistics
(in a clone, the same as python scripts/compare_runs.py).

    csg-compare RUN_OR_FOLDER [RUN_OR_FOLDER ...] [--baseline METHOD] [--margin METRIC=VALUE ...]
                [--different-settings] [--out FILE.csv]
    csg-compare runs
    csg-compare multirun/2026-11-22/10-00-00 --baseline csghmc --margin nll=0.01

Each argument is a run directory of train.py or a folder holding them at any depth (a Hydra sweep, runs/). Their
metrics.json files are read as data (no config is built, nothing imported). The table has one row per run (method,
seed, test error %, NLL, ECE, Brier, mean mutual information in nats, members, wall time) and, per method, the mean
and standard error over its seeds. Where two methods of one data set and model share seeds, every method is
compared with the baseline (--baseline; default: the first method found) on error, NLL, ECE and Brier
(regression runs: RMSE and NLL, with test LL and 95 % coverage shown), paired by
seed, Holm-corrected across the table (csg.evaluation.comparison.compare_paired): helps / hurts where the
corrected interval excludes 0, equivalent only inside a margin you state (--margin nll=0.01), else inconclusive.
Only runs of one setting are paired (data, model, part sampled, evaluation and budget alike); runs of one data set
and model in different settings are refused in one line, or with --different-settings compared each setting apart.

Prints the table and the verdicts, and writes the table to --out (default comparison.csv in the current folder;
its per-method "mean" and "s.e." rows follow each method's runs) and the verdicts beside it
(comparison_verdicts.csv). A run below a folder that has not finished is listed as skipped; bad input is a
one-line `error:` (exit status 2) and writes nothing.
"""

from __future__ import annotations

import sys

from csg.errors import ConfigError
from csg.launch.cli import run_or_exit

OPTIONS = ("--baseline", "--margin", "--out")


def parse(argv: list[str]) -> tuple[list[str], dict]:
    """(the runs and folders, compare()'s keywords and ``out``) of the command line; a ConfigError for a bad one."""
    paths, options = [], {"baseline": None, "margins": {}, "out": "comparison.csv", "different_settings": False}
    words = iter(argv)
    for word in words:
        name, equals, value = word.partition("=")
        if word == "--different-settings":
            options["different_settings"] = True
            continue
        if name not in OPTIONS:
            if word.startswith("-"):
                raise ConfigError(word, True, f"no option but --help, --different-settings, {', '.join(OPTIONS)}")
            paths.append(word)
            continue
        value = value if equals else next(words, None)
        if value is None:
            raise ConfigError(name, None, "a value after it")
        if name == "--margin":
            metric, sep, number = value.partition("=")
            try:
                options["margins"][metric] = float(number) if sep else float("nan")
            except ValueError:
                raise ConfigError("--margin", value, "METRIC=NUMBER, e.g. nll=0.01") from None
            if not sep:
                raise ConfigError("--margin", value, "METRIC=NUMBER, e.g. nll=0.01")
        else:
            options[name[2:]] = value
    if not paths:
        raise ConfigError("runs", None, "run directories of train.py or folders holding them: csg-compare "
                          "RUN_OR_FOLDER [...] (--help)")
    return paths, options


def main(argv: list[str]) -> None:
    if argv and argv[0] in {"-h", "--help"}:
        print(__doc__)
        raise SystemExit(0)

    def run() -> str:
        from csg.posterior.compare import compare

        paths, options = parse(argv)
        comparison = compare(paths, baseline=options["baseline"], margins=options["margins"],
                             different_settings=options["different_settings"])
        written = comparison.write(options["out"])
        return f"{comparison.format()}\nwritten: {', '.join(map(str, written))}"

    print(run_or_exit(run))


def console() -> None:
    """The ``csg-compare`` command of the installed package."""
    main(sys.argv[1:])
