"""Issue 42: "A number quoted anywhere in README or docs comes from a committed file under results/ that a make
target writes."

Every number with a decimal point in the prose and tables of README.md and docs/*.md (fenced code blocks, inline
code and link targets left out) must appear as the same digit string, a whole number and not part of a longer one,
in a text file under results/ (*.md, *.csv) or in csg/resources/paper_tables.csv (the papers' published numbers,
which the results files set beside ours); "a +- b" must appear as a pair, both on one line of one such file. A sign
is not part of the digit string (the pages write -0.0729 and +0.0323 as the files do, or without the sign).
Numbers without a decimal point (counts, seeds, epochs, minutes) are not checked here: they are mostly constants of
a config, and coincide with some value in the result files too easily for the check to mean anything.

The files are read from the checkout (nothing under results/ is git-ignored, so a checkout holds the committed
ones). ALLOWED lists the few phrases whose numbers are not measurements and are in no results file, each with its
reason; every entry must still occur in a page (a stale entry fails).
"""

from __future__ import annotations

import re
import textwrap
from functools import cache

import pytest

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

ALLOWED: dict[str, str] = {
    r"\bPython 3\.1\d(?:(?:,| and| or) 3\.1\d)*": "Python versions (pyproject's requires-python), not measurements",
    r"\b3\.1\d(?:(?:,| and| or) 3\.1\d)+": "a list of Python versions, not measurements",
    r"\bSection \d+\.\d+": "a section number of a paper (e.g. ICSGLD's Section 4.1), not a quantity",
    r"\b0\.095 lr0": "(1 + cos(0.8 pi)) / 2: Eq. (1)'s step where the sampling stage starts (beta = 0.8), a constant",
    r"\b97\.5th percentile": "the quantile that defines the chain diagnostics' reference (csg/evaluation/diagnostics.py)",
}

NUMBER = r"(?<![\d.])\d+\.\d+(?!\.?\d)"  # 0.2221, 5.87; not a part of 2.11.0 or of 12.3456
PAIR = re.compile(rf"({NUMBER})\s*(?:\+-|±)\s*({NUMBER})")


def prose(text: str) -> str:
    """The page as a reader sees its prose and tables: fenced code blocks, inline code, link targets and the
    ALLOWED phrases blanked (line breaks kept, so that line numbers stay)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else line)
    text = "\n".join(lines)
    text = re.sub(r"`[^`]+`", lambda m: re.sub(r"[^\n]", " ", m[0]), text)  # inline code, also across a line break
    text = re.sub(r"\]\([^)\s]*\)", "] ", text)  # [text](target): the target
    for pattern in ALLOWED:
        text = re.sub(pattern, lambda m: " " * len(m[0]), text)
    return text


@cache
def corpus() -> tuple[str, ...]:
    """The text of every results file and of the papers' table: the Markdown first, then the CSVs from the
    smallest (the numbers the pages quote are mostly in the Markdown reports; the large CSVs are curves)."""
    files = [*ROOT.glob("results/**/*.md"), *ROOT.glob("results/**/*.csv")]
    files.append(ROOT / "csg" / "resources" / "paper_tables.csv")
    files.sort(key=lambda path: (path.suffix != ".md", path.stat().st_size, str(path)))
    return tuple(path.read_text(errors="replace") for path in files)


def _whole(number: str) -> str:
    """``number`` as a whole number: no digit or '.' just before it, no digit or '.<digit>' just after it."""
    literal = re.escape(number)  # first, so that the search runs as a fast literal scan
    return rf"{literal}(?<![\d.]{literal})(?!\.?\d)"


def _held(pattern: str, results: tuple[str, ...]) -> bool:
    search = re.compile(pattern).search
    return any(search(text) for text in results)


def unsupported(page_text: str, results: tuple[str, ...]) -> list[str]:
    """The numbers (and "a +- b" pairs) of a page that none of the texts ``results`` holds, as 'line N: number'."""
    found = []
    text = prose(page_text)
    for m in re.finditer(NUMBER, text):
        if not _held(_whole(m[0]), results):
            found.append(f"line {text.count(chr(10), 0, m.start()) + 1}: {m[0]}")
    for m in PAIR.finditer(text):
        mean, error = _whole(m[1]), _whole(m[2])
        if not _held(rf"{mean}[^\n]*{error}|{error}[^\n]*{mean}", results):
            found.append(f"line {text.count(chr(10), 0, m.start()) + 1}: {m[1]} +- {m[2]} (not as a pair)")
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_decimal_number_of_the_page_is_in_a_results_file(page):
    missing = unsupported(page.read_text(), corpus())
    assert not missing, f"{page.relative_to(ROOT)}: numbers in no results file (quote the file, or allow-list " \
                        f"a constant with its reason): {missing}"


def test_a_made_up_number_is_caught_and_code_and_link_targets_are_not_read():
    results = ("| ensemble | 5.87 +- 0.09 | 0.2221 |\n| other | 0.99 |\nversion 2.11.0\n",)
    page = textwrap.dedent("""
        Our error is 5.87 +- 0.09 %, our NLL 0.2221 and 12.345 % of something else; 5.87 +- 0.99 is no pair.
        Part of a longer number is not the number: 0.222 and 2.11 are in no file.
        ```bash
        make demo   # 98.765 in a code block
        ```
        `lr0=0.4321` inline, [a link](results/6.543.md), Python 3.11 and 3.13.
        """).lstrip("\n")
    assert unsupported(page, results) == ["line 1: 12.345", "line 2: 0.222", "line 2: 2.11",
                                          "line 1: 5.87 +- 0.99 (not as a pair)"]
    assert unsupported("an error of 98765.4321 %", corpus()) == ["line 1: 98765.4321"]  # the real results too


def test_the_check_reads_the_pages_numbers_and_its_allow_list_is_current():
    readme = prose((ROOT / "README.md").read_text())
    assert {"5.56", "0.2249", "0.906"} <= set(re.findall(NUMBER, readme))  # the embedded default's numbers
    assert len(corpus()) > 50 and sum(map(len, corpus())) > 100_000
    texts = [page.read_text() for page in PAGES]
    stale = [pattern for pattern in ALLOWED if not any(re.search(pattern, text) for text in texts)]
    assert not stale, stale

