"""csg's wheel on the newest Python it claims (3.13 on the machines csg is tested on), with the newest releases of
its dependencies (ArviZ 1.x among them): the smoke set, then the clone's tests that read ArviZ under that venv
(scripts/check_pythons.py's NEWEST_TESTS; make test-pythons runs the posterior, evaluation, sampler, likelihood and
own-loop tests there)."""

from __future__ import annotations

import pytest

from tests.pythons.checking import check_one, claimed


@pytest.mark.timeout(1800)
def test_the_wheel_installs_and_passes_the_smoke_set_and_the_arviz_tests_on_the_newest_python(tmp_path):
    version = claimed("newest")
    record = check_one(version, tmp_path, with_tests=True)
    tests = record["tests"]
    assert tests["failed"] == tests["errors"] == 0 and tests["passed"] >= 12
    assert all("needs a CUDA GPU" in skip for skip in tests["skips"]), tests["skips"]  # no other skip
