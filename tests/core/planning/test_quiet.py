"""Quiet ticks (core/planning/quiet.py): a tick plans on the previous lists only when it was
woken for nothing a list could show, and those lists cover the same zones, all succeeded, and
are younger than the poll interval."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.specs import ErrorKind
from tpucared.core.planning.quiet import may_plan_on_last_lists

T = datetime(2026, 1, 1, tzinfo=UTC)
ZONES = (("", "z-a"), ("", "z-b"))
OK = (ZoneObservation(zone="z-a", observed_at=T), ZoneObservation(zone="z-b", observed_at=T))
FAILED = (OK[0], ZoneObservation(zone="z-b", observed_at=T, error=ErrorKind.TRANSIENT))


@pytest.mark.parametrize(
    ("quiet", "last_zones", "lists", "age", "want"),
    [
        (True, ZONES, OK, 1.0, True),  # a stockout's end, lists 1 s old: plan on them
        (False, ZONES, OK, 1.0, False),  # the poll, a probe, an operation's success: list
        (True, None, (), 0.0, False),  # nothing listed yet
        (True, ZONES[:1], OK[:1], 1.0, False),  # a zone more to watch since
        (True, ZONES, FAILED, 1.0, False),  # a zone unknown last time: look again
        (True, ZONES, OK, 9.99, True),
        (True, ZONES, OK, 10.0, False),  # as old as the poll interval: the poll lists
    ],
)
def test_when_a_tick_plans_on_the_last_lists(
    quiet: bool,
    last_zones: tuple[tuple[str, str], ...] | None,
    lists: tuple[ZoneObservation, ...],
    age: float,
    want: bool,
) -> None:
    got = may_plan_on_last_lists(
        quiet=quiet, zones=ZONES, last_zones=last_zones, last_lists=lists, age_s=age, within_s=10.0
    )
    assert got is want


def test_never_when_reuse_is_off() -> None:
    """`reuse_lists_within` 0 (the default of a reconciler built without a poll): always list."""
    assert not may_plan_on_last_lists(
        quiet=True, zones=ZONES, last_zones=ZONES, last_lists=OK, age_s=0.0, within_s=0.0
    )
