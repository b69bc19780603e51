"""csg's wheel on the oldest Python it claims, with the newest releases of its dependencies that Python gets
(scripts/check_pythons.py: a fresh venv, pip install with no constraints, the smoke set from a folder outside the
clone). The newest Python: test_newest_python.py; both in make test, in files of their own so that two workers
run them side by side."""

from __future__ import annotations

import pytest

from tests.pythons.checking import check_one, claimed


@pytest.mark.timeout(1800)
def test_the_wheel_installs_and_passes_the_smoke_set_on_the_oldest_python(tmp_path):
    version = claimed("oldest")
    record = check_one(version, tmp_path, with_tests=False)
    assert record["versions"]["torch"] != "-" and "tests" not in record
