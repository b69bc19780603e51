"""The ``likelihood`` group of a composed config, checked before torch is imported: a built-in name with its keys
(:func:`csg.likelihoods.settings.check_options`), or a user's ``_target_`` that imports."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from csg.components import has_target, locate, target_of
from csg.likelihoods.settings import check_options

__all__ = ["check_likelihood"]


def check_likelihood(cfg: DictConfig) -> None:
    """``likelihood``: a built-in name with its keys, or an importable ``_target_`` (a config without the group,
    a run saved before it, is categorical)."""
    node = cfg.get("likelihood")
    if has_target(node):
        locate(target_of(cfg, "likelihood._target_"), "likelihood._target_")
    elif node is not None:
        check_options(node.get("name"), {k: v for k, v in OmegaConf.to_container(node).items() if k != "name"})
