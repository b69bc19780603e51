#!/usr/bin/env python
"""Draw a notMNIST-style out-of-distribution set: letters A-J in matplotlib's fonts, 28 x 28 PNG.

    python scripts/make_letters.py data/generated_notmnist --per-letter 200

notMNIST itself (Bulatov 2011) is glyphs of many fonts; where it cannot be downloaded this is the
same construction with the ~20 fonts that every matplotlib ships.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from csg.data.notmnist import render_letters  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-letter", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    render_letters(args.out, args.per_letter, args.seed)
    print(f"wrote {10 * args.per_letter} letters to {args.out}")


if __name__ == "__main__":
    main()
