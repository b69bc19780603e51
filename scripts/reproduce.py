#!/usr/bin/env python
"""Regenerate a paper table or figure in the repository: ``csg-reproduce`` (studies/reproduce.py, whose
``--help`` says everything) working in the clone, whose results/ holds the committed tables.

    python scripts/reproduce.py table1 [--scale smoke] [--launcher slurm] [--seeds 0,1,2] [KEY=VALUE ...]
    python scripts/reproduce.py table1 --report-only [--runs multirun/table1/<date>]

Every `make <target>` is this call (`make -n <target>` shows it).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from csg.launch.cli import run_or_exit  # noqa: E402
from studies.reproduce import main  # noqa: E402

if __name__ == "__main__":
    run_or_exit(lambda: main(workdir=ROOT))
