"""Name the folder that shadows an installed csg, at the ``import csg`` it spoils.

Python puts the folder a script or ``python -c`` / ``python -m`` runs in before site-packages, so a package named
``csg`` there (a project's own ``csg/__init__.py``) or a ``csg.py`` is imported instead of the installed package
(a folder without ``__init__.py`` is not: a regular package anywhere on the path wins), and the first use fails
far from the cause (``module 'csg' has no attribute 'train'``). csg's wheel carries a copy of this module at
its top level (``_csg_shadow_check.py``) and arms it at interpreter start from its ``.pth`` line (setup.py): at the
first ``import csg`` it finds the package as Python would and, when that is not the installed csg beside it and not
a csg checkout either (no ``csg/__main__.py``: a clone on ``PYTHONPATH`` is left alone), prints one line naming
it, then steps aside. It imports nothing at interpreter start; the import itself is unchanged.
"""

from __future__ import annotations

import sys


class _ShadowCheck:
    """A finder that only looks: at the first ``import csg`` it reports a shadowing folder, then steps aside."""

    csg_shadow_check = True

    def __init__(self, installed: str) -> None:
        self.installed = installed

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "csg":
            return None
        import importlib.util
        from pathlib import Path

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("csg")
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        found = folders[0] if folders else (spec.origin if spec is not None else None)  # a package, or csg.py
        if found and Path(found).resolve() != Path(self.installed).resolve() \
                and not (Path(found) / "__main__.py").is_file():
            print(f"warning: import csg found {found}, not the installed csg ({self.installed}); rename it or run "
                  "Python elsewhere", file=sys.stderr)
        return spec


def install(installed: str | None = None) -> None:
    """Arm the check for the csg installed at ``installed`` (default: the ``csg`` folder beside this module's copy
    in site-packages); a no-op once csg is imported or the check is armed."""
    if "csg" in sys.modules or any(getattr(f, "csg_shadow_check", False) for f in sys.meta_path):
        return
    import os

    sys.meta_path.insert(0, _ShadowCheck(installed or os.path.join(os.path.dirname(os.path.abspath(__file__)), "csg")))
