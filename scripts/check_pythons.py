#!/usr/bin/env python
"""csg as a pip user gets it: its wheel in a fresh venv of each Python it claims, with today's releases.

    python scripts/check_pythons.py [--python 3.11 --python 3.13 | --all] [--tests 3.13] [--test-path PATH ...]
                                    [--installer pip|uv] [--json FILE] [--out FILE] [--work DIR]

For each Python (default: the oldest and the newest that pyproject's ``requires-python`` admits; ``--all``: every
one):

1. a fresh venv of that interpreter (``python3.X`` on ``PATH``, else under ``$PYENV_ROOT/versions``, else
   ``/usr/local/bin``, ``/usr/bin``);
2. ``pip install --no-compile csg-<version>.whl[test,lightning]`` with no constraints, no pip configuration files
   (``PIP_CONFIG_FILE`` set to the null device) and no ``PIP_*`` variable but the network's (certificates,
   timeouts, proxy), so that a machine's own caps and local indexes do not apply: the newest releases the package
   index serves that csg's bounds admit, as ``pip install csg`` gives a user. ``--installer uv``: ``uv pip install
   --no-config`` instead, which resolves the same newest releases from the same index and installs them from its
   cache (``~/.cache/uv``) by hard links, in seconds where pip unpacks a CUDA build of torch on every run: make
   test's check uses it;
3. the smoke set (tests/pythons/smoke_set.py), copied with docs/own-loop.md into a folder outside the clone, run
   by the venv's pytest there;
4. for the Pythons of ``--tests``: the clone's tests (default :data:`NEWEST_TESTS`, or the ``--test-path`` folders
   and files) under the venv, run from a copy of the clone without its package (``csg/``, ``hydra_plugins/``);
   both 3 and 4 first check that ``import csg`` there is the venv's, the wheel's. A skipped test must say it needs a
   CUDA GPU (:data:`EXPECTED_SKIP`); any other skip fails the check.

Prints one line per Python (the releases of the main dependencies it got, each step's seconds and pytest's
counts); ``--json`` writes them as data, ``--out`` as a Markdown report. Each venv is removed when its Python is
done, whatever happened (several GB: a CUDA build of torch). Exits 0 when every step passed, 1 when one failed, 2
on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FILES = ("pyproject.toml", "setup.py", "README.md", "csg", "configs", "hydra_plugins")
SMOKE = ROOT / "tests" / "pythons" / "smoke_set.py"
sys.path.insert(0, str(ROOT / "scripts"))

from test_report import counts as junit_counts  # noqa: E402  (make test-report's reading of pytest's JUnit XML)
# make test's tests on the newest Python: those that read ArviZ, whose 1.x (the newest Pythons get it) was the one
# incompatibility the newest releases showed; make test-pythons runs the posterior, evaluation, sampler, likelihood
# and own-loop tests there (its --test-path list)
NEWEST_TESTS = ("tests/posterior/test_inference_data.py", "tests/evaluation/test_convergence.py",
                "tests/evaluation/test_uncertainty.py", "tests/studies/test_accuracy_multimodal_importance.py")
EXPECTED_SKIP = "needs a CUDA GPU"
EXTRAS = "test,lightning"
NETWORK_PIP = {"PIP_CERT", "PIP_CLIENT_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_TIMEOUT", "PIP_RETRIES", "PIP_PROXY",
               "PIP_DISABLE_PIP_VERSION_CHECK"}
NOT_COPIED = {".git", ".venv", "csg", "hydra_plugins", "runs", "multirun", "outputs", "data", "site", "build",
              "wandb"}  # at the clone's top level; caches at any level
SHOWN = ("torch", "torchvision", "numpy", "pandas", "scipy", "arviz", "hydra-core", "timm", "torchmetrics",
         "scikit-learn", "matplotlib", "mlxtend", "wandb")


def claimed_pythons(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The minor versions of Python 3 that pyproject's ``requires-python`` admits (it must have an upper bound)."""
    from packaging.specifiers import SpecifierSet

    text = pyproject.read_text()
    spec = SpecifierSet(re.search(r'^requires-python\s*=\s*"([^"]+)"', text, flags=re.M)[1])
    found = [f"3.{minor}" for minor in range(0, 40) if f"3.{minor}.0" in spec]
    if not found or "3.99.0" in spec:
        raise ValueError(f"requires-python {spec} names no bounded range of Python 3 versions")
    return found


