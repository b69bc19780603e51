#!/usr/bin/env python
"""csg-tune in a clone: python scripts/tune.py ... runs csg.launch.tune_cli (its --help says what it does)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from csg.launch.tune_cli import __doc__, main  # noqa: E402,F401 - the command's help and entry point

if __name__ == "__main__":
    main(sys.argv[1:])
