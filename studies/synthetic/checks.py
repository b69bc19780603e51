"""Small checks that the synthetic studies' ``validate`` functions share.

Every check takes the composed run config and a dotted key (``synthetic.steps``), and raises
:class:`csg.errors.ConfigError` naming that key, the value given and what is allowed; it returns the value,
converted. They run before a study does any work, so a refused study writes nothing. A check of one value reads
it (:func:`get`) and hands it to csg's public value checks (:mod:`csg.values`), which hold the logic and wording.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from csg import values
from csg.errors import ConfigError

SEED_MAX = 2**32 - 1  # the studies derive generator seeds from it (seed * 1000 + method): well inside torch's 64 bits
NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def get(cfg: DictConfig, key: str) -> Any:
    """The value at ``key`` (None where it is missing); an interpolation that does not resolve is refused."""
    try:
        return OmegaConf.select(cfg, key, throw_on_missing=False)
    except OmegaConfBaseException as error:
        from csg.reporting import flat_keys

        raw = flat_keys(OmegaConf.to_container(cfg, resolve=False)).get(key)  # as written, for the message
        raise ConfigError(key, raw, f"a value whose interpolation resolves ({type(error).__name__})") from None


def finite(cfg: DictConfig, key: str, *, minimum: float = -math.inf, strict: bool = False,
           maximum: float | None = None, below: bool = False) -> float:
    """A finite real number >= ``minimum`` (> if ``strict``) and <= ``maximum`` (< if ``below``)."""
    return values.number(key, get(cfg, key), minimum=minimum, strict=strict, maximum=maximum, below=below)


def integer(cfg: DictConfig, key: str, *, minimum: int = 1, maximum: int | None = None, optional: str = "") -> int | None:
    """An integer in [``minimum``, ``maximum``]; with ``optional`` (what null means), also null."""
    return values.integer(key, get(cfg, key), minimum=minimum, maximum=maximum, optional=optional)


def boolean(cfg: DictConfig, key: str) -> bool:
    return values.boolean(key, get(cfg, key))


def text(cfg: DictConfig, key: str) -> str:
    return values.text(key, get(cfg, key))


def choice(cfg: DictConfig, key: str, choices: Sequence[str]) -> str:
    """One of ``choices``, a text (not a number that reads as one)."""
    return values.one_of(key, get(cfg, key), choices, exact=True)


def number_list(cfg: DictConfig, key: str, *, minimum: float = 0.0, strict: bool = True,
                choices: Sequence[float] | None = None) -> list[float]:
    """A non-empty list of distinct finite numbers > ``minimum`` (>= unless ``strict``), each in ``choices`` if given."""
    value = get(cfg, key)
    items = list(value) if isinstance(value, (ListConfig, list, tuple)) else None
    ok = bool(items) and all(values.is_number(v) and math.isfinite(v) and (v > minimum if strict else v >= minimum)
                             for v in items)
    ok = ok and len({f"{float(v):g}" for v in items}) == len(items)
    if ok and choices is not None:
        ok = all(any(math.isclose(v, c) for c in choices) for v in items)
    if not ok:
        if choices is not None:
            what = f"a non-empty list of distinct values from {', '.join(f'{c:g}' for c in choices)}"
        else:
            what = f"a non-empty list of distinct finite numbers {'>' if strict else '>='} {minimum:g}"
        raise ConfigError(key, value, what)
    return [float(v) for v in items]


def text_list(cfg: DictConfig, key: str, choices: Sequence[str], *, required: str | None = None) -> list[str]:
    """A non-empty list of distinct entries of ``choices`` (including ``required`` if given)."""
    value = get(cfg, key)
    items = list(value) if isinstance(value, (ListConfig, list, tuple)) else None
    ok = bool(items) and all(isinstance(v, str) and v in choices for v in items) and len(set(items)) == len(items)
    if not ok or (required is not None and required not in items):
        what = f"a non-empty list of distinct entries of {', '.join(choices)}"
        raise ConfigError(key, value, what + (f", with {required} among them" if required else ""))
    return items


def mapping(cfg: DictConfig, key: str, allowed: Iterable[str] | None, *, what: str = "") -> DictConfig:
    """The mapping at ``key``, whose keys must all be ``allowed`` (None: any): a key the study does not read is
    refused, naming the keys it reads."""
    allowed = None if allowed is None else tuple(allowed)
    node = get(cfg, key)
    if not isinstance(node, (DictConfig, Mapping)):
        raise ConfigError(key, node, "a mapping" + (f" of {', '.join(allowed)}" if allowed else what))
    for name in node:
        if allowed is not None and str(name) not in allowed:
            raise ConfigError(f"{key}.{name}", get(cfg, f"{key}.{name}"),
                              f"not a key of {key}{what}, whose keys are {', '.join(allowed)}")
    return node


def output_dir(cfg: DictConfig, key: str) -> None:
    """Null or empty (the run directory), or a path that is a directory or can become one, and writable."""
    value = get(cfg, key)
    if value is None or value == "":
        return
    if not isinstance(value, str):
        raise ConfigError(key, value, "a directory path, or null (the run directory)")
    path = Path(value).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(key, value, f"a directory path, or null (the run directory): {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(key, value, f"a directory path you may write to, or null (the run directory): {existing} "
                          "is not writable")


def seed(cfg: DictConfig) -> int:
    return integer(cfg, "seed", minimum=0, maximum=SEED_MAX)


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2**40


def fits_in_memory(sizes: Mapping[str, int], estimate: Callable[[Mapping[str, int]], float], what: str) -> None:
    """Refuse a study whose ``what`` cannot fit in this machine's memory.

    ``sizes`` are the keys that set the size, with their values; ``estimate(sizes)`` is the bytes needed. The key
    named is the first whose value alone, made 1, would let it fit (else the largest)."""
    total, needed = physical_memory(), estimate(sizes)
    if needed <= total:
        return
    culprits = [key for key in sizes if estimate({**sizes, key: 1}) <= total]
    key = culprits[0] if culprits else max(sizes, key=lambda k: sizes[k])
    others = ", ".join(f"{k}={v}" for k, v in sizes.items() if k != key)
    raise ConfigError(key, sizes[key], f"a smaller value: {what} would need about {needed / 2**30:,.0f} GiB"
                      f"{' with ' + others if others else ''} (this machine has {total / 2**30:.0f} GiB)")