def find_python(version: str) -> Path | None:
    """An interpreter of ``version`` (``3.X``) on this machine, or None."""
    home = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted((str(p) for p in home.glob(f"versions/{version}.*/bin/python{version}")),
                         key=lambda p: [int(x) for x in re.findall(r"\d+", Path(p).parents[1].name)], reverse=True)
    candidates += [f"/usr/local/bin/python{version}", f"/usr/bin/python{version}"]
    for candidate in filter(None, candidates):
        try:
            got = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=60)
        except OSError:
            continue
        if got.returncode == 0 and got.stdout.strip() == version:
            return Path(candidate)
    return None


def copy_package(source: Path) -> None:
    """The files csg's wheel is built of (:data:`PACKAGE_FILES`) copied into the new folder ``source``, so that a
    build's ``build/`` and ``csg.egg-info/`` stay out of the clone (tests/conftest.py's ``install_wheel`` too)."""
    source.mkdir()
    for name in PACKAGE_FILES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)


def build_wheel(folder: Path) -> Path:
    """csg's wheel, built by this interpreter's pip from a copy of the package files (no network)."""
    source = folder / "source"
    for old in (source, folder / "dist"):
        shutil.rmtree(old, ignore_errors=True)
    copy_package(source)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(folder / "dist"), str(source)], capture_output=True, text=True,
                          timeout=300, cwd=folder)
    if done.returncode != 0:
        raise RuntimeError(f"pip wheel failed: {done.stderr[-2000:]}")
    (wheel,) = (folder / "dist").glob("csg-*.whl")
    return wheel


def user_env(venv: Path) -> dict[str, str]:
    """A user's shell with ``venv`` activated: no PYTHONPATH, no pip or uv configuration (the network's settings
    kept), one thread, no GPU, no bytecode written."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PIP_", "UV_", "VIRTUAL_ENV", "HYDRA_", "WANDB_", "CSG_", "PYTEST_"))
           or k in NETWORK_PIP}
    env.update(PATH=os.pathsep.join([str(venv / "bin"), env.get("PATH", "")]), VIRTUAL_ENV=str(venv),
               PIP_CONFIG_FILE=os.devnull, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", WANDB_MODE="disabled",
               PYTHONDONTWRITEBYTECODE="1")
    return env


def imported_from(venv: Path, cwd: Path) -> Path:
    """Where ``import csg`` finds csg for the venv's Python run in ``cwd`` (as ``python -m pytest`` there would)."""
    found = subprocess.run([str(venv / "bin" / "python"), "-c", "import csg; print(csg.__file__)"], cwd=cwd,
                           env=user_env(venv), capture_output=True, text=True, timeout=300)
    return Path(found.stdout.strip() or "-")


