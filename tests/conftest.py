from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Under pytest-xdist (`make test`: one worker per core) every worker and every train.py it starts uses one thread, so
# the workers do not contend for the cores; runs compared bit for bit (a resume, a process restarted) then share
# their number of threads too.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# csg first in every pytest process, xdist's controller too: it imports the module of each warning a worker
# reports (Lightning's), and Lightning imports torchvision, which needs csg's guard in a clone's editable install
import csg  # noqa: F401,E402


# The test files that take longest (minutes of subprocess runs), longest first: `make test` hands whole files to its
# pytest-xdist workers (--dist loadfile) in collection order, so these go first and the short files fill the end
# (longest-processing-time-first scheduling) instead of one long file running alone at the end.
LONG_FILES = ("tests/pythons/test_newest_python.py", "tests/pythons/test_oldest_python.py",
              "tests/studies/test_benchmark.py", "tests/launch/test_own_project.py",
              "tests/likelihoods/test_regression_runs.py", "tests/studies/test_benchmark_cifar10.py", "tests/test_docs.py",
              "tests/test_gpu_check.py", "tests/launch/test_docs_run_guide.py", "tests/launch/test_docs_run.py",
              "tests/test_demo.py", "tests/launch/test_slurm.py", "tests/studies/test_tables.py",
              "tests/launch/test_install.py", "tests/engine/test_distributed.py", "tests/engine/test_long_budget.py")


def pytest_collection_modifyitems(config, items):
    """The long files first (:data:`LONG_FILES`); ``gpu`` tests run where CUDA is visible and are skipped, with the
    reason, everywhere else."""
    import torch

    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible); run `pytest -m gpu` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def doc_blocks(page: str, title: str) -> list[list[list[str]]]:
    """The bash blocks of the section headed ``title`` (at any level) of ``docs/<page>``, up to the next heading of
    its level or above: per block, its command lines as words (comment lines left out, backslash continuations
    joined)."""
    lines, level, kept, fenced = (ROOT / "docs" / page).read_text().splitlines(keepends=True), 0, [], False
    for line in lines:
        fenced ^= line.startswith("```")
        heading = re.match(r"(#+) (.*)", line) if not fenced else None
        if heading and level and len(heading[1]) <= level:
            break
        if heading and heading[2].strip() == title:
            level = len(heading[1])
        elif level:
            kept.append(line)
    assert level, f"docs/{page} has no section {title!r}"
    section = "".join(kept)
    blocks = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        joined = block.replace("\\\n", " ")
        blocks.append([shlex.split(line, comments=True) for line in joined.splitlines()
                       if line.strip() and not line.lstrip().startswith("#")])
    return blocks




def install_wheel(base: Path, studies: bool = False) -> Path:
    """csg's wheel built from a copy of the repository's package files and installed, not editable, into a fresh
    virtual environment ``base/venv`` (``python -m venv``; pip run for it with ``--python``); its site-packages
    folder. ``--no-deps --no-build-isolation --no-index``: no network here, so the venv sees this environment's
    packages (torch, Hydra, timm, setuptools) through one ``.pth`` line naming their folder, after its own - a path
    line, so that folder's own ``.pth`` files (this checkout's editable csg) are not run - and ``bin/torchrun``, the
    script torch's install would write there. The copy keeps the build's ``build/`` and ``csg.egg-info/`` out of
    the repository. ``studies``: csg's studies too (:func:`install_studies`), as ``make install`` puts them."""
    import sysconfig

    sys.path.insert(0, str(ROOT / "scripts"))
    from check_pythons import copy_package

    source, venv = base / "csg", base / "venv"
    copy_package(source)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    (site / "_csg_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    process = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                              "--no-build-isolation", "--no-index", str(source)], capture_output=True, text=True,
                             timeout=300, cwd=base)
    assert process.returncode == 0, process.stderr[-3000:]
    torchrun = venv / "bin" / "torchrun"  # the console script torch's own install would put there
    torchrun.write_text(f"#!{python}\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n")
    torchrun.chmod(0o755)
    if studies:
        install_studies(site)
    return site


