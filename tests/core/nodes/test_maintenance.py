"""core/nodes/maintenance.py and the value it reads: when a node's window is news (appeared or
moved, not a status change nor its end), and how a window reads in a line and an event; the
planner's cloud facts carry the listed window onto the record."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tpucared.core.model.observed import MaintenanceWindow
from tpucared.core.nodes import maintenance
from tpucared.core.vocab.actions import RecordCloud

from ..core_support import T0, inc, node, run, snapshot, spec, world

START = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
W = MaintenanceWindow(START, START + timedelta(hours=1), "SCHEDULED", "PENDING", True)


def test_a_window_is_news_when_it_appears_or_moves() -> None:
    assert maintenance.announced(None, W)
    assert maintenance.announced(W, replace(W, start=START + timedelta(hours=2)))
    assert maintenance.announced(W, replace(W, end=START + timedelta(hours=3)))
    assert maintenance.announced(W, replace(W, type="UNSCHEDULED"))


def test_a_window_that_stays_begins_or_ends_is_not_news() -> None:
    assert not maintenance.announced(W, W)
    assert not maintenance.announced(W, replace(W, status="ONGOING"))
    assert not maintenance.announced(W, replace(W, can_reschedule=False))
    assert not maintenance.announced(W, None)
    assert not maintenance.announced(None, None)


def test_a_window_reads_in_one_line_and_in_an_event() -> None:
    assert maintenance.describe(W) == (
        "SCHEDULED maintenance 2026-12-01 10:00:00Z - 2026-12-01 11:00:00Z (PENDING)"
    )
    assert maintenance.describe(MaintenanceWindow()) == "UNKNOWN_TYPE maintenance ? - ?"
    assert maintenance.details(W) == {
        "start": "2026-12-01T10:00:00+00:00",
        "end": "2026-12-01T11:00:00+00:00",
        "type": "SCHEDULED",
        "status": "PENDING",
        "can_reschedule": True,
    }


def test_the_planner_records_a_listed_window_and_its_end() -> None:
    fleet = spec(size=1)
    listed = replace(node(), maintenance=W)
    steady = {"cloud_state": "READY", "cloud_state_since": T0 - timedelta(hours=1),
              "cloud_id": "101"}  # fmt: skip
    p = run([fleet], world(listed), snapshot(inc(**steady), specs=[fleet]))
    [rc] = p.of(RecordCloud)
    assert rc.cloud.maintenance == W
    # Recorded: nothing to write while the cloud shows the same window.
    p = run([fleet], world(listed), snapshot(inc(**steady, maintenance=W), specs=[fleet]))
    assert not p.of(RecordCloud)
    # The window gone from the list: recorded as over.
    p = run([fleet], world(node()), snapshot(inc(**steady, maintenance=W), specs=[fleet]))
    [rc] = p.of(RecordCloud)
    assert rc.cloud.maintenance is None