def _pytest(venv: Path, arguments: list[str], cwd: Path, junit: Path, timeout: float) -> dict:
    """The venv's pytest on ``arguments`` in ``cwd``: its status, counts, failures and skip reasons."""
    command = [str(venv / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", "-q", "--timeout", "900",
               f"--junitxml={junit}", *arguments]
    start = time.perf_counter()
    where = imported_from(venv, cwd)
    if not where.is_relative_to(venv):
        return {"status": 1, "seconds": 0.0, "passed": 0, "failed": 0, "errors": 1, "skipped": 0, "skips": [],
                "failures": [f"import csg found {where}, not the venv's"], "tail": ""}
    done = subprocess.run(command, cwd=cwd, env=user_env(venv), capture_output=True, text=True, timeout=timeout)
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    skips: dict[str, int] = {}
    if junit.is_file():
        total = junit_counts(junit)
        counts = {"passed": total["passed"], "failed": total["failures"], "errors": total["errors"],
                  "skipped": total["skipped"]}
        for skipped in ElementTree.parse(junit).getroot().iter("skipped"):
            reason = (skipped.get("message") or "").splitlines()[0][:200] if skipped.get("message") else "(no reason)"
            skips[reason] = skips.get(reason, 0) + 1
    failures = [line for line in done.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    failures += [f"skipped {n}x: {reason}" for reason, n in skips.items() if EXPECTED_SKIP not in reason]
    status = done.returncode or int(any(EXPECTED_SKIP not in reason for reason in skips))
    return {"status": status, "seconds": round(time.perf_counter() - start, 1), **counts,
            "skips": [f"{n}x {reason}" for reason, n in skips.items()], "failures": failures,
            "tail": done.stdout[-4000:] + done.stderr[-2000:] if status else ""}


def copy_of_the_clone(folder: Path) -> Path:
    """The clone without its package (:data:`NOT_COPIED`), so that its tests import the venv's csg."""
    target = folder / "clone"
    caches = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.egg-info")

    def ignored(where: str, names: list[str]) -> set[str]:
        top = NOT_COPIED.intersection(names) if Path(where) == ROOT else set()
        return top | caches(where, names)

    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(ROOT, target, ignore=ignored, symlinks=True)
    return target


def uv_program() -> Path | None:
    """uv (the test extra's): beside this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / "uv"
    found = beside if beside.is_file() else shutil.which("uv")
    return Path(found) if found else None


def _install(venv: Path, wheel: Path, installer: str, work: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """csg's wheel with the test extra into ``venv`` by ``installer``; the process and the installed releases."""
    python, env = str(venv / "bin" / "python"), user_env(venv)
    if installer == "uv":
        uv = str(uv_program())
        done = subprocess.run([uv, "pip", "install", "--quiet", "--no-config", "--python", python,
                               f"{wheel}[{EXTRAS}]"], env=env, capture_output=True, text=True, timeout=1800, cwd=work)
        listing = [uv, "pip", "list", "--no-config", "--python", python, "--format", "json"]
    else:
        done = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check",
                               f"{wheel}[{EXTRAS}]"], env=env, capture_output=True, text=True, timeout=1800, cwd=work)
        listing = [python, "-m", "pip", "list", "--format", "json"]
    listed = subprocess.run(listing, env=env, capture_output=True, text=True, timeout=120) if not done.returncode \
        else None
    versions = {e["name"].lower(): e["version"] for e in json.loads(listed.stdout or "[]")} if listed else {}
    return done, versions


