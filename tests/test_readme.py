"""The README names only modules and files that exist, and every make target it shows is in the Makefile."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_every_path_the_readme_names_exists():
    named = set(re.findall(r"(?<![\w/.])((?:csg|scripts|configs)/[\w/.]*[\w/])", README))
    assert len(named) > 30  # the layout and "How it fits together" name dozens
    missing = sorted(p for p in named if not (ROOT / p).exists() and "<" not in p)
    assert not missing, missing


def test_every_make_target_in_the_readme_exists():
    makefile = (ROOT / "Makefile").read_text()
    shown = set(re.findall(r"`make ([a-z][\w-]*)", README))
    defined = set(re.findall(r"^([\w$() -]+):", makefile, flags=re.M))
    names = {word for line in defined for word in line.split()}
    for variable in re.findall(r"^(\w+_TARGETS) := (.*)$", makefile, flags=re.M):
        names |= set(variable[1].split())
    assert shown and not sorted(shown - names), sorted(shown - names)
