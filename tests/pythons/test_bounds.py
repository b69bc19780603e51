"""pyproject states what is tested, no more and no less: each dependency's lower bound is the release that
constraints.txt pins (the suite's), requires-python names the Pythons that make test checks (tests/pythons/) and
make test-pythons measured (results/pythons.md), and the classifiers and the README say the same."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import ROOT
from tests.pythons.checking import check_pythons

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name.strip().lower())] = Version(version.strip())
    return pins


def _requirements() -> list[Requirement]:
    found = [Requirement(r) for r in PROJECT["dependencies"]]
    return found + [Requirement(r) for extra in PROJECT["optional-dependencies"].values() for r in extra]


def bound_problems(requirements: list[Requirement], pins: dict[str, Version]) -> list[str]:
    """Each requirement whose lower bound is not exactly the pinned release (or that admits no pin at all)."""
    wrong = []
    for requirement in requirements:
        name = re.sub(r"[-_.]+", "-", requirement.name.lower())
        lower = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==")]
        if name not in pins or lower != [pins[name]] or pins[name] not in requirement.specifier:
            wrong.append(f"{requirement} (constraints.txt: {pins.get(name)})")
    return wrong


def test_every_lower_bound_is_the_pinned_release():
    assert not bound_problems(_requirements(), _pins())


def test_the_check_catches_bounds_that_say_more_or_less_than_the_pins():
    pins = {"numpy": Version("2.4.6"), "torch": Version("2.13.0"), "hydra-core": Version("1.3.8")}
    assert bound_problems([Requirement(r) for r in ("numpy>=2.4.6", "torch>=2.13.0", "hydra-core>=1.3.8,<1.4")],
                          pins) == []
    bad = ["numpy>=1.24", "torch", "hydra-core>=1.3.8,<1.3.8", "scipy>=1.17.1"]  # below, none, excluded, unpinned
    assert bound_problems([Requirement(r) for r in bad], pins) == [
        "numpy>=1.24 (constraints.txt: 2.4.6)", "torch (constraints.txt: 2.13.0)",
        "hydra-core<1.3.8,>=1.3.8 (constraints.txt: 1.3.8)", "scipy>=1.17.1 (constraints.txt: None)"]


def test_requires_python_the_classifiers_and_the_readme_name_the_same_pythons():
    claimed = check_pythons.claimed_pythons()
    classified = [c.rsplit(" ", 1)[-1] for c in PROJECT["classifiers"] if re.fullmatch(r".*:: 3\.\d+", c)]
    assert classified == claimed
    said = "Python 3.11, 3.12 and 3.13"
    assert said in (ROOT / "README.md").read_text() and said in (ROOT / "docs" / "getting-started.md").read_text()
    assert ">= 3.10" not in (ROOT / "README.md").read_text()
    measured = (ROOT / "results" / "pythons.md").read_text()
    for version in claimed:
        assert re.search(rf"^\| {re.escape(version)}\.\d+ \| pass \|", measured, flags=re.M), version


def test_a_requires_python_without_an_upper_bound_names_no_pythons_to_check(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nrequires-python = ">=3.11"\n')
    with pytest.raises(ValueError, match="no bounded range"):
        check_pythons.claimed_pythons(tmp_path / "pyproject.toml")
    (tmp_path / "pyproject.toml").write_text('[project]\nrequires-python = ">=3.12,<3.14"\n')
    assert check_pythons.claimed_pythons(tmp_path / "pyproject.toml") == ["3.12", "3.13"]
