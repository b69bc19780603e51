"""What a :class:`~csg.posterior.posterior.Posterior` knows of its run beyond the weights: each member's cycle
(:func:`member_cycles`), and the run's data, read from the root its config names or from the caller's own
(:meth:`Posterior.load(..., data_root=...) <csg.posterior.posterior.Posterior.load>`: :func:`checked_data_root`,
:func:`data_config`, :func:`run_data`, :func:`run_ood_loader`).

The data's root is checked before anything is read (:func:`csg.checks.saved.check_run_data`): never inside the run
directory (or posterior file), and a data set read by unpickling (CIFAR's python-pickle batches) only from a root
the caller named, ``data_root``, never from one the run's config names (unless ``trust_code``).
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any

from csg.errors import ConfigError

__all__ = ["checked_data_root", "data_config", "given_keys", "member_cycles", "run_data", "run_head", "run_ood_loader"]

# a member's name: a sample file (samples/[chainNN/]sample_<index>_cycle<cycle>_epoch<epoch>.pt, as
# csg.engine.samples.SampleStore names it) or a cyclical-SWAG draw (csg.posterior.evaluate)
_CYCLE_OF = re.compile(r"(?:chain\d{2,}/)?sample_\d{4,}_cycle(\d{2,})_epoch\d{4,}\.pt"
                       r"|swag_chain\d{2,}_cycle(\d{2,})_draw\d{2,}")


def member_cycles(names: list[str]) -> list[int | None]:
    """The cycle (0-based) of each member, as its name records it: a run's sample file
    (``chain01/sample_0003_cycle01_epoch0040.pt``: 1) or cyclical-SWAG draw (``swag_chain00_cycle02_draw00``: 2);
    None for any other name (the members of your own state dicts)."""
    cycles: list[int | None] = []
    for name in names:
        match = _CYCLE_OF.fullmatch(str(name))
        cycles.append(int(match.group(1) or match.group(2)) if match else None)
    return cycles


def checked_data_root(data_root: str | os.PathLike | None) -> str | None:
    """``Posterior.load``'s ``data_root`` as an absolute path (``~`` expanded), or None; a one-line ConfigError (key
    ``data_root``) for a value that is not a folder's path, or is an interpolation."""
    if data_root is None:
        return None
    root = os.fspath(data_root) if isinstance(data_root, (str, os.PathLike)) else None
    if not isinstance(root, str) or not root.strip() or "${" in root:
        raise ConfigError("data_root", str(data_root)[:120], "None, or the path (a str or pathlib.Path) of the folder "
                          "to read the run's data set from, not an interpolation")
    return os.path.abspath(os.path.expanduser(root))


def data_config(cfg: Any, data_root: str | None) -> Any:
    """The config a run's data are built from: ``cfg`` (the run's), or a copy of it whose ``data.root`` is the caller's
    ``data_root`` (checked: :func:`checked_data_root`). A ``data_root`` for a posterior without a run's config, or for
    a data set that reads no root (no ``data.root`` key: mnist5k, a user's own data), is a one-line ConfigError."""
    if data_root is None:
        return cfg
    if cfg is None:
        raise ConfigError("data_root", data_root, "None for a posterior without a run's config (of your own state "
                          "dicts: it has no run data; pass your loaders to evaluate)")
    if "root" not in cfg.data.keys():
        raise ConfigError("data_root", data_root, f"None for data={cfg.data.get('name')}, which reads no data root "
                          "(its config has no data.root)")
    cfg = copy.deepcopy(cfg)  # a run's config read back as data: neither struct nor read-only
    cfg.data.root = data_root
    return cfg


def given_keys(data_root: str | None) -> tuple[str, ...]:
    """The data keys the caller set (:func:`csg.checks.saved.check_run_data`'s ``given``): ``data.root`` with a
    ``data_root``, under which CIFAR's pickles may be read."""
    return ("data.root",) if data_root is not None else ()


def run_data(posterior) -> Any:
    """The run's data bundle of ``posterior`` (:attr:`csg.Posterior.data`), its root checked first, built from a
    forked random state (torch's global one stays as the caller had it)."""
    from csg.posterior.inputs import build_run, own_random_state

    where = {} if posterior.run_dir is not None else {
        "key": "path", "config": "a posterior file written by Posterior.save: its config"}
    with own_random_state(posterior.device):
        data, _ = build_run(data_config(posterior.cfg, posterior.data_root), posterior.device, posterior.source,
                            posterior.trust_code, likelihood=posterior.likelihood,
                            given=given_keys(posterior.data_root), **where)
    return data


def run_ood_loader(posterior) -> Any:
    """The loader of the run's OOD set (its ``ood`` config), or None for ``ood=none``; its root (and the data's)
    checked first."""
    from csg.engine.build import build_ood_loader
    from csg.engine.settings import run_settings

    ood = posterior.cfg.get("ood") if posterior.cfg is not None else None
    if ood is None or str(ood.get("name", "none")) == "none":
        return None
    from csg.checks.saved import check_run_data

    cfg = data_config(posterior.cfg, posterior.data_root)
    check_run_data(cfg, posterior.source, trust_code=posterior.trust_code, given=given_keys(posterior.data_root),
                   ood=True)
    return build_ood_loader(run_settings(cfg), posterior.data)[0]


def run_head(posterior) -> str | None:
    """The name of the run's sampled head (:func:`csg.engine.part.head_of` of its ``sampler.params``), for an
    evaluation that runs the frozen trunk once; None for any other part, or a posterior without a config."""
    if posterior.cfg is None:
        return None
    from csg.engine.build import part_of
    from csg.engine.part import head_of
    from csg.engine.settings import run_settings

    return head_of(posterior.model, part_of(run_settings(posterior.cfg, data=False).sampler, posterior.model))
