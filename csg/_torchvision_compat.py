"""Make ``import torchvision`` work with a CPU-only torch and a CUDA torchvision wheel.

torchvision 0.28 on PyPI is a CUDA build. Next to the CPU build of torch its
compiled extension ``torchvision/_C.so`` does not load, so the
``torchvision::nms`` and ``torchvision::qnms`` operators are never defined, and
torchvision's own fake-tensor registrations for them abort the import with
``RuntimeError: operator torchvision::nms does not exist`` (pytorch/vision
issue 9085). ``timm`` and ``torchmetrics`` import torchvision, so they fail too.

:func:`install` (called by ``import csg``, and at interpreter start by the ``.pth`` line of csg's wheel,
which carries this module as ``_csg_torchvision_guard``: setup.py) puts a finder on
``sys.meta_path`` that acts at the first ``import torchvision``, whoever
imports it: it tries to load the extension exactly as torchvision does, and
only if that fails does it define the two missing operator *schemas* (no
kernels) through :mod:`torch.library`. Datasets, transforms and models then
work; ``torchvision.ops`` kernels and ``torchvision.io`` decoding stay
unavailable, as they are without the extension anyway. On a normal install
(matching wheels, GPU machines) the extension loads and nothing is patched.
Nothing is imported until torchvision itself is.
"""

from __future__ import annotations

import sys

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library = None  # the torch.library.Library that holds the schemas; must stay referenced
patched = False  # True once the schemas had to be defined


def _extension_loads(package_dir) -> bool:  # a pathlib.Path (imported where torchvision is)
    import torch

    for path in sorted(package_dir.glob("_C*.so")) + sorted(package_dir.glob("_C*.pyd")):
        try:
            torch.ops.load_library(str(path))
            return True
        except (OSError, ImportError):
            return False
    return False


def _define_missing_schemas() -> None:
    global _library, patched
    import torch

    _library = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _SCHEMAS:
        name = schema.split("(", 1)[0]
        try:
            torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
        except RuntimeError:
            _library.define(schema)
    patched = True


class _Guard:
    """Runs the check once, at the first import of torchvision, then steps aside. A finder needs only
    ``find_spec``: no importlib.abc base class, whose import (with importlib.util's) costs ~40 ms at every
    interpreter start of a wheel's environment."""

    csg_torchvision_guard = True  # one guard, whichever copy armed it (the wheel's startup copy or csg's)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torchvision":
            return None
        import importlib.util  # here, like every import of this module's: not at interpreter start

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torchvision")
        if spec is not None and spec.submodule_search_locations:
            from pathlib import Path

            if not _extension_loads(Path(next(iter(spec.submodule_search_locations)))):
                _define_missing_schemas()
        return spec


def install() -> None:
    """Arm the guard (idempotent; a no-op once torchvision is imported)."""
    if "torchvision" in sys.modules or any(getattr(f, "csg_torchvision_guard", False) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Guard())


def ensure_torchvision():
    """Import and return :mod:`torchvision`, with the guard armed."""
    install()
    import torchvision

    return torchvision