def install_studies(site: Path) -> None:
    """csg's research studies (the clone's studies/, the csg-studies distribution) installed beside csg in the venv
    of ``install_wheel``, as ``make install`` and ``pip install path/to/csg/studies`` do (from a copy: the build's
    ``build/`` and ``*.egg-info/`` stay out of the clone)."""
    source = site.parents[3] / "studies"
    shutil.copytree(ROOT / "studies", source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    process = subprocess.run([sys.executable, "-m", "pip", "--python", str(installed_bin(site) / "python"), "install",
                              "--quiet", "--no-deps", "--no-build-isolation", "--no-index", str(source)],
                             capture_output=True, text=True, timeout=300, cwd=source.parent)
    assert process.returncode == 0, process.stderr[-3000:]


def installed_bin(site: Path) -> Path:
    """The ``bin/`` folder of the venv whose site-packages ``install_wheel`` returned: its python and csg's
    console scripts."""
    return site.parents[2] / "bin"


def installed_env(site: Path) -> dict[str, str]:
    """The environment of a user's shell with the venv of ``install_wheel`` activated: its ``bin/`` first on ``PATH``
    (its python, csg's console scripts), no ``PYTHONPATH``, SLURM's clients off ``PATH`` (this host may have the
    tests' private SLURM), no GPU, one thread, no Hydra or W&B variables of the caller."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HYDRA_", "WANDB_", "PYTHON", "CSG_", "VIRTUAL_ENV"))}
    no_slurm = [p for p in env.get("PATH", "").split(os.pathsep)
                if p and not any((Path(p) / client).exists() for client in ("sbatch", "srun"))]
    env["PATH"] = os.pathsep.join([str(installed_bin(site)), *no_slurm])
    env["VIRTUAL_ENV"] = str(site.parents[2])
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["OMP_NUM_THREADS"] = "1"
    return env


def make_dry_run(*args: str) -> subprocess.CompletedProcess:
    """``make -n ARGS`` in the repository: the commands make would run, without installing first (the .venv stamps
    taken as up to date) and without the flags of an enclosing ``make test``."""
    quiet = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "--no-print-directory", "-n", "-o", ".venv/.installed-stamp",
                           "-o", ".venv/.reference-stamp", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=quiet)


def read_samples(run_dir: Path) -> dict[str, dict]:
    """A run's sample files by their path under ``samples/`` (``chainNN/...`` for several chains), loaded."""
    import torch

    folder = Path(run_dir) / "samples"
    return {str(p.relative_to(folder)): torch.load(p, weights_only=True) for p in sorted(folder.glob("**/*.pt"))}


def assert_same_samples(one: Path, other: Path, atol: float | None = None) -> dict[str, dict]:
    """The two runs hold the same sample files with the same weights: bit for bit, or within ``atol`` (rtol 0).
    Returns the first run's samples."""
    import torch

    first, second = read_samples(one), read_samples(other)
    assert list(first) == list(second) and first, (list(first), list(second))
    for name in first:
        for key, tensor in first[name]["state_dict"].items():
            theirs = second[name]["state_dict"][key]
            same = torch.equal(tensor, theirs) if atol is None else torch.allclose(tensor, theirs, atol=atol, rtol=0)
            assert same, (name, key, (tensor - theirs).abs().max().item())
    return first


def train(args, run_dir: Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python train.py <args>`` into ``run_dir``, without the caller's Hydra and W&B variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "HYDRA_"))}
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args, f"hydra.run.dir={run_dir}", "trainer.progress=false"],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env,
    )


@pytest.fixture
def run_train(tmp_path):
    """Run ``python train.py <args>`` in a fresh run directory; returns (CompletedProcess, run_dir)."""

    def _run(*args: str, run_dir: Path | None = None, timeout: float = 300) -> tuple[subprocess.CompletedProcess, Path]:
        run_dir = run_dir or tmp_path / "run"
        return train(args, run_dir, tmp_path, timeout), run_dir

    return _run


def assert_one_line(process: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    """``process`` exited with ``code`` and printed one line on stderr, no traceback, holding every fragment."""
    lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert process.returncode == code and len(lines) == 1, process.stderr
    assert "Traceback" not in process.stderr + process.stdout
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
