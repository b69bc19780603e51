"""The documentation's code blocks run as written, from csg's wheel installed into a fresh folder.

Every ``bash``, ``console`` and ``python`` block of the README and of docs/ carries a mark on the line before its
fence, and the test below holds every block to one:

- ``<!-- runnable -->`` or ``<!-- runnable: KEY=VALUE ... -->``: the block runs here. The overrides are a small
  budget that every ``csg-train`` of the block gets through ``CSG_EXTRA_OVERRIDES`` (appended after the block's
  own); a ``python`` block's budget is its own.
- ``<!-- not-run: REASON -->``: the block needs what CI lacks (GPUs, a cluster, a clone's make targets, days of
  compute); the reason names the test files that run what it shows (each must exist).

A page's runnable blocks run in order, in one fresh folder (a page is read top to bottom: a later block may use the
runs an earlier one made), in the fresh venv csg's wheel was installed into (tests/conftest.py's ``install_wheel``
and ``installed_env``: its ``python`` and csg's commands first on ``PATH``), with
``CSG_DATA`` naming small stand-ins, in their real formats, of the data sets that cannot be downloaded here
(tests/formats.py's ``write_stand_ins``; the configs read ``${oc.env:CSG_DATA,data}``):

- a ``bash`` block runs as one bash script (``set -euo pipefail``): every command must succeed;
- a ``console`` block is a transcript: each ``$ command`` must print the lines shown under it (stdout, then
  stderr), exactly, and change no file;
- a ``python`` block runs as one script (``python -c``) and must succeed.

A block that fails fails its page, naming the block.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, install_wheel, installed_env
from tests.formats import write_stand_ins

PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<mark><!--[^\n]*-->\n)?```(?P<kind>\w*)\n(?P<body>.*?)^```", re.S | re.M)
RUNNABLE = re.compile(r"<!-- runnable(?::\s*(?P<overrides>.*?))?\s*-->\n")
NOT_RUN = re.compile(r"<!-- not-run: (?P<reason>.+?)\s*-->\n")
CODE = {"bash", "console", "python", "sh", "shell"}
BASH = shutil.which("bash") or "/bin/bash"  # by its path: the user's PATH here has no SLURM folder (/usr/bin)


def code_blocks(page: str) -> list[tuple[int, str, str, str]]:
    """(line, mark, kind, text) of every code block of ``page``; the mark is the comment line before its fence."""
    text = (ROOT / page).read_text()
    return [(text[:m.start("kind")].count("\n") + 1, m["mark"] or "", m["kind"], m["body"])
            for m in FENCE.finditer(text) if m["kind"] in CODE]


def runnable(page: str) -> list[tuple[int, str, str, str]]:
    """(line, overrides, kind, text) of the page's runnable blocks, in order."""
    return [(line, (RUNNABLE.fullmatch(mark)["overrides"] or ""), kind, body)
            for line, mark, kind, body in code_blocks(page) if RUNNABLE.fullmatch(mark)]


RUN_PAGES = [page for page in PAGES if runnable(page)]
GUIDE = "docs/getting-started.md"  # the longest page: its own file (test_docs_run_guide.py), so that pytest-xdist's
# --dist loadfile can run it beside the others

def test_every_code_block_of_the_docs_is_run_or_says_which_tests_run_it():
    unmarked, unnamed = [], []
    for page in PAGES:
        for line, mark, kind, _ in code_blocks(page):
            reason = NOT_RUN.fullmatch(mark)
            if kind not in {"bash", "console", "python"} or not (RUNNABLE.fullmatch(mark) or reason):
                unmarked.append(f"{page}:{line}")
            elif reason:
                named = re.findall(r"tests/[\w/]+\.py", reason["reason"])
                if not named or not all((ROOT / path).is_file() for path in named):
                    unnamed.append(f"{page}:{line}: {reason['reason']}")
    assert not unmarked, f"code blocks without a runnable or not-run mark (or not bash/console/python): {unmarked}"
    assert not unnamed, f"not-run blocks that name no existing test file: {unnamed}"
    assert {"README.md", "docs/getting-started.md", "docs/posterior.md", "docs/samplers.md"} <= set(RUN_PAGES)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    return install_wheel(tmp_path_factory.mktemp("install"))


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> Path:
    return write_stand_ins(tmp_path_factory.mktemp("data"))


def _transcript(text: str) -> list[tuple[str, list[str]]]:
    """(command, the lines shown under it) of each ``$ command`` of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


def _files(folder: Path) -> dict[str, float]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


def _run_block(folder: Path, env: dict, where: str, kind: str, text: str) -> None:
    if kind in ("bash", "python"):
        command = [BASH, "-c", "set -euo pipefail\n" + text] if kind == "bash" else ["python", "-c", text]
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=580)
        assert done.returncode == 0, f"{where}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return
    for command, shown in _transcript(text):
        before = _files(folder)
        done = subprocess.run([BASH, "-c", command], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=300)
        printed = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        assert printed == [line for line in shown if line.strip()], f"{where}: $ {command}"
        assert _files(folder) == before, f"{where}: $ {command} changed files"


def run_page(installed: Path, stand_ins: Path, folder: Path, page: str) -> None:
    """Every runnable block of ``page``, in order, in ``folder``."""
    for line, overrides, kind, text in runnable(page):
        env = {**installed_env(installed), "CSG_EXTRA_OVERRIDES": overrides, "CSG_DATA": str(stand_ins)}
        _run_block(folder, env, f"{page} block at line {line}", kind, text)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", [page for page in RUN_PAGES if page != GUIDE])
def test_a_pages_runnable_blocks_run_as_written(installed, stand_ins, tmp_path, page):
    run_page(installed, stand_ins, tmp_path, page)