def check(version: str, wheel: Path, work: Path, with_tests: bool, workers: int = 1,
          test_paths: tuple[str, ...] = NEWEST_TESTS, installer: str = "pip") -> dict:
    """Every step for one Python (the module's docstring); the record of what it found. Its venv is removed at the
    end, whatever happened."""
    venv = work / f"venv-{version}"
    try:
        return _check(version, venv, wheel, work, with_tests, workers, test_paths, installer)
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def _check(version, venv, wheel, work, with_tests, workers, test_paths, installer) -> dict:
    record: dict = {"python": version, "passed": False, "installer": installer}
    interpreter = find_python(version)
    if interpreter is None:
        record["error"] = f"no Python {version} here (python{version} on PATH, $PYENV_ROOT/versions, /usr/bin)"
        return record
    shutil.rmtree(venv, ignore_errors=True)
    start = time.perf_counter()
    made = subprocess.run([str(interpreter), "-m", "venv", *(["--without-pip"] if installer == "uv" else []),
                           str(venv)], capture_output=True, text=True, timeout=300)
    if made.returncode != 0:
        record["error"] = f"python{version} -m venv failed: {made.stderr.strip()[-500:]}"
        return record
    record["python_full"] = subprocess.run([str(venv / "bin" / "python"), "-c", "import platform; "
                                            "print(platform.python_version())"], capture_output=True, text=True,
                                           timeout=60).stdout.strip()
    install, versions = _install(venv, wheel, installer, work)
    record["install_s"] = round(time.perf_counter() - start, 1)
    if install.returncode != 0:
        record["error"] = f"{installer} install failed: {install.stderr.strip()[-1500:]}"
        return record
    record["versions"] = {name: versions.get(name, "-") for name in SHOWN}
    folder = work / f"user-{version}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    shutil.copy2(SMOKE, folder / SMOKE.name)
    shutil.copy2(ROOT / "docs" / "own-loop.md", folder / "own-loop.md")
    record["smoke"] = _pytest(venv, [SMOKE.name, f"--basetemp={folder / 'tmp'}"], folder, work / f"smoke-{version}.xml",
                              timeout=1200)
    ok = record["smoke"]["status"] == 0
    if with_tests:
        spread = ["-n", str(workers)] if workers > 1 else []
        clone = copy_of_the_clone(work)
        record["tests"] = _pytest(venv, [*test_paths, *spread, f"--basetemp={work / f'tests-{version}'}"], clone,
                                  work / f"tests-{version}.xml", timeout=2400)
        record["tests"]["paths"] = list(test_paths)
        ok = ok and record["tests"]["status"] == 0
    record["passed"] = ok
    return record


def line(record: dict) -> str:
    """One Python's result in one line."""
    head = f"Python {record.get('python_full', record['python'])}: "
    if "error" in record:
        return head + "error: " + record["error"].splitlines()[0]
    parts = [("passed" if record["passed"] else "FAILED"), f"{record['installer']} install {record['install_s']:.0f} s"]
    for step in ("smoke", "tests"):
        if step in record:
            r = record[step]
            parts.append(f"{step} {r['passed']} passed, {r['failed']} failed, {r['errors']} errors, "
                         f"{r['skipped']} skipped in {r['seconds']:.0f} s")
    parts.append(" ".join(f"{name} {got}" for name, got in record["versions"].items()))
    return head + "; ".join(parts)


