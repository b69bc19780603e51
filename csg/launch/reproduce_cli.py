"""``csg-reproduce``: the paper tables' driver, which lives with csg's research studies (``studies/reproduce.py``).

The studies are not in csg's wheel: they are the repository's ``studies/`` package, csg's first users. The command
runs them from a clone (started in its folder: ``python scripts/reproduce.py`` is the same) or from an install of
that folder (``pip install path/to/csg/studies``, the ``csg-studies`` distribution), and otherwise says so in one
line.
"""

from __future__ import annotations

import os
import sys

from csg.errors import CsgError

__all__ = ["console", "studies_driver"]

WHERE = ("csg-reproduce runs csg's studies (the paper tables' drivers), which are not part of csg's wheel: start it "
         "in a clone of csg (its studies/ folder), or install them: pip install path/to/csg/studies")


def studies_driver():
    """``studies.reproduce.main``: from an installed ``csg-studies``, else from the current folder (a clone)."""
    for attempt in ("installed", "here"):
        try:
            from studies.reproduce import main
        except ModuleNotFoundError as error:
            if error.name != "studies":
                raise
            if attempt == "installed":
                sys.path.insert(0, os.getcwd())
            continue
        return main
    missing = CsgError(WHERE)
    missing.exit_code = 2  # a usage error, as a refused command
    raise missing


def console() -> None:
    """``csg-reproduce``: the studies' driver in the current folder, its errors in one line."""
    from csg.launch.cli import run_or_exit

    run_or_exit(lambda: studies_driver()())


if __name__ == "__main__":
    console()
