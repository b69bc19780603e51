"""Where csg's files are: the one place every module asks.

``CONFIGS`` is the config folder of ``csg-train`` / ``python -m csg`` / ``train.py``: ``csg/configs/`` in an
installed wheel (the build maps the repository's ``configs/`` there: setup.py), else the repository's top-level
``configs/`` (a clone, or an editable install, whose source is the clone). ``ROOT`` is the folder holding
``csg/``: the clone (with ``train.py``, ``scripts/`` and ``results/``), or ``site-packages`` of an install.
``PAPER_TABLES`` the papers' published numbers shipped in the package.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
CONFIGS = PACKAGE / "configs" if (PACKAGE / "configs" / "config.yaml").is_file() else ROOT / "configs"
TRAIN_PY = ROOT / "train.py"
PAPER_TABLES = PACKAGE / "resources" / "paper_tables.csv"
