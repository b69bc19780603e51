"""Math rendered when the site is built, not in the reader's browser: MathML written into the HTML by latex2mathml.

The site is read where there is no network (air-gapped clusters): MathJax from a CDN would show raw LaTeX there.
Browsers render MathML themselves (MathML Core), so a page needs no script at all. Sphinx chooses how math is
written through a math renderer (``app.add_html_math_renderer``); this one converts each formula with
latex2mathml (a library made for the conversion). A formula it cannot convert fails the build, naming it, as a
broken link does: nothing reaches the page unrendered.
"""

from __future__ import annotations

from docutils import nodes
from sphinx.errors import ExtensionError


def _mathml(latex: str, display: str) -> str:
    from latex2mathml.converter import convert

    try:
        return convert(latex, display=display)
    except Exception as error:  # noqa: BLE001 - latex2mathml raises its own types for what it cannot read
        raise ExtensionError(f"csg_math: latex2mathml cannot convert {latex!r}: {error}") from None


def visit_math(self, node: nodes.Element) -> None:
    self.body.append(f'<span class="math">{_mathml(node.astext(), "inline")}</span>')
    raise nodes.SkipNode


def visit_math_block(self, node: nodes.Element) -> None:
    latex = node.astext()
    if node.get("nowrap") and latex.lstrip().startswith(r"\begin{"):  # MyST's amsmath: an environment as written
        latex = latex.strip()
    number = node.get("number")
    label = f'<span class="eqno">({number})</span>' if number else ""
    ids = f' id="{node["ids"][0]}"' if node.get("ids") else ""
    self.body.append(f'<div class="math"{ids}>{label}{_mathml(latex, "block")}</div>')
    raise nodes.SkipNode


def setup(app):
    app.add_html_math_renderer("mathml", (visit_math, None), (visit_math_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
