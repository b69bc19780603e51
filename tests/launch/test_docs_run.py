"""The documentation's runnable blocks run as written, from csg's wheel installed into a fresh folder.

A block is marked by the comment line ``<!-- runnable -->`` (or ``<!-- runnable: KEY=VALUE ... -->``, small-budget
overrides that every ``csg-train`` of the block gets through ``CSG_EXTRA_OVERRIDES``) right before its fence:

- a ``bash`` block runs as one bash script (``set -euo pipefail``), in a fresh folder, with the installed commands
  first on ``PATH`` (tests/conftest.py's ``installed_env``): every command must succeed;
- a ``console`` block is a transcript: each ``$ command`` runs in a fresh folder, and what it prints (stdout, then
  stderr) must be the lines shown under it, exactly; it changes no file there;
- a ``python`` block runs as one script (``python -c``), in a fresh folder: it must succeed (its budget is its own:
  ``csg.train`` takes the overrides the block gives it).

A page whose block fails fails the suite, naming the page and the block.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, install_wheel, installed_env

PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
MARKED = re.compile(r"^<!-- runnable(?::\s*(?P<overrides>.*?))?\s*-->\n```(?P<kind>\w*)\n(?P<body>.*?)^```",
                    re.S | re.M)


def runnable_blocks() -> list[tuple[str, int, str, str, str]]:
    """(page, block number on the page, overrides, kind, text) of every marked block."""
    found = []
    for page in PAGES:
        for number, match in enumerate(MARKED.finditer((ROOT / page).read_text())):
            found.append((page, number, match["overrides"] or "", match["kind"], match["body"]))
    return found


BLOCKS = runnable_blocks()
BASH = shutil.which("bash") or "/bin/bash"  # by its path: the user's PATH here has no SLURM folder (/usr/bin)


def test_the_marked_blocks_are_bash_scripts_or_transcripts():
    assert len(BLOCKS) >= 3, BLOCKS  # the marks are where the pages say they are
    assert {kind for _, _, _, kind, _ in BLOCKS} <= {"bash", "console", "python"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    return install_wheel(tmp_path_factory.mktemp("install"))


def _transcript(text: str) -> list[tuple[str, list[str]]]:
    """(command, the lines shown under it) of each ``$ command`` of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page, number, overrides, kind, text", BLOCKS,
                         ids=[f"{page}#{number}" for page, number, *_ in BLOCKS])
def test_a_runnable_block_runs_as_written(installed, tmp_path, page, number, overrides, kind, text):
    env = {**installed_env(installed), "CSG_EXTRA_OVERRIDES": overrides}
    if kind == "python":
        done = subprocess.run([sys.executable, "-c", text], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=580)
        assert done.returncode == 0, f"{page} block {number}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return
    if kind == "bash":
        script = "set -euo pipefail\n" + text
        done = subprocess.run([BASH, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=580)
        assert done.returncode == 0, f"{page} block {number}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return
    for command, shown in _transcript(text):
        folder = tmp_path / f"step{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        done = subprocess.run([BASH, "-c", command], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=300)
        printed = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        assert printed == [line for line in shown if line.strip()], f"{page} block {number}: $ {command}"
        assert not any(folder.iterdir()), f"{page} block {number}: $ {command} wrote {list(folder.iterdir())}"
