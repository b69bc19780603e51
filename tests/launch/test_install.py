"""csg installed from its wheel, used from a project outside the repository: the commands of docs/getting-started.md's
"Install into your own project", run line by line.

``pip install path/to/csg`` builds csg's wheel from a copy of the repository's package files and installs it, not
editable, into a fresh venv (tests/conftest.py's ``install_wheel``): ``--no-deps`` (this environment's torch, Hydra,
timm are reused, through a path line in the venv), ``--no-build-isolation --no-index`` (its setuptools, no network).
Every later command runs from a folder outside the repository with the venv's ``bin/`` first on ``PATH`` (its
``python``; ``csg-train``, ``csg-evaluate``, ``csg-compare`` and ``csg-reproduce``, the console scripts pip wrote
there; each command's csg and ``hydra_plugins`` are asserted to be the venv's, not this checkout's editable one),
and SLURM's ``sbatch`` and ``srun`` off ``PATH`` (this host may have them: the tests' private SLURM).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, doc_blocks, install_studies, install_wheel, installed_bin, installed_env as _env

SECTION = "Install into your own project"
SOURCE = "path/to/csg"  # what the page calls a clone of csg


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The page's ``pip install path/to/csg`` into a target folder (see the module's docstring); the folder."""
    words = _commands()[0]
    assert words == ["pip", "install", SOURCE], words
    return install_wheel(tmp_path_factory.mktemp("install"))


def _commands() -> list[list[str]]:
    (block,) = doc_blocks("getting-started.md", SECTION)
    return block


def test_the_wheel_holds_the_configs_the_launcher_and_the_commands(installed):
    (info,) = installed.glob("csg-*.dist-info")
    assert (info / "WHEEL").is_file()  # installed from a wheel pip built, not an editable link
    entry_points = (info / "entry_points.txt").read_text()
    assert "csg-train = csg.__main__:main" in entry_points
    assert "csg-reproduce = csg.launch.reproduce_cli:console" in entry_points
    assert not (installed / "studies").exists()  # the studies are not in csg's wheel
    assert "csg-evaluate = csg.launch.evaluate_cli:console" in entry_points
    assert "csg-compare = csg.launch.compare_cli:console" in entry_points
    assert "csg-tune = csg.launch.tune_cli:console" in entry_points
    shipped = {p.relative_to(installed / "csg" / "configs").as_posix() for p in (installed / "csg" / "configs").rglob("*.yaml")}
    assert shipped == {p.relative_to(ROOT / "configs").as_posix() for p in (ROOT / "configs").rglob("*.yaml")}
    assert (installed / "hydra_plugins" / "csg_slurm_launcher.py").is_file()
    assert not (installed / "hydra_plugins" / "__init__.py").exists()  # a namespace package, shared with submitit's
    for script in ("csg-train", "csg-reproduce", "csg-evaluate", "csg-compare", "csg-tune"):
        assert os.access(installed_bin(installed) / script, os.X_OK), script
    helped = subprocess.run([str(installed_bin(installed) / "csg-tune"), "--help"], env=_env(installed),
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and helped.stdout.startswith("csg-tune: pick a sampler's settings"), helped.stderr


@pytest.fixture(scope="module")
def page_run(installed, tmp_path_factory) -> dict:
    """Every command of the page's section after the install, in a folder outside the repository: the processes
    by their line, and the project's folder."""
    here = tmp_path_factory.mktemp("user")
    env, done = _env(installed), {}
    for words in _commands()[1:]:
        if words[0] == "cp":  # cp -r path/to/csg/examples/own_project .
            assert words[1] == "-r" and words[2].startswith(SOURCE + "/") and words[3] == ".", words
            shutil.copytree(ROOT / words[2].removeprefix(SOURCE + "/"), here / Path(words[2]).name,
                            ignore=shutil.ignore_patterns("__pycache__", "runs", "results"))
            continue
        if words[0] == "cd":
            here = here / words[1]
            continue
        line, assigned = " ".join(words), {}
        while "=" in words[0] and words[0].partition("=")[0].isidentifier():  # NAME=value before the command
            name, _, value = words.pop(0).partition("=")
            assigned[name] = str(here) if value == "." and name == "PYTHONPATH" else value
        program = [str(installed_bin(installed) / words[0])]  # python too: the venv's
        extra = {**env, **assigned}
        done[line] = subprocess.run([*program, *words[1:]], cwd=here, env=extra, capture_output=True, text=True,
                                    timeout=300)
    return {"processes": done, "project": here, "env": env}


def _one_line(process: subprocess.CompletedProcess, start: str) -> None:
    lines = process.stderr.strip().splitlines()
    assert process.returncode == 2 and len(lines) == 1 and lines[0].startswith(start), (process.returncode,
                                                                                          process.stderr[-2000:])


def test_csg_train_runs_the_projects_own_data_model_and_sampler_from_its_folder(page_run, installed):
    (train, load, evaluate, compare, bad_key, slurm) = page_run["processes"].values()
    assert train.returncode == 0, train.stderr[-3000:]
    run_dir = page_run["project"] / "runs" / "spirals"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["method"], metrics["model"], metrics["data_source"]) == \
        ("langevin", "spiral_net", "custom: own_project.data.load")
    assert metrics["ensemble"]["num_samples"] == 12 and metrics["ensemble"]["test_error_pct"] < 10
    assert (run_dir / "train.log").is_file()
    sources = (run_dir / ".hydra" / "hydra.yaml").read_text()
    # the project's folder first, then the installed configs
    assert sources.index(str(page_run["project"] / "configs")) < sources.index(str(installed / "csg" / "configs"))
    assert load.returncode == 0, load.stderr[-3000:]
    assert float(load.stdout.strip().splitlines()[-1]) == pytest.approx(metrics["ensemble"]["nll"], abs=1e-9)
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    harmonic = json.loads((run_dir / "evaluation_harmonic.json").read_text())
    assert harmonic["cycle_weights"] == "harmonic" and len(harmonic["per_sample"]) == 12
    assert compare.returncode == 0, compare.stderr[-3000:]
    assert "langevin" in compare.stdout and (page_run["project"] / "comparison.csv").is_file()
    _one_line(bad_key, "error: sampler.lr=0.1 is not allowed: sampler.lr is not a key of the config")
    _one_line(slurm, "error: hydra/launcher=slurm is not allowed: a machine with SLURM's sbatch and srun on PATH")
    assert not (page_run["project"] / "multirun").exists()


