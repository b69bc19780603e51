"""csg.evaluation.tuning: csg-tune's rule (held-out NLL, one standard error, then the members' spread)."""

from __future__ import annotations

import math

import pytest

from csg.evaluation.tuning import GridPoint, pick


def _point(name: str, nll, members=(2.0, 2.0), checks=("fires", "fires")) -> GridPoint:
    return GridPoint((name,), tuple(nll), tuple(members), tuple(checks))


def test_the_least_held_out_nll_wins_where_the_seeds_tell_the_points_apart():
    points = [_point("a", (0.50, 0.51), (9, 9)), _point("b", (0.40, 0.41), (2, 2)), _point("c", (0.60, 0.61))]
    chosen = pick(points)
    assert chosen.point.overrides == ("b",) and chosen.best_nll.overrides == ("b",)
    assert [p.overrides for p in chosen.within] == [("b",)]


def test_within_one_standard_error_the_most_spread_members_win():
    best = _point("best", (0.40, 0.44), (2.0, 2.2))  # mean 0.42, standard error 0.02
    near = _point("near", (0.43, 0.43), (6.0, 5.0))  # 0.43 <= 0.44: the seeds cannot tell it from the best
    far = _point("far", (0.45, 0.45), (11.0, 11.0))  # beyond one standard error, however spread
    chosen = pick([best, near, far])
    assert chosen.point.overrides == ("near",)
    assert {p.overrides for p in chosen.within} == {("best",), ("near",)}
    assert "no point within it passed" in chosen.reason


def test_a_point_whose_sampling_check_passed_goes_first_within_the_bound():
    spread = _point("spread", (0.40, 0.42), (8.0, 8.0))  # the best: 0.41, standard error 0.01
    passing = _point("passing", (0.415, 0.415), (3.0, 3.0), checks=("", ""))
    half = _point("half", (0.412, 0.412), (9.0, 9.0), checks=("", "fires"))  # passed at one seed only
    chosen = pick([spread, passing, half])
    assert chosen.point.overrides == ("passing",) and "no point" not in chosen.reason


def test_a_point_that_diverged_at_any_seed_is_out_and_all_diverged_is_an_error():
    diverged = _point("diverged", (0.1, math.inf), (50, 50))
    nan = _point("nan", (0.1, math.nan))
    fine = _point("fine", (0.5, 0.5))
    assert pick([diverged, nan, fine]).point.overrides == ("fine",)
    with pytest.raises(ValueError, match="diverged"):
        pick([diverged, nan])


def test_one_seed_has_no_standard_error_and_picks_the_least_nll():
    assert pick([_point("a", (0.3,), (2,)), _point("b", (0.31,), (9,))]).point.overrides == ("a",)
