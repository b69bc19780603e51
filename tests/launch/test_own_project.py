"""examples/own_project end to end: its README's commands as written (csg-train, torchrun -m csg, csg-reproduce from
the project's own folder), SIGTERM and resume, two processes.

The project is a copy outside the repository; csg is this checkout's (``PYTHONPATH``), as an installed csg would
be: ``csg-train`` is ``python -m csg`` and ``csg-reproduce`` is ``python -m studies.reproduce`` (the console
scripts call the same functions; tests/launch/test_install.py runs the real ones from a built wheel)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, assert_same_samples, read_samples

README = ROOT / "examples" / "own_project" / "README.md"
MARK = "<!-- own-project commands"


def readme_commands() -> list[list[str]]:
    """The command lines of the README's bash block that follows its ``own-project commands`` mark, as words."""
    text = README.read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index(MARK):], flags=re.S)[1]
    return [shlex.split(line) for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


# what each program of the README is in this test: the console scripts' functions, under this interpreter
PROGRAMS = {"csg-train": ["-m", "csg"], "csg-reproduce": ["-m", "csg.launch.reproduce_cli"],
            "torchrun": ["-m", "torch.distributed.run"]}


def _argv(words: list[str]) -> list[str]:
    if words[0] not in PROGRAMS:
        raise AssertionError(f"a README command this test does not know how to run: {words}")
    return [sys.executable, *PROGRAMS[words[0]], *words[1:]]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "WANDB_"))}
    env["PYTHONPATH"] = str(ROOT)  # csg as installed: the project's folder holds no csg
    env["CUDA_VISIBLE_DEVICES"] = ""  # the example is CPU-sized; its one- and two-process runs compare on the CPU
    env["OMP_NUM_THREADS"] = "1"  # small matrices: threads would only contend for the cores
    return env


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of examples/own_project outside the repository: nothing is written into the repository."""
    target = tmp_path_factory.mktemp("user") / "own_project"
    shutil.copytree(ROOT / "examples" / "own_project", target, ignore=shutil.ignore_patterns("__pycache__", "runs",
                                                                                               "results"))
    return target


@pytest.fixture(scope="module")
def readme_runs(project) -> list[Path]:
    """Each README command run in the project; the run directory each made, in order."""
    made = []
    results = {str(path): path.stat().st_mtime_ns for path in (ROOT / "results").rglob("*") if path.is_file()}
    commands = readme_commands()
    assert [words[0] for words in commands] == ["csg-train", "csg-train", "torchrun", "csg-reproduce"]
    for words in commands:
        before = set(project.glob("runs/*/*"))
        process = subprocess.run(_argv(words), cwd=project, capture_output=True, text=True, timeout=300, env=_env())
        assert process.returncode == 0, (words, process.stderr[-3000:])
        if words[0] == "csg-reproduce":  # a paper target: its runs under --runs, its table under --out
            continue
        new = sorted(set(project.glob("runs/*/*")) - before)
        assert len(new) == 1, new
        made.append(new[0])
    assert {str(p): p.stat().st_mtime_ns for p in (ROOT / "results").rglob("*") if p.is_file()} == results
    return made


def test_the_readme_commands_train_the_projects_components(readme_runs):
    by_yaml, by_command_line, two_processes = readme_runs
    # a YAML file's name, or the _target_'s last part for sampler=custom, model=custom
    for run_dir, method, model in ((by_yaml, "langevin", "spiral_net"),
                                   (by_command_line, "LangevinSampler", "SpiralNet")):
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert (metrics["method"], metrics["model"], metrics["num_data"]) == (method, model, 1500)
        assert metrics["ensemble"]["num_samples"] == 12 and metrics["ensemble"]["test_error_pct"] < 10
        assert metrics["data_source"] == "custom: own_project.data.load"
    assert read_samples(by_command_line)["sample_0000_cycle00_epoch0012.pt"]["state_dict"]["embed.weight"].shape == (32, 2)


def test_two_processes_give_the_one_process_samples(readme_runs):
    assert len(assert_same_samples(readme_runs[0], readme_runs[2], atol=1e-5)) == 12
    assert json.loads((readme_runs[2] / "metrics.json").read_text())["processes"] == 2


@pytest.mark.timeout(600)
def test_sigterm_then_resume_repeats_the_uninterrupted_run_bit_for_bit(project, readme_runs, tmp_path):
    from tests import gate

    words = readme_commands()[0]
    cut = project / "runs" / "cut"
    command = [*_argv(words), f"hydra.run.dir={cut}"]
    # the README's command (csg-train is what train.py runs), made to wait after its first sample until the signal
    # has been sent (tests/gate.py)
    process = gate.start(tmp_path / "barrier", ROOT / "train.py", [*words[1:], f"hydra.run.dir={cut}"], project, _env())
    gate.signal_when_waiting(process, tmp_path / "barrier", signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == -signal.SIGTERM, stderr
    assert 1 <= len(list(cut.glob("samples/*.pt"))) < 12 and (cut / "checkpoint.pt").exists()
    resumed = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=300, env=_env())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed chain 0" in (cut / "train.log").read_text()
    assert_same_samples(readme_runs[0], cut)  # bit for bit


def test_the_posterior_of_a_users_run_evaluates_to_its_metrics(readme_runs, project, monkeypatch):
    import csg

    monkeypatch.syspath_prepend(str(project))  # own_project importable, as from the directory the user runs in
    for run_dir in readme_runs[:2]:
        posterior = csg.Posterior.load(run_dir, device="cpu", trust_code=True)  # the user's own components
        saved = json.loads((run_dir / "metrics.json").read_text())["ensemble"]
        got = posterior.evaluate()
        assert len(posterior) == 12 and set(saved) <= set(got)
        assert all(got[key] == pytest.approx(value, abs=1e-9) for key, value in saved.items()), (got, saved)


def test_the_users_sampler_is_a_row_of_table_1_equal_to_csgld(readme_runs, project):
    """make table1 SCALE=smoke end to end through the driver (every method, then the table), with the user's
    sampler added."""
    import pandas as pd

    table = pd.read_csv(project / "results" / "table1.csv")
    table = table[table.paper_data == "cifar10"]  # each row stands beside each of the paper's data sets
    error = table[table.metric == "test_error_pct"].set_index("method")
    nll = table[table.metric == "test_nll"].set_index("method")
    assert list(error.index)[-1] == "langevin" and len(error) == 11 and pd.isna(error.loc["langevin", "paper"])
    assert (error["mean"] < 50).all()  # every method (the table's ten and the user's) learned the digits
    assert "Missing runs" not in (project / "results" / "table1.md").read_text()
    # the project's sampler is SGLD: under Table 1's schedule and seed its run is cSGLD's, bit for bit
    assert error.loc["langevin", "mean"] == error.loc["cSGLD", "mean"]
    assert nll.loc["langevin", "mean"] == nll.loc["cSGLD", "mean"]
    assert "| langevin |" in (project / "results" / "table1.md").read_text()


def test_the_added_method_ran_under_the_tables_protocol_and_report_only_expects_it(readme_runs, project):
    from omegaconf import OmegaConf

    config = OmegaConf.load(next((project / "runs" / "table1" / "add_langevin").glob("*/.hydra/config.yaml")))
    assert (config.study, config.data.name, config.seed, config.trainer.epochs, config.sampler.cycles) == \
        ("table1", "mnist5k", 0, 10, 2)
    assert config.sampler.optimizer._target_ == "own_project.sampler.LangevinSampler"
    row = next(line for line in (project / "results" / "table1.md").read_text().splitlines()
               if line.startswith("| langevin |"))
    assert row.split(" | ")[1] == "-"  # its step size: not one of the table's presets
    assert row.split(" | ")[3:5] == ["-", "-"]  # the paper's columns (CIFAR-10, CIFAR-100): no paper value
    # --report-only on the same folder knows the added method from its record, and expects its runs for two seeds
    report = subprocess.run([*_argv(["csg-reproduce"]), "table1", "--scale", "smoke", "--seeds", "0,1",
                             "--report-only", "--runs", "runs/table1", "--out", "report", "trainer.epochs=10"],
                            cwd=project, capture_output=True, text=True, timeout=300, env=_env())
    assert report.returncode == 0, report.stderr[-2000:]
    assert report.stdout.count("missing run:") == 11
    assert "missing run: sampler.name=langevin data=mnist5k seed=1" in report.stdout
