"""csg.values: the checks of one value that csg's config checks and the studies' share: what each accepts, what it
returns, and its refusal's exact words (csg's and the studies' messages are these)."""

from __future__ import annotations

import math

import pytest

from csg import values
from csg.errors import ConfigError


def refusal(check, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as caught:
        check(*args, **kwargs)
    assert caught.value.key == args[0] and caught.value.value is args[1]
    return str(caught.value)


def test_a_bool_is_neither_a_number_nor_an_integer():
    assert values.is_number(0.5) and values.is_number(3) and not values.is_number(True) and not values.is_number("1")
    assert values.is_int(3) and not values.is_int(3.0) and not values.is_int(False)
    assert refusal(values.number, "a.x", True) == "a.x=True is not allowed: a finite number"
    assert refusal(values.integer, "a.n", True) == "a.n=True is not allowed: a positive integer"


def test_number_bounds_and_their_words():
    assert values.number("a.x", 2) == 2.0 and isinstance(values.number("a.x", 2), float)
    assert values.number("a.x", 0, minimum=0) == 0.0
    assert refusal(values.number, "a.x", 0, minimum=0, strict=True) == "a.x=0 is not allowed: a finite number > 0"
    assert refusal(values.number, "a.x", -0.5, minimum=0) == "a.x=-0.5 is not allowed: a finite number >= 0"
    assert refusal(values.number, "a.x", math.inf) == "a.x=inf is not allowed: a finite number"
    assert values.number("a.x", 1, minimum=0, maximum=1) == 1.0
    assert refusal(values.number, "a.x", 1, minimum=0, maximum=1, below=True) == \
        "a.x=1 is not allowed: a finite number in [0, 1)"
    assert refusal(values.number, "a.x", 0, minimum=0, strict=True, maximum=1) == \
        "a.x=0 is not allowed: a finite number in (0, 1]"
    assert refusal(values.number, "a.x", 0.5, minimum=0, maximum=0.25, below=True, noun="a number") == \
        "a.x=0.5 is not allowed: a number in [0, 0.25)"


def test_integer_bounds_and_null():
    assert values.integer("a.n", 3) == 3 and values.integer("a.n", 1) == 1 and values.integer("a.n", 0, minimum=0) == 0
    assert refusal(values.integer, "a.n", 0) == "a.n=0 is not allowed: a positive integer"
    assert refusal(values.integer, "a.n", -1, minimum=0) == "a.n=-1 is not allowed: an integer >= 0"
    assert refusal(values.integer, "a.n", 1, minimum=2) == "a.n=1 is not allowed: an integer >= 2"
    assert values.integer("a.n", 10, minimum=2, maximum=10) == 10
    assert refusal(values.integer, "a.n", 11, minimum=2, maximum=10) == "a.n=11 is not allowed: an integer from 2 to 10"
    assert values.integer("a.n", None, optional="one full batch") is None
    assert refusal(values.integer, "a.n", None) == "a.n=None is not allowed: a positive integer"
    assert refusal(values.integer, "a.n", 2.0, optional="one full batch") == \
        "a.n=2.0 is not allowed: a positive integer, or null (one full batch)"


def test_one_of_boolean_and_text():
    assert values.one_of("a.p", 32, ("32", "bf16-mixed")) == "32"  # YAML's 32 is the choice "32"
    assert refusal(values.one_of, "a.p", 32, ("32", "bf16-mixed"), exact=True) == \
        "a.p=32 is not allowed: one of 32, bf16-mixed"
    assert refusal(values.one_of, "a.p", None, ["sgld", "sghmc"]) == "a.p=None is not allowed: one of sgld, sghmc"
    assert values.boolean("a.b", False) is False
    assert refusal(values.boolean, "a.b", 1) == "a.b=1 is not allowed: true or false"
    assert values.text("a.t", "") == ""
    assert refusal(values.text, "a.t", 3) == "a.t=3 is not allowed: a text"
