"""The one driver of the paper targets: every make target is one call of it, and bad flags stop it in one line."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from csg.errors import ConfigError
from studies.experiments import fig4, sweeps, table5
from studies.experiments.job import Job
from studies.experiments.registry import TARGETS

ROOT = Path(__file__).resolve().parents[2]


def _make_targets() -> tuple[list[str], list[str]]:
    text = (ROOT / "Makefile").read_text()
    paper = re.search(r"^PAPER_TARGETS := (.*)$", text, flags=re.M).group(1).split()
    reports = re.search(r"^REPORT_TARGETS := (.*)$", text, flags=re.M).group(1).split()
    return paper, reports


def test_the_makefile_and_the_registry_name_the_same_targets():
    paper, reports = _make_targets()
    assert set(paper) | {"reference", "reference-multimodal", "reference-network", "reference-cifar10"} == set(TARGETS)
    assert {name.removesuffix("-report") for name in reports} <= set(TARGETS)
    takes_report = {name for name, target in TARGETS.items() if "report_only" in target.flags}
    assert {name.removesuffix("-report") for name in reports} == takes_report


def _dry_run(*argv: str) -> list[str]:
    """``make -n`` as a user types it (not the nested make of ``make test``, which would say where it is)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    command = ["make", "-n", "--no-print-directory", "-o", ".venv/.installed-stamp", "-o", ".venv/.reference-stamp"]
    return subprocess.run([*command, *argv], cwd=ROOT, capture_output=True, text=True, check=True,
                          env=env).stdout.strip().splitlines()


def test_make_n_of_every_paper_target_is_one_call_of_the_driver():
    paper, reports = _make_targets()
    for name in [*paper, *reports, "reference", "reference-multimodal", "fig2"]:
        dry = _dry_run(name, "SCALE=")
        target = {"fig2": "table4"}.get(name, name.removesuffix("-report"))
        assert len(dry) == 1 and re.search(rf"scripts/reproduce\.py .*\b{target}\b", dry[0]), (name, dry)
        assert ("--report-only" in dry[0]) == name.endswith("-report")
    assert _dry_run("table1", "SCALE=smoke", "SEEDS=0") == [
        ".venv/bin/python scripts/reproduce.py --scale smoke --seeds 0 table1"]


@pytest.mark.parametrize("target, flags, key", [
    ("reference", {"scale": "smoke"}, "--scale"),
    ("table4", {"seeds": "1"}, "--seeds"),
    ("table5", {"preset": "table1"}, "--preset"),
    ("accuracy", {"launcher": "slurm"}, "--launcher"),
])
def test_a_flag_the_target_does_not_take_is_refused(target, flags, key):
    with pytest.raises(ConfigError) as error:
        TARGETS[target].check(Job(target=target, out=Path("unused"), **flags))
    assert error.value.key == key
    TARGETS["table1"].check(Job(target="table1", out=Path("unused"), **flags))  # the sweeps take them all


def test_the_driver_refuses_in_one_line_before_running(tmp_path):
    process = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce.py"), "reference", "--scale", "smoke",
                              "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert process.returncode == 2 and "Traceback" not in process.stderr
    assert len(process.stderr.strip().splitlines()) == 1 and process.stderr.startswith("error: ")
    # the targets' own keys, refused by the target before it runs anything (the CLI prints them as above)
    for target, override, key in (("accuracy", "warmup=10", "warmup"), ("reference", "warmup=ten", "warmup"),
                                  ("icsgld-bandit", "extend=maybe", "extend")):
        job = Job(target=target, out=tmp_path, out_given=True, overrides=(override,))
        TARGETS[target].check(job)
        with pytest.raises(ConfigError) as refused:
            TARGETS[target].make(job)
        assert refused.value.key == key and "\n" not in str(refused.value)
    assert not any(tmp_path.iterdir())


def test_table5_and_figure4_sweeps_are_the_runs_the_makefile_made():
    runs = sweeps.expected_runs(sweeps.expand(table5.SWEEPS, "full", 0))
    assert len(runs) == 6 * 3 * len(table5.SEEDS) and {run["data"] for run in runs} == set(table5.DATASETS)
    assert {run["experiment"].removeprefix("table5_") for run in runs} == set(table5.METHODS)
    for scale in ("full", "smoke"):
        runs = sweeps.expected_runs(sweeps.expand(fig4.SWEEPS, scale, 0))
        assert [run["sampler"] for run in runs] == list(fig4.METHODS) and {run["seed"] for run in runs} == {"0"}


def test_a_report_of_a_folder_without_the_targets_files_names_what_is_missing(tmp_path, monkeypatch):
    """issue 74: --report-only on an empty folder advised running the same command again."""
    from studies.reproduce import main
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)  # the committed reference is read from the repository's results/
    with pytest.raises(ConfigError) as refused:
        main(argv=["posterior-benchmark", "--scale", "smoke", "--report-only", "--out", str(tmp_path / "empty")])
    assert refused.value.key == "--report-only" and "posterior_benchmark_tuning.csv" in str(refused.value)
    assert "run the target without --report-only first" in str(refused.value)
    assert "same command again" not in str(refused.value) and not (tmp_path / "empty").exists()
