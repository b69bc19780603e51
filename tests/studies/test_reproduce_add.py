"""A user's method beside the paper's under a paper protocol: ``scripts/reproduce.py table1 --add "OVERRIDES"``."""

from __future__ import annotations

import json
import math
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from csg.errors import ConfigError
from studies.experiments import added, registry, table_report, tables
from studies.experiments.job import Job
from studies.experiments.registry import TARGETS

ROOT = Path(__file__).resolve().parents[2]
REPRODUCE = ROOT / "scripts" / "reproduce.py"
# each run a few seconds on the CPU: 2 epochs, 2 cycles of 1 sample (every method, the added ones too)
BUDGET = ["trainer.epochs=2", "sampler.cycles=2", "sampler.samples_per_cycle=1", "logger=none", "trainer.progress=false"]
ADDED = "sampler=csgld sampler.name=my_csgld sampler.temperature=0.5"


def _driver(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "HYDRA_"))}
    env["OMP_NUM_THREADS"] = "1"  # tiny MLPs: one thread each, no spinning on 2 shared cores
    return subprocess.run([sys.executable, str(REPRODUCE), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _committed() -> dict[str, int]:
    return {str(path): path.stat().st_mtime_ns for path in (ROOT / "results").rglob("*") if path.is_file()}


# The end-to-end run of an added method (the paper's 8 and a user's sampler through the driver, the table's row,
# --report-only's missing runs) is tests/launch/test_own_project.py's: the README's command, run as written.


def test_a_bad_add_is_one_line_before_anything_runs(tmp_path):
    committed = _committed()
    process = _driver("table1", "--scale", "smoke", "--seeds", "0", "--out", str(tmp_path / "out"), "--runs",
                      str(tmp_path / "runs"), *BUDGET, "--add", ADDED, "--add", "sampler=csgld sampler.nme=x",
                      cwd=tmp_path, timeout=300)
    assert process.returncode == 2 and "Traceback" not in process.stderr and process.stdout == ""
    assert process.stderr.startswith("error: --add='sampler=csgld sampler.nme=x' is not allowed: ")
    assert len(process.stderr.strip().splitlines()) == 1 and "sampler.nme is not a key" in process.stderr
    assert not any(tmp_path.iterdir()) and _committed() == committed  # no runs folder, no table


@pytest.mark.parametrize("add, refused", [
    ("sampler=csgld", "sampler.name=csgld is table1's cSGLD already"),
    ("sampler=sgld sampler.name=cSGLD", "sampler.name=cSGLD is table1's cSGLD already"),
    ("sampler=csgld sampler.name=a,b", "one method, not a sweep"),
    ("sampler=csgld sampler.name=mine seed=5", "not of seed (the table's protocol sets it"),
    ("sampler=csgld sampler.name=mine trainer.epochs=9", "not of trainer.epochs"),
    ("sampler=csgld sampler.name=mine logger=csv", "not of logger (a KEY=VALUE override sets it for every method)"),
    ("sampler=csgld sampler.name=mine experiment=table3", "not of experiment"),
    ("sampler=nope sampler.name=mine", "sampler=nope is not allowed: one of"),
    ("sampler=csgld sampler.temperature=-1 sampler.name=mine", "sampler.temperature=-1 is not allowed"),
    ("sampler=csgld sampler.name=a/b", "a row and a folder name"),
    ("  ", "a space-separated list of train.py overrides"),
])
def test_what_an_add_may_not_be(tmp_path, add, refused):
    job = Job(target="table1", out=tmp_path / "out", scale="smoke", seeds="0", runs=tmp_path / "runs",
              overrides=("logger=none",), add=(add,))
    TARGETS["table1"].check(job)
    with pytest.raises(ConfigError) as error:
        TARGETS["table1"].make(job)
    assert error.value.key == "--add" and refused in str(error.value) and "\n" not in str(error.value)
    assert not any(tmp_path.iterdir())


def test_two_adds_of_one_name_and_the_targets_that_take_no_add(tmp_path):
    job = Job(target="table1", out=tmp_path, scale="smoke", runs=tmp_path / "runs", add=(ADDED, ADDED))
    with pytest.raises(ConfigError, match="sampler.name=my_csgld is another --add's name already"):
        TARGETS["table1"].make(job)
    for target in ("table2", "fig3", "fig4", "icsgld-table1", "table5", "table4"):
        with pytest.raises(ConfigError) as error:
            TARGETS[target].check(Job(target=target, out=tmp_path, add=(ADDED,)))
        assert error.value.key == "--add" and "the targets that take it: table1, table3" in str(error.value)
    with pytest.raises(ConfigError, match="--report-only runs nothing"):
        TARGETS["table1"].check(Job(target="table1", out=tmp_path, report_only=True, add=(ADDED,)))
    TARGETS["table3"].check(Job(target="table3", out=tmp_path, add=(ADDED,)))
    assert not any(tmp_path.iterdir())


def test_table3_adds_run_as_its_cyclical_method():
    spec = tables.TABLES["table3"]
    assert added.added_protocol(spec, "smoke", 60) == ["sampler.cycles=3", "sampler.samples_per_cycle=3",
                                                        "data=mnist5k", "seed=0"]
    assert added.added_runs(tables.TABLES["table1"], "full", 200, "0,1", ["mine"]) == [
        {"sampler.name": "mine", "data": d, "seed": s} for d in ("cifar10", "cifar100") for s in ("0", "1")]


def _run(root: Path, name: str, sampler: str, seed: int = 0, error: float | None = 10.0) -> None:
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    config = {"sampler": {"name": sampler}, "data": {"name": "mnist5k"}, "model": {"name": "mlp"}, "seed": seed}
    OmegaConf.save(OmegaConf.create(config), run / ".hydra" / "config.yaml")
    if error is not None:
        (run / "metrics.json").write_text(json.dumps({"ensemble": {"test_error_pct": error, "nll": 0.3}}))


def test_the_record_makes_rows_of_added_methods_only(tmp_path):
    """A method the runs folder records as added is a row; any other name stays a finished run left out."""
    runs = tmp_path / "runs"
    _run(runs, "sweep0/0", "csghmc", error=9.0)
    _run(runs, "add_mine/0", "mine", error=8.0)
    _run(runs, "stray/0", "someone_elses", error=1.0)
    added.record_added(runs, "table1", {"mine": ["sampler=csgld", "sampler.name=mine"]})
    added.record_added(runs, "table1", {"theirs": ["sampler=sgld", "sampler.name=theirs"]})  # kept beside
    assert list(added.read_added(runs, "table1")) == ["mine", "theirs"] and added.read_added(runs, "table3") == {}
    table, missing = table_report.report("table1", runs, tmp_path / "out", "smoke", epochs=80, seeds="0")
    errors = table[(table.metric == "test_error_pct") & (table.paper_data == "cifar10")]
    assert list(errors.method) == ["cSGHMC", "mine"] and math.isnan(errors.paper.iloc[1])
    assert {"sampler.name": "theirs", "data": "mnist5k", "seed": "0"} in missing  # recorded, never run
    assert {"sampler.name": "mine", "data": "mnist5k", "seed": "0"} not in missing
    text = (tmp_path / "out" / "table1.md").read_text()
    assert f"`{runs / 'stray' / '0'}`" in text.split("left out")[1] and "| mine | - | 8.00 (1) | - | - |" in text
    (runs / added.ADDED).write_text("[not the record")
    with pytest.raises(ConfigError, match="added_methods.json is the driver's record"):
        table_report.report("table1", runs, tmp_path / "out", "smoke", epochs=80, seeds="0")


def test_the_runs_import_the_users_modules_from_where_the_driver_started(tmp_path, monkeypatch):
    """The driver works from the repository; the user's folder goes first on the runs' PYTHONPATH."""
    seen = {}

    def make(job):
        seen.update(path=os.environ["PYTHONPATH"], cwd=os.getcwd(), add=job.add)
        return []

    monkeypatch.setitem(registry.TARGETS, "table1", registry.Target("table1", "", "csgmcmc", make, ("smoke",),
                                                                    registry.TABLE_FLAGS))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "argv", [str(REPRODUCE), "table1", "--scale", "smoke", "--add", "a=1 b=2", "--add", "c=3"])
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(REPRODUCE), run_name="__main__")
    assert seen == {"path": f"{tmp_path}{os.pathsep}/elsewhere", "cwd": str(ROOT), "add": ("a=1 b=2", "c=3")}


def test_make_passes_one_added_method_to_the_driver():
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    dry = subprocess.run(["make", "-n", "--no-print-directory", "-o", ".venv/.installed-stamp", "table1", "SCALE=smoke",
                          f"ADD={ADDED}"], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    assert dry.stdout.strip() == f'.venv/bin/python scripts/reproduce.py --scale smoke --add "{ADDED}" table1'
