"""core/notify/news.py: what is news, and the rate limits per webhook."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tpucared.core.model.records import EventRecord
from tpucared.core.notify.news import (
    PER_MINUTE,
    News,
    RateLimit,
    event_news,
    health_news,
    stockout_news,
    waiting_since,
)
from tpucared.core.notify.spec import NotifyOn, NotifySpec

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
SPEC = NotifySpec(name="ops", url_env="X")


def _notice(n: int, key: str, severity: str = "error") -> EventRecord:
    return EventRecord(
        n, T0, "notice", f"message {key}", fleet="f", details={"key": key, "severity": severity}
    )


def test_events_that_are_news() -> None:
    found = event_news(
        [
            _notice(1, "quota/f"),
            _notice(2, "drift/f/v4-8", severity="info"),  # not paged
            _notice(3, "workload-gave-up/f/0"),
            EventRecord(4, T0, "node.ready", "sweep-0 READY"),
            EventRecord(
                5, T0, "zone.unreachable", "cannot list z", details={"zone": "us-central2-b"}
            ),
        ]
    )
    assert [(n.kind, n.subject) for n in found] == [
        (NotifyOn.NOTICE, "quota/f"),
        (NotifyOn.FAILURE_BUDGET, "workload-gave-up/f/0"),
        (NotifyOn.NOTICE, f"zone-unreachable/us-central2-b/{T0.isoformat()}"),
    ]
    assert found[2].zone == "us-central2-b"


def test_health_news_only_on_a_change() -> None:
    assert health_news(True, True, "ok", T0) is None
    down = health_news(True, False, "fleet f: no zone can be listed", T0)
    assert down is not None
    assert down.summary == "tpucared is unhealthy: fleet f: no zone can be listed"
    up = health_news(False, True, "ok", T0)
    assert up is not None
    assert up.summary == "tpucared is healthy again"


def test_a_stockout_is_told_once_after_its_threshold() -> None:
    since = waiting_since({}, [("f", 0)], T0)
    since = waiting_since(since, [("f", 0), ("f", 1)], T0 + timedelta(minutes=20))
    assert since == {("f", 0): T0, ("f", 1): T0 + timedelta(minutes=20)}
    found = stockout_news(since, timedelta(minutes=30), T0 + timedelta(minutes=31))
    assert [n.summary for n in found] == [
        "f/0 has waited 31 min for TPU capacity (tpucared keeps hunting)"
    ]
    assert waiting_since(since, [], T0) == {}  # capacity came back: a new stockout starts afresh


def _news(subject: str, kind: NotifyOn = NotifyOn.NOTICE) -> News:
    return News(kind, subject, f"about {subject}", T0)


def test_the_same_subject_waits_for_min_interval() -> None:
    limit = RateLimit()
    posts, rest = limit.admit(SPEC, [_news("a")], T0)
    assert (len(posts), rest) == (1, [])
    assert limit.admit(SPEC, [_news("a")], T0 + timedelta(minutes=5)) == ([], [])
    posts, _ = limit.admit(SPEC, [_news("a")], T0 + timedelta(minutes=10))
    assert len(posts) == 1


def test_only_the_kinds_asked_for() -> None:
    spec = NotifySpec(name="pager", url_env="X", on=frozenset({NotifyOn.UNHEALTHY}))
    posts, _ = RateLimit().admit(spec, [_news("a"), _news("h", NotifyOn.UNHEALTHY)], T0)
    assert [[n.subject for n in p] for p in posts] == [["h"]]


def test_a_storm_is_folded_and_the_rest_waits_for_room() -> None:
    limit = RateLimit()
    storm = [_news(f"s{i}") for i in range(20)]
    posts, rest = limit.admit(SPEC, storm, T0)
    assert len(posts) == PER_MINUTE
    assert [len(p) for p in posts] == [1] * (PER_MINUTE - 1) + [20 - PER_MINUTE + 1]
    assert rest == []
    posts, rest = limit.admit(SPEC, [_news("late")], T0 + timedelta(seconds=30))
    assert (posts, [n.subject for n in rest]) == ([], ["late"])  # no room this minute: kept
    posts, rest = limit.admit(SPEC, rest, T0 + timedelta(minutes=1))
    assert ([[n.subject for n in p] for p in posts], rest) == ([["late"]], [])


def test_a_maintenance_window_is_news_of_its_own_kind() -> None:
    """`node.maintenance_scheduled` (store/write_nodes.py) is `maintenance` news, one subject
    per node and window start: a window moved is told again, the same one not."""
    at = "2026-12-01T10:00:00+00:00"
    event = EventRecord(
        7, T0, "node.maintenance_scheduled", "sweep-0: SCHEDULED maintenance ...",
        fleet="sweep", slot=0, node="sweep-0", details={"start": at, "type": "SCHEDULED"},
    )  # fmt: skip
    [news] = event_news([event])
    assert (news.kind, news.subject, news.fleet, news.slot) == (
        NotifyOn.MAINTENANCE, f"maintenance/sweep-0/{at}", "sweep", 0
    )  # fmt: skip
    assert news.summary == "sweep/0: sweep-0: SCHEDULED maintenance ..."
    only_budget = NotifySpec(name="ops", url_env="X", on=frozenset({NotifyOn.FAILURE_BUDGET}))
    assert RateLimit().admit(only_budget, [news], T0) == ([], [])
    assert RateLimit().admit(SPEC, [news], T0) == ([[news]], [])
