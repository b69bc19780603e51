"""Sphinx configuration of csg's documentation site (``make docs`` builds it into ``site/``).

Sphinx rather than MkDocs: csg's docstrings are reStructuredText (``:math:``, ``.. math::``, ``:class:``
cross-references, Google-style ``Args:`` sections), which autodoc and napoleon render as written, and
``-W -n`` turns a broken link or reference into an error. The pages are Markdown (MyST), so they read the
same on GitHub.
"""

import importlib.util
import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPOSITORY = Path(os.environ.get("CSG_REPOSITORY", DOCS.parent))  # scripts/build_docs.py builds from a staged copy
sys.path[:0] = [str(REPOSITORY), str(DOCS / "_ext")]
csg_configs = str(REPOSITORY / "configs")

project = "csg"
author = "the csg developers"
copyright = "2026, the csg developers"
release = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "csg_math",  # formulas as MathML written at build time: the site needs no network (docs/_ext/csg_math.py)
    "csg_docs",
]
html_math_renderer = "mathml"

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
myst_url_schemes = ["http", "https", "mailto"]

# every reference to csg's own objects must resolve; external types (torch, numpy, ...) are not linked
nitpicky = True
nitpick_ignore_regex = [
    ("py:.*", r"(torch|numpy|np|pandas|pd|omegaconf|hydra|scipy|arviz|lightning|collections|typing|pathlib|os|"
              r"concurrent|contextlib|enum|dataclasses|abc)(\..*)?"),
    ("py:.*", r"(nn\..*|Path|Tensor|DictConfig|Any|Callable|Iterable|Iterator|Sequence|Mapping|Generator|Optional|"
              r"Union|optional|T|Module|Optimizer|DataLoader|Dataset)"),
    ("py:class", r"(int|float|str|bool|dict|list|tuple|None|object|type)"),
]

# A docs-only install (docs/requirements.txt) has no training stack: autodoc reads csg's modules with these mocked
# (Sphinx's autodoc_mock_imports); where they are installed, nothing is mocked.
TRAINING_STACK = ("torch", "torchvision", "timm", "torchmetrics", "numpy", "pandas", "scipy", "sklearn", "arviz",
                  "matplotlib", "tqdm", "mlxtend", "wandb", "submitit", "safetensors", "lightning")


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


autodoc_mock_imports = [name for name in TRAINING_STACK if not _installed(name)]
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = "csg"
html_static_path = [str(REPOSITORY / "docs" / "_static")]
html_css_files = ["csg.css"]  # wide tables and code scroll instead of being clipped
