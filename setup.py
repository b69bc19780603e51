"""The one thing pyproject.toml cannot say: the top-level ``configs/`` folder is the package ``csg.configs``.

The repository keeps ``configs/`` where a user of a clone looks for it; the wheel carries the same files as
``csg/configs/`` (package data mapped at build time: one copy of every file, nothing to keep in step), where
:mod:`csg.paths` finds them in an install. ``hydra_plugins/`` (a namespace package: no ``__init__.py``) is
installed beside ``csg`` so that Hydra finds the SLURM launcher from any folder.
"""

from setuptools import find_namespace_packages, setup

setup(
    packages=[*find_namespace_packages(include=["csg", "csg.*", "hydra_plugins"]), "csg.configs"],
    package_dir={"csg.configs": "configs"},
)
