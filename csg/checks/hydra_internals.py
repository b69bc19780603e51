"""The one place csg uses Hydra's and OmegaConf's internals: what Hydra 1.3 and OmegaConf 2.3 give no public API
for. Each function says what it needs and why; every other module uses their public APIs (``hydra.compose``,
``initialize_config_dir``, ``OverridesParser``, ``OmegaConf.select``, ...). tests/test_layout.py holds every
import of ``hydra._internal`` and every call of a private node method to this module: a Hydra or OmegaConf
upgrade that moves them breaks here only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["args_parser", "raw_section", "search_also"]


def args_parser():
    """Hydra's argument parser of an ``@hydra.main`` command line (its flags and their spellings):
    ``hydra._internal.utils.get_args_parser``, which has no public equivalent."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser()


def search_also(first: str, after: list[str]) -> None:
    """Hydra (GlobalHydra) searching ``first`` then ``after``: as ``@hydra.main(config_path=first)`` with
    ``--config-dir`` (Hydra's own ``_run_hydra`` prepends that folder before the ``schema`` entry). Hydra's
    compose API takes one folder, and a primary config (``config.yaml``) found only in a ``hydra.searchpath``
    folder is not found, so the search path is made with Hydra's internal constructor."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra

    search_path = create_config_search_path(first)
    for folder in after:
        search_path.prepend(provider="command-line", path=f"file://{folder}", anchor=SearchPathQuery(provider="schema"))
    GlobalHydra.instance().clear()
    Hydra.create_main_hydra2(task_name="app", config_search_path=search_path)


def raw_section(cfg: Any, section: str) -> str | None:
    """What a composed config holds at the top-level ``section``, without resolving it: ``None`` where it is absent,
    a mapping or null, else ``"a list"`` or ``"the value ..."``. OmegaConf's public API resolves a
    node (an interpolation would fail first) and has no way to read an unresolved value: its node methods do."""
    from omegaconf import DictConfig, OmegaConf

    node = cfg._get_node(section) if isinstance(cfg, DictConfig) and section in cfg else None
    if node is None or isinstance(node, DictConfig) or node._is_none():
        return None
    return "a list" if OmegaConf.is_list(node) else f"the value {node._value()!r}"
