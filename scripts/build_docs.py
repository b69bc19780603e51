#!/usr/bin/env python
"""Build the documentation site: ``docs/`` and the committed result files (``results/**/*.md`` and their
figures) into ``site/`` with Sphinx (``make docs``).

    python scripts/build_docs.py [--out site] [--strict]

The result files join the site as pages (the tables and reports the guide links to), so the sources are
assembled in a staging folder under ``build/`` first; nothing is written into ``docs/`` or ``results/``.
``--strict`` turns every warning into an error: a broken link, a reference to a name that does not exist, a
public name without a docstring on an API page (``tests/test_docs.py`` builds it so in ``make test``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT_FILES = ("*.md", "*.png", "*.svg")


def stage(into: Path) -> Path:
    """``docs/`` with ``results/`` inside it (its Markdown and figures), in ``into``; returns the source folder."""
    source = into / "docs"
    shutil.copytree(ROOT / "docs", source, ignore=shutil.ignore_patterns("_build", "__pycache__"))
    for pattern in RESULT_FILES:
        for path in (ROOT / "results").rglob(pattern):
            target = source / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    return source


def build(out: Path, strict: bool, jobs: str = "auto") -> int:
    """Sphinx's exit status of an HTML build into ``out`` (quiet: Sphinx prints only warnings and errors), in
    ``jobs`` processes (Sphinx's ``-j``)."""
    import os

    from sphinx.cmd.build import build_main

    os.environ["CSG_REPOSITORY"] = str(ROOT)

    (ROOT / "build").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "build", prefix="docs-") as folder:
        source = stage(Path(folder))
        args = ["-q", "-b", "html", "-j", jobs, "-d", str(Path(folder) / "doctrees"), str(source), str(out)]
        if strict:
            args[:0] = ["-W", "--keep-going", "-n"]
        return build_main(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "site", help="the HTML site (default: site/)")
    parser.add_argument("--strict", action="store_true", help="every warning is an error")
    parser.add_argument("--jobs", default="auto", help="Sphinx's processes (-j): auto (one per core) or a number; "
                        "1 where the cores are busy (the test suite: it saves the processes' pickling)")
    args = parser.parse_args(argv)
    try:
        import myst_parser  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError:
        print("error: the docs extra is not installed: pip install -e '.[docs]' (make docs installs it)",
              file=sys.stderr)
        return 2
    status = build(args.out, args.strict, args.jobs)
    if status == 0:
        print(f"docs: wrote {args.out / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
