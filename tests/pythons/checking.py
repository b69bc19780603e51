"""What the two Python checks share: scripts/check_pythons.py run for one Python, as make test-pythons runs it but
with ``--installer uv``: the same newest releases from the same index, installed from uv's cache by hard links where
pip unpacks a CUDA build of torch (several GB) on every run (results/pythons.md gives pip's install times).

A Python that is not on this machine fails the check; ``CSG_SKIP_PYTHONS=1`` skips it instead, with the reason (a
machine that lacks the interpreters or the package index, by choice)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import check_pythons  # noqa: E402

LIMIT_S = 1700


def smoke_tests() -> int:
    """How many tests tests/pythons/smoke_set.py holds: every one must pass."""
    return check_pythons.SMOKE.read_text().count("\ndef test_")


def claimed(which: str) -> str:
    """The oldest or the newest Python that pyproject's requires-python admits."""
    versions = check_pythons.claimed_pythons()
    return versions[0] if which == "oldest" else versions[-1]


def check_one(version: str, tmp_path: Path, with_tests: bool) -> dict:
    """The check of ``version``, whose smoke set must pass whole: its record. Killed whole (its process group) past :data:`LIMIT_S`, its venv then
    removed here."""
    if os.environ.get("CSG_SKIP_PYTHONS") == "1":
        pytest.skip("CSG_SKIP_PYTHONS=1: the check of csg's wheel on other Pythons is switched off")
    if check_pythons.find_python(version) is None:
        pytest.fail(f"no Python {version} on this machine (python{version} on PATH or under $PYENV_ROOT/versions); "
                    "install it, or set CSG_SKIP_PYTHONS=1 to skip this check")
    out, work = tmp_path / "record.json", tmp_path / "work"
    command = [sys.executable, str(ROOT / "scripts" / "check_pythons.py"), "--python", version,
               *(["--tests", version] if with_tests else []), "--json", str(out), "--work", str(work),
               "--installer", "uv"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        shutil.rmtree(work / f"venv-{version}", ignore_errors=True)
        pytest.fail(f"the check of Python {version} ran past {LIMIT_S} s")
    records = json.loads(out.read_text())["records"] if out.is_file() else []
    detail = "\n".join([stdout[-3000:], stderr[-3000:],
                        *(r.get(step, {}).get("tail", "") for r in records for step in ("smoke", "tests")),
                        *(f for r in records for step in ("smoke", "tests") for f in r.get(step, {}).get("failures", []))])
    assert process.returncode == 0 and len(records) == 1, detail
    assert not (work / f"venv-{version}").exists()  # several GB: removed when its Python is done
    record = records[0]
    assert record["python_full"].startswith(version + ".") and record["passed"]
    assert record["smoke"]["failed"] == record["smoke"]["errors"] == record["smoke"]["skipped"] == 0
    assert record["smoke"]["passed"] == smoke_tests() >= 6  # every test of tests/pythons/smoke_set.py
    return record
