"""Where csg's files are: the one place every module asks.

``ROOT`` is the folder holding ``train.py`` and ``configs/`` (a clone, or the source of an editable install);
``CONFIGS`` is train.py's config folder; ``PAPER_TABLES`` the papers' published numbers shipped in the package.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
CONFIGS = ROOT / "configs"
TRAIN_PY = ROOT / "train.py"
PAPER_TABLES = PACKAGE / "resources" / "paper_tables.csv"
