"""csg's wheel on the newest Python it claims (3.13 on the machines csg is tested on), with the newest releases of
its dependencies (ArviZ 1.x among them): the smoke set, then the clone's tests/posterior and tests/evaluation under
that venv (scripts/check_pythons.py)."""

from __future__ import annotations

import pytest

from tests.pythons.checking import check_one, claimed


@pytest.mark.timeout(1800)
def test_the_wheel_installs_and_passes_the_smoke_set_and_the_posterior_tests_on_the_newest_python(tmp_path):
    version = claimed("newest")
    record = check_one(version, tmp_path, with_tests=True)
    tests = record["tests"]
    assert tests["failed"] == tests["errors"] == 0 and tests["passed"] >= 150
    assert all("needs a CUDA GPU" in skip for skip in tests["skips"]), tests["skips"]  # no other skip