def test_every_command_used_the_installed_csg_and_its_launcher(page_run, installed):
    code = ("import csg, csg.paths, hydra_plugins.csg_slurm_launcher as launcher\n"
            "print(csg.__file__); print(csg.paths.CONFIGS); print(launcher.__file__)")
    found = subprocess.run([str(installed_bin(installed) / "python"), "-c", code], cwd=page_run["project"],
                           env=page_run["env"], capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    assert all(Path(line).is_relative_to(installed) for line in found.stdout.split()), found.stdout
    assert Path(found.stdout.split()[1]) == installed / "csg" / "configs"


def test_csg_train_from_python_in_the_users_folder(page_run, installed):
    code = ("import csg\n"
            "posterior = csg.train(['hydra.searchpath=[file://configs]', 'data=spirals', 'model=spiral_net', "
            "'sampler=langevin', 'trainer.epochs=6', 'sampler.cycles=1', 'sampler.samples_per_cycle=2', "
            "'hydra.run.dir=runs/from_python'])\n"
            "print(len(posterior))")
    process = subprocess.run([str(installed_bin(installed) / "python"), "-c", code], cwd=page_run["project"],
                             env=page_run["env"], capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stderr[-2000:]
    assert process.stdout.strip().splitlines()[-1] == "2"
    assert (page_run["project"] / "runs" / "from_python" / "metrics.json").is_file()


def test_csg_reproduce_runs_the_studies_once_they_are_installed(page_run, installed):
    """The paper tables' drivers are csg's studies, not csg's wheel: csg-reproduce says where they are, in one line,
    until ``pip install path/to/csg/studies`` (the csg-studies distribution) puts them beside csg."""
    command = [str(installed_bin(installed) / "csg-reproduce"), "table1", "--report-only", "--runs", "none"]
    process = subprocess.run(command, cwd=page_run["project"], env=page_run["env"], capture_output=True, text=True,
                             timeout=120)
    _one_line(process, "error: csg-reproduce runs csg's studies")
    assert "pip install path/to/csg/studies" in process.stderr
    study = [str(installed_bin(installed) / "csg-train"), "synthetic=table4", "synthetic.steps=2000",
             "synthetic.repeats=1", "hydra.run.dir=runs/table4"]
    process = subprocess.run(study, cwd=page_run["project"], env=page_run["env"], capture_output=True, text=True,
                             timeout=120)
    _one_line(process, "error: synthetic=")
    assert "pip install path/to/csg/studies" in process.stderr and not (page_run["project"] / "runs" / "table4").exists()
    install_studies(installed)
    assert (installed / "studies" / "reproduce.py").is_file()
    process = subprocess.run(command, cwd=page_run["project"], env=page_run["env"], capture_output=True, text=True,
                             timeout=120)
    _one_line(process, f"error: --runs='{page_run['project'] / 'none'}' is not allowed")
    process = subprocess.run([*study, "synthetic.steps=200"], cwd=page_run["project"], env=page_run["env"],
                             capture_output=True, text=True, timeout=120)
    # csg-train imported the studies' entry point: the study's own check now reads its keys (the runs of a study
    # from an install: the getting-started page's, tests/launch/test_docs_run_guide.py)
    _one_line(process, "error: synthetic.steps=200 is not allowed: an integer >= 1501")


def test_timm_and_torchvision_import_before_csg_in_the_install(installed, tmp_path):
    """The wheel's ``.pth`` line arms the torchvision guard at interpreter start (setup.py), so the import order is
    the user's: in this environment (a CPU torch beside PyPI's CUDA torchvision) a bare ``import torchvision``
    fails without it - the interpreter of the clone's editable install, which has no such line, is the control."""
    env = _env(installed)
    code = "import timm, torchvision, csg; print(timm.create_model('resnet10t', num_classes=3).num_classes)"
    done = subprocess.run([str(installed_bin(installed) / "python"), "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["3"], done.stderr[-2000:]
    start = subprocess.run([str(installed_bin(installed) / "python"), "-X", "importtime", "-c", "pass"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60)
    imported = {line.rsplit("|", 1)[-1].strip() for line in start.stderr.splitlines() if "|" in line}
    assert {"_csg_torchvision_guard", "_csg_shadow_check"} <= imported  # armed at start, importing nothing heavy:
    assert not imported & {"torch", "csg", "pathlib", "importlib.util", "importlib.abc"}
    control = subprocess.run([sys.executable, "-c", "import torchvision"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)
    if control.returncode == 0:
        pytest.skip("torch and torchvision match in this environment: the guard has nothing to do here")
    assert "torchvision::nms does not exist" in control.stderr, control.stderr[-2000:]


def test_a_package_named_csg_that_shadows_the_install_is_named_at_import(installed, tmp_path):
    python, env = str(installed_bin(installed) / "python"), _env(installed)
    (tmp_path / "csg").mkdir()  # a project's own package named csg: Python imports it before site-packages
    (tmp_path / "csg" / "__init__.py").write_text("")
    code = "import csg; print(csg.train)"
    shadowed = subprocess.run([python, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert shadowed.returncode == 1 and "has no attribute 'train'" in shadowed.stderr
    assert shadowed.stderr.splitlines()[0] == (
        f"warning: import csg found {tmp_path / 'csg'}, not the installed csg ({installed / 'csg'}); rename it or run "
        "Python elsewhere"), shadowed.stderr
    shutil.rmtree(tmp_path / "csg")
    (tmp_path / "csg.py").write_text("")  # a module does the same
    shadowed = subprocess.run([python, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert shadowed.stderr.startswith(f"warning: import csg found {tmp_path / 'csg.py'}, not the installed csg")
    (tmp_path / "csg.py").unlink()
    (tmp_path / "csg").mkdir()  # a folder without __init__.py (data, say) does not shadow: a regular package wins
    clean = subprocess.run([python, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0 and not clean.stderr, clean.stderr[-2000:]
    clone = subprocess.run([python, "-c", code], cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)},
                           capture_output=True, text=True, timeout=120)  # a checkout of csg first: left alone
    assert clone.returncode == 0 and "warning" not in clone.stderr, clone.stderr[-2000:]
