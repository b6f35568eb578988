"""The one backoff rule in seconds, as the adapters use it: growth, centred jitter, loose knobs.

The planner's timedelta arithmetic is pinned in model/test_timing.py; here the float rules
must give exactly the delays the REST and SSH retries and the operation polling computed
before they shared the rule.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpucared.core.model.backoff import Backoff, in_seconds

seconds = st.floats(min_value=0.0, max_value=100.0)
draws = st.floats(min_value=0.0, max_value=1.0)


@given(base=seconds, cap=seconds, attempt=st.integers(1, 80), u=draws)
def test_full_jitter_in_seconds_is_u_times_the_capped_doubling(
    base: float, cap: float, attempt: int, u: float
) -> None:
    expected = u * min(cap, base * 2.0 ** (attempt - 1))
    assert in_seconds(base, cap).delay(attempt, u) == expected


@given(
    base=seconds,
    cap=seconds,
    factor=st.floats(min_value=1.0, max_value=3.0),
    jitter=st.floats(min_value=0.0, max_value=0.99),
    attempt=st.integers(1, 40),
    seed=st.integers(0, 2**32),
)
def test_a_centred_rule_is_the_ceiling_scaled_by_a_uniform_factor(
    base: float, cap: float, factor: float, jitter: float, attempt: int, seed: int
) -> None:
    rule = in_seconds(base, cap, factor=factor, jitter=jitter, centred=True)
    top = min(cap, base * factor ** (attempt - 1))
    scale = random.Random(seed).uniform(-1.0, 1.0)
    expected = max(0.0, top * (1.0 + jitter * scale))
    assert rule.delay(attempt, random.Random(seed).random()) == expected


def test_centred_window_spans_both_sides_of_the_ceiling() -> None:
    rule = Backoff(1.0, 10.0, jitter=0.2, centred=True)
    assert [rule.delay(n, 0.5) for n in (1, 2, 3, 4, 5, 6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert rule.delay(5, 0.0) == pytest.approx(8.0)
    assert rule.delay(5, 1.0) == pytest.approx(12.0)  # above the cap, by the jitter
    assert rule.shortest(5) == pytest.approx(8.0)


def test_factor_other_than_two() -> None:
    rule = Backoff(0.1, 0.3, jitter=0.0, factor=1.5)
    assert [rule.delay(n, 0.7) for n in (1, 2, 3, 4)] == [0.1, 0.1 * 1.5, 0.1 * 1.5**2, 0.3]
    assert Backoff(2.0, 5.0, factor=1.0).ceiling(50) == 2.0


def test_no_jitter_polls_at_the_ceiling() -> None:
    rule = in_seconds(0.5, 5.0, jitter=0.0)
    assert [rule.delay(n, 0.0) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


@pytest.mark.parametrize(
    ("base", "cap", "expected"),
    [
        (0.0, 5.0, [0.0, 0.0, 0.0]),  # a zero base never waits
        (2.0, 0.0, [0.0, 0.0, 0.0]),  # nor does a zero cap
        (10.0, 3.0, [3.0, 3.0, 3.0]),  # a cap below the base caps every delay
        (1.0, 3.0, [1.0, 2.0, 3.0]),
    ],
)
def test_adapter_knobs_looser_than_a_rule_keep_their_delays(
    base: float, cap: float, expected: list[float]
) -> None:
    rule = in_seconds(base, cap, jitter=0.0)
    assert [rule.delay(n, 0.5) for n in (1, 2, 3)] == expected


def test_huge_attempts_stay_at_the_cap() -> None:
    assert in_seconds(0.5, 30.0).ceiling(10**9) == 30.0
    assert Backoff(0.0, 0.0).ceiling(10**9) == 0.0


def test_the_rule_takes_the_top_of_its_window_but_nothing_beyond() -> None:
    rule = in_seconds(0.5, 30.0)
    assert rule.delay(3, 1.0) == 2.0
    for u in (-0.1, 1.1, float("nan")):
        with pytest.raises(ValueError, match="jitter"):
            rule.delay(1, u)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": 0.0, "cap": 1.0},
        {"base": 2.0, "cap": 1.0},
        {"base": 1.0, "cap": 2.0, "factor": 0.5},
        {"base": 1.0, "cap": 2.0, "factor": float("nan")},
        {"base": 1.0, "cap": 2.0, "jitter": 1.5},
    ],
)
def test_bad_rules_in_seconds_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(**kwargs)  # type: ignore[arg-type]