def markdown(records: list[dict], seconds: float) -> str:
    """The report of ``records`` (results/pythons.md)."""
    rows = ["| Python | result | install | smoke set | the clone's tests | " +
            " | ".join(SHOWN) + " |", "|---|---|---:|---|---|" + "---|" * len(SHOWN)]
    for r in records:
        if "error" in r:
            rows.append(f"| {r['python']} | error: {r['error'].splitlines()[0]} |" + " |" * (3 + len(SHOWN)))
            continue

        def counted(step):
            s = r.get(step)
            return (f"{s['passed']} passed, {s['failed']} failed, {s['errors']} errors, {s['skipped']} skipped "
                    f"({s['seconds']:.0f} s)"
                    if s else "not run")

        rows.append(f"| {r['python_full']} | {'pass' if r['passed'] else 'FAIL'} | {r['installer']}, {r['install_s']:.0f} s | "
                    f"{counted('smoke')} | {counted('tests')} | " + " | ".join(r["versions"].values()) + " |")
    paths = sorted({" ".join(r["tests"]["paths"]) for r in records if "tests" in r})
    failures = [f"- Python {r['python']}: {f}" for r in records for s in ("smoke", "tests") for f in
                r.get(s, {}).get("failures", [])]
    return "\n".join([
        "# csg from pip on every Python it claims",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} CPUs "
        f"({platform.machine()}), `make test-pythons` (scripts/check_pythons.py): csg's wheel in a fresh venv of each "
        "Python, `pip install csg.whl[test,lightning]` (or `uv pip install`, where the table says so) with no "
        "constraints and no pip configuration (the newest releases the package index serves; the install column "
        "includes the venv and the downloads the cache did not hold), then the smoke set (tests/pythons/smoke_set.py) from a folder outside the clone, "
        "and where named the clone's tests under that venv, from a copy of the clone without its package so that "
        "they import the wheel's csg (" + ("; ".join(f"`{p}`" for p in paths) or "none") + "). "
        f"The whole check: {seconds / 60:.1f} min.",
        "",
        *rows,
        "",
        *(["Failures:", "", *failures, ""] if failures else []),
        "Every skipped test says it needs a CUDA GPU (any other skip fails the check): "
        + ("; ".join(f"Python {r['python']}: " + ", ".join(r[step]["skips"]) for r in records
                     for step in ("smoke", "tests") if r.get(step, {}).get("skips")) or "none") + ". "
        "`make test` runs the same check on the oldest and the newest of these Pythons (tests/pythons/): the smoke "
        "set on both, and on the newest the tests that read ArviZ (" + ", ".join(NEWEST_TESTS) + ").",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", metavar="3.X",
                        help="a Python to check (repeatable; default: the oldest and newest requires-python admits)")
    parser.add_argument("--all", action="store_true", help="every Python requires-python admits")
    parser.add_argument("--tests", action="append", default=None, metavar="3.X",
                        help="run the clone's tests on this Python too (default: the newest, if checked)")
    parser.add_argument("--test-path", action="append", metavar="PATH",
                        help="with --tests: these test folders or files of the clone (repeatable; default: "
                             + " ".join(NEWEST_TESTS) + ")")
    parser.add_argument("--installer", choices=("pip", "uv"), default="pip",
                        help="pip (default: a user's command) or uv (the same releases, installed in seconds)")
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers of those tests (default 1)")
    parser.add_argument("--json", type=Path, help="write the records here")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--work", type=Path, help="a folder for the venvs (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    claimed = claimed_pythons()
    if args.all and args.python:
        print("error: --all and --python are not allowed together: one or the other", file=sys.stderr)
        return 2
    pythons = claimed if args.all else args.python or [claimed[0], claimed[-1]]
    tests = args.tests if args.tests is not None else [v for v in claimed[-1:] if v in pythons]
    for flag, version in [*(("--python", v) for v in pythons), *(("--tests", v) for v in tests)]:
        if version not in claimed:
            print(f"error: {flag} {version} is not allowed: one of {', '.join(claimed)} (pyproject's "
                  "requires-python)", file=sys.stderr)
            return 2
        if flag == "--tests" and version not in pythons:
            print(f"error: --tests {version} is not allowed: a Python being checked ({', '.join(pythons)})",
                  file=sys.stderr)
            return 2
    for path in args.test_path or []:
        if not (ROOT / path).exists() or not Path(path).parts or Path(path).parts[0] != "tests":
            print(f"error: --test-path {path} is not allowed: a folder or file under the clone's tests/",
                  file=sys.stderr)
            return 2
    if args.installer == "uv" and uv_program() is None:
        print("error: --installer uv is not allowed here: no uv beside this Python or on PATH (pip install uv; csg's "
              "test extra has it)", file=sys.stderr)
        return 2
    if args.workers < 1:
        print(f"error: --workers={args.workers} is not allowed: a whole number >= 1", file=sys.stderr)
        return 2
    start = time.perf_counter()
    work = args.work or Path(tempfile.mkdtemp(prefix="csg-pythons-"))
    work.mkdir(parents=True, exist_ok=True)
    records = []
    try:
        wheel = build_wheel(work)
        for version in pythons:
            records.append(check(version, wheel, work, version in tests, args.workers,
                                 tuple(args.test_path or NEWEST_TESTS), args.installer))
            print(line(records[-1]), flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    seconds = time.perf_counter() - start
    if args.json:
        args.json.write_text(json.dumps({"records": records, "seconds": seconds}, indent=1) + "\n")
    if args.out:
        sys.path.insert(0, str(ROOT))
        from csg.io.atomic import atomic_write_text

        atomic_write_text(args.out, markdown(records, seconds))
    return 0 if records and all(r["passed"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
