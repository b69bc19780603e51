"""What pyproject.toml cannot say.

- The top-level ``configs/`` folder is the package ``csg.configs``: the repository keeps ``configs/`` where a user of
  a clone looks for it; the wheel carries the same files as ``csg/configs/`` (package data mapped at build time: one
  copy of every file, nothing to keep in step), where :mod:`csg.paths` finds them in an install.
- ``hydra_plugins/`` (a namespace package: no ``__init__.py``) is installed beside ``csg`` so that Hydra finds the
  SLURM launcher from any folder.
- Two guards are armed at interpreter start: the torchvision guard (``csg/_torchvision_compat.py``), so that
  ``import timm`` or ``import torchvision`` works before ``import csg`` too, and the shadow check
  (``csg/_shadow_check.py``), which names a package or module called ``csg`` that hides the installed one. The wheel
  carries a copy of each module at its top level (importable without importing csg) and a ``.pth`` line that arms
  them, as setuptools' ``distutils-precedence.pth`` and coverage's ``.pth`` do; they import nothing until
  torchvision or csg is imported. Editable installs (a clone's ``make install``) skip them: there ``import csg``
  arms the torchvision guard, and the clone is the package.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

STARTUP = {"_csg_torchvision_guard": "csg/_torchvision_compat.py", "_csg_shadow_check": "csg/_shadow_check.py"}


class BuildPyWithStartupGuard(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for module, source in STARTUP.items():
            self.copy_file(source, str(Path(self.build_lib) / f"{module}.py"))
        arm = "; ".join(f"{module}.install()" for module in STARTUP)
        (Path(self.build_lib) / "csg-startup.pth").write_text(f"import {', '.join(STARTUP)}; {arm}\n")


setup(
    packages=[*find_namespace_packages(include=["csg", "csg.*", "hydra_plugins"]), "csg.configs"],
    package_dir={"csg.configs": "configs"},
    cmdclass={"build_py": BuildPyWithStartupGuard},
)
