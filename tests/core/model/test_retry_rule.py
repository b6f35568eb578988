"""The adapters' one retry rule and Retry-After reading (core/model/retry.py), pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from tpucared.core.model.backoff import in_seconds
from tpucared.core.model.retry import RetryRule, retry_after_seconds

RULE = RetryRule(
    attempts=4, waits=in_seconds(1.0, 8.0), retry_on=frozenset({"busy"}), max_retry_after=60.0
)
TIMED = RetryRule(
    attempts=None, waits=in_seconds(1.0, 8.0), retry_on=frozenset({"busy"}), within=30.0
)


def top() -> float:
    return 1.0


@pytest.mark.parametrize(
    ("rule", "kind", "attempt", "retry_after", "elapsed", "expected"),
    [
        (RULE, "busy", 1, None, 0.0, 1.0),
        (RULE, "busy", 3, None, 0.0, 4.0),
        (RULE, "busy", 4, None, 0.0, None),  # the tries are spent
        (RULE, "refused", 1, None, 0.0, None),  # not a kind another try cures
        (RULE, "busy", 1, 5.0, 0.0, 5.0),  # Retry-After is a floor...
        (RULE, "busy", 3, 0.5, 0.0, 4.0),  # ...not a ceiling
        (RULE, "busy", 1, 61.0, 0.0, None),  # beyond max_retry_after: give up now
        (RULE, "busy", 1, None, 1000.0, 1.0),  # no time budget
        (TIMED, "busy", 50, None, 0.0, 8.0),  # tries unbounded, ceiling capped
        (TIMED, "busy", 1, None, 29.0, 1.0),
        (TIMED, "busy", 1, None, 29.5, None),  # the retry would start after `within`
        (TIMED, "busy", 1, 31.0, 0.0, None),
    ],
)
def test_pause(
    rule: RetryRule[str],
    kind: str,
    attempt: int,
    retry_after: float | None,
    elapsed: float,
    expected: float | None,
) -> None:
    assert rule.pause(kind, attempt, top, retry_after=retry_after, elapsed=elapsed) == expected


def test_draws_only_for_a_retry() -> None:
    draws: list[float] = []

    def draw() -> float:
        draws.append(0.5)
        return 0.5

    assert RULE.pause("refused", 1, draw) is None
    assert RULE.pause("busy", 4, draw) is None
    assert RULE.pause("busy", 2, draw) == 1.0
    assert draws == [0.5]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attempts": 0},
        {"attempts": None},  # unbounded: a rule needs attempts or within
        {"attempts": 1, "max_retry_after": -1.0},
        {"attempts": 1, "within": -1.0},
    ],
)
def test_bad_rules_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"attempts|negative|bound"):
        RetryRule(waits=in_seconds(1.0, 2.0), retry_on=frozenset(), **kwargs)  # type: ignore[arg-type]


NOW = datetime(2025, 4, 10, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("7", 7.0),
        (" 0.5 ", 0.5),
        ("-5", 0.0),
        ("soon", None),
        (format_datetime(NOW + timedelta(seconds=30), usegmt=True), 30.0),
        (format_datetime(NOW - timedelta(seconds=30), usegmt=True), 0.0),
        ("Thursday, 10-Apr-25 12:01:00 GMT", 60.0),  # RFC 850, obsolete
        ("Thu Apr 10 12:01:00 2025", 60.0),  # asctime, obsolete
        ("Thu, 10 Apr 2025 12:01:00 +0100", None),  # not an HTTP date
    ],
)
def test_retry_after_seconds(header: str | None, expected: float | None) -> None:
    assert retry_after_seconds(header, NOW) == expected
