"""Checks of one config value, already read: is it what its key allows?

Each takes the dotted key (for the message) and the value, and returns the value converted, or raises
:class:`csg.errors.ConfigError` naming the key, the value given and what is allowed, in one line. They read no
config: the caller reads the value its own way (``OmegaConf.select``, :func:`csg.components.select`, a dict) and
passes it in. csg's checks of a run's config (:mod:`csg.checks.config`) use them, and so can a registered study's
``check(cfg)`` (:func:`csg.launch.studies.register_study`)::

    from csg import values

    def check(cfg):
        steps = values.integer("mystudy.steps", cfg.mystudy.steps)
        values.number("mystudy.lr", cfg.mystudy.lr, minimum=0, strict=True)   # a finite number > 0
        values.one_of("mystudy.target", cfg.mystudy.target, ("ring", "grid"))

A bool is neither a number nor an integer here (YAML's ``true`` is not 1), and a number is finite.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from csg.errors import ConfigError

__all__ = ["boolean", "integer", "is_int", "is_number", "number", "one_of", "text"]


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number (an int, a float, a numpy scalar), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (an int, a numpy integer), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _interval(minimum: float, strict: bool, maximum: float | None, below: bool) -> str:
    if maximum is None:
        return f"{'>' if strict else '>='} {minimum:g}"
    return f"in {'(' if strict else '['}{minimum:g}, {maximum:g}{')' if below else ']'}"


def number(key: str, value: Any, *, minimum: float = -math.inf, strict: bool = False, maximum: float | None = None,
           below: bool = False, noun: str = "a finite number") -> float:
    """A finite real number >= ``minimum`` (> if ``strict``) and <= ``maximum`` (< if ``below``), as a float.

    Refused as ``noun`` and the bounds given: ``a finite number >= 0``, ``a finite number in (0, 1]``; ``noun``
    alone when there are none."""
    ok = is_number(value) and math.isfinite(value) and (value > minimum if strict else value >= minimum)
    if ok and maximum is not None:
        ok = value < maximum if below else value <= maximum
    if not ok:
        bounded = minimum != -math.inf or maximum is not None
        raise ConfigError(key, value, f"{noun} {_interval(minimum, strict, maximum, below)}" if bounded else noun)
    return float(value)


def integer(key: str, value: Any, *, minimum: int = 1, maximum: int | None = None, optional: str = "") -> int | None:
    """An integer in [``minimum``, ``maximum``], as an int; with ``optional`` (what null means), also null (None).

    Refused as ``a positive integer`` (``minimum`` 1), ``an integer >= 0``, ``an integer from 2 to 10``, and with
    ``optional``, ``, or null (<optional>)`` after it."""
    if value is None and optional:
        return None
    if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
        if maximum is not None:
            what = f"an integer from {minimum} to {maximum}"
        else:
            what = {0: "an integer >= 0", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
        raise ConfigError(key, value, what + (f", or null ({optional})" if optional else ""))
    return int(value)


def one_of(key: str, value: Any, choices: Sequence[str], *, exact: bool = False) -> str:
    """One of ``choices``, as text. The value is compared as text (``str(value)``: YAML's ``32`` is the choice
    ``"32"``); with ``exact``, only a str is. Refused as ``one of a, b, c``."""
    if (exact and not isinstance(value, str)) or str(value) not in choices:
        raise ConfigError(key, value, f"one of {', '.join(choices)}")
    return str(value)


def boolean(key: str, value: Any) -> bool:
    """``true`` or ``false`` (a bool; not 0 or 1, not a text)."""
    if not isinstance(value, bool):
        raise ConfigError(key, value, "true or false")
    return value


def text(key: str, value: Any) -> str:
    """A str (any, empty too). Refused as ``a text``."""
    if not isinstance(value, str):
        raise ConfigError(key, value, "a text")
    return value
