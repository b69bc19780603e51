"""Sphinx extension of csg's site: the configuration reference generated from ``configs/``, and a warning (an
error under ``-W``) for every public name of the API pages that has no docstring."""

from __future__ import annotations

from pathlib import Path

import yaml
from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.util import logging

LOG = logging.getLogger(__name__)


def _leaves(tree, prefix=""):
    """``(dotted key, value)`` of every leaf of a YAML mapping, in file order (``defaults`` left out)."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            if prefix == "" and key == "defaults":
                continue
            yield from _leaves(value, f"{prefix}{key}." if key != "_self_" else prefix)
    else:
        yield prefix.rstrip("."), tree


def _text(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


class ConfigReference(Directive):
    """``.. csg-config-reference::``: per config group, every option and every key it sets, with its value."""

    has_content = False

    def run(self):
        sections = []
        configs = Path(self.state.document.settings.env.config.csg_configs)
        top = configs / "config.yaml"
        sections.append(self._table("configs/config.yaml", [("config", top)]))
        for group in sorted(p for p in configs.rglob("*") if p.is_dir() and any(p.glob("*.yaml"))):
            name = str(group.relative_to(configs))
            options = [(p.stem, p) for p in sorted(group.glob("*.yaml"))]
            sections.append(self._table(name, options))
        return sections

    def _table(self, title: str, options) -> nodes.section:
        section = nodes.section(ids=[nodes.make_id(f"config-{title}")], names=[nodes.fully_normalize_name(title)])
        section += nodes.title(text=title)
        table = nodes.table()
        group = nodes.tgroup(cols=3)
        table += group
        for width in (2, 4, 6):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        group += head
        head += self._row(["option", "key", "value"])
        body = nodes.tbody()
        group += body
        for option, path in options:
            tree = yaml.safe_load(path.read_text()) or {}
            rows = list(_leaves(tree))
            defaults = tree.get("defaults") if isinstance(tree, dict) else None
            if defaults:
                rows.insert(0, ("defaults", ", ".join(_text(d) if not isinstance(d, dict) else
                                                      ", ".join(f"{k}: {_text(v)}" for k, v in d.items())
                                                      for d in defaults)))
            for i, (key, value) in enumerate(rows or [("", "")]):
                body += self._row([option if i == 0 else "", key, _text(value)])
        section += table
        return section

    @staticmethod
    def _row(cells) -> nodes.row:
        row = nodes.row()
        for text in cells:
            entry = nodes.entry()
            entry += nodes.paragraph(text="") if text == "" else nodes.paragraph("", "", nodes.literal(text=text))
            row += entry
        return row


def _undocumented(app, what, name, obj, options, lines):
    """A public name on an API page without a docstring is a warning (an error in the strict build)."""
    import sys

    parent = name.rsplit(".", 1)[0]
    if what in ("class", "function", "exception") and parent in sys.modules and getattr(obj, "__module__", parent) != parent:
        return  # imported into the module, not defined there: autodoc leaves it out
    if not any(line.strip() for line in lines) and not name.rsplit(".", 1)[-1].startswith("_"):
        LOG.warning("undocumented public name on an API page: %s (%s)", name, what, type="csg", subtype="undocumented")


def _resolve(name: str):
    """The object that dotted ``name`` names, imported; None when it does not exist."""
    import importlib

    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attribute in parts[split:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            return None
        return obj
    return None


def _code_only(app, env, node, contnode):
    """A reference to one of csg's objects that exists in the code but is not on the site (``csg.engine.step.single``, a
    private helper's type) is shown as code, unlinked; a reference to a name that does not exist stays an error."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    module, cls = node.get("py:module") or "", node.get("py:class") or ""
    candidates = [target]
    if module:
        candidates += [f"{module}.{cls}.{target}" if cls else "", f"{module}.{target}"]
    from sphinx.ext.autodoc.mock import mock

    with mock(app.config.autodoc_mock_imports):  # a docs-only install: the training stack mocked, as for autodoc
        for name in filter(None, candidates):
            if name.split(".")[0] in ("csg", "studies") and _resolve(name) is not None:
                return contnode
    return None


def _results_inside(app, docname, source):
    """The pages link the result files as ``../results/...`` (right on GitHub, beside docs/); in the site those
    files are pages under ``results/`` (scripts/build_docs.py stages them there)."""
    if not docname.startswith("results/"):
        source[0] = source[0].replace("](../results/", "](results/")


def setup(app):
    app.connect("source-read", _results_inside)
    app.connect("missing-reference", _code_only)
    app.add_directive("csg-config-reference", ConfigReference)
    app.connect("autodoc-process-docstring", _undocumented)
    app.add_config_value("csg_configs", "", "env")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
