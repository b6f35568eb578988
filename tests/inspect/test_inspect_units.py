"""The pure parts of tpucared.inspect: formatting, the status table, and the trackers that
turn events and snapshots into metric facts."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from inspect_support import T0, populate, snapshot

from tpucared.core.model.records import (
    EventRecord,
    FleetRecord,
    IncarnationRecord,
    NodePhase,
    SlotRecord,
)
from tpucared.inspect.events import event_line
from tpucared.inspect.fmt import duration, table, truncate
from tpucared.inspect.goodput import GoodputTracker
from tpucared.inspect.lifecycle import (
    AttemptEnded,
    Latency,
    LatencyKind,
    LifecycleTracker,
    Lost,
    Preempted,
)
from tpucared.inspect.status import status_lines
from tpucared.store import Store
from tpucared.store.snapshot import Snapshot, frozen_mapping

P = NodePhase


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (-5, "0s"),  # a clock step backwards is not negative uptime
        (59, "59s"),
        (60, "1m00s"),
        (3599, "59m59s"),
        (3600, "1h00m"),
        (7530, "2h05m"),
        (86400 * 2 + 3600 * 4 + 59, "2d04h"),
    ],
)
def test_duration(seconds: int, text: str) -> None:
    assert duration(timedelta(seconds=seconds)) == text


def test_truncate_makes_one_short_line() -> None:
    assert truncate(None, 10) == "-"
    assert truncate("a\n  b\n", 10) == "a b"
    assert truncate("x" * 11, 10) == "x" * 9 + "…"


def test_table_aligns_columns_without_trailing_blanks() -> None:
    assert table(["A", "LONG"], [["xyz", "1"], ["q", ""]]) == ["A    LONG", "xyz  1", "q"]


def test_event_line_for_an_event_without_a_fleet() -> None:
    e = EventRecord(id=1, at=T0, kind="notice", message="two\nlines")
    assert (
        event_line(e)
        == "2025-06-01 12:00:00Z  -           -             notice              two lines"
    )


async def test_status_lines_uptime_is_from_ready_at_to_now(tmp_path: Path) -> None:
    s = await populate(tmp_path / "state.db", now=T0)
    async with Store.open(tmp_path / "state.db", read_only=True) as store:
        fleets = await store.status()
    lines = status_lines(fleets, T0 + timedelta(days=1))
    (row,) = [line.split() for line in lines if line.split()[:2] == ["sweep", "0"]]
    assert row[-2:] == ["1d02h", "-"]  # uptime, last error
    assert s.ready == T0 - timedelta(hours=2, minutes=5, seconds=30)


# -- lifecycle: facts from the event log --------------------------------------------------------


async def test_lifecycle_facts_from_the_stores_own_events(tmp_path: Path) -> None:
    s = await populate(tmp_path / "state.db", now=T0)
    async with Store.open(tmp_path / "state.db", read_only=True) as store:
        events = await store.events(limit=1000)
    facts = LifecycleTracker().feed(events)
    assert facts == [
        Lost("sweep", "preempted"),  # the loss's cause, from the node.dead event
        Preempted("sweep", 1),
        AttemptEnded("sweep", "preempted"),
        Latency(LatencyKind.DEAD_TO_DELETE, "sweep", 2.0),  # begin_delete 2 s after dead
        Latency(LatencyKind.RECOVERY, "sweep", (s.ready - s.died).total_seconds()),
    ]


def ev(
    n: int,
    kind: str,
    details: dict[str, object] | None = None,
    *,
    slot: int | None = 0,
    fleet: str = "f",
) -> EventRecord:
    return EventRecord(
        id=n, at=T0 + timedelta(seconds=n), kind=kind, message="", fleet=fleet, slot=slot,
        details=details or {},
    )  # fmt: skip


def preemption(n: int) -> EventRecord:
    return ev(n, "node.dead", {"from": "ready", "slot_update": {"add_preemptions": 1}})


def test_recovery_counts_from_the_first_loss_until_ready() -> None:
    tracker = LifecycleTracker()
    facts = tracker.feed(
        [
            preemption(10),
            ev(11, "node.deleted"),  # vanished: no delete call, no dead-to-delete
            ev(12, "node.requested"),
            ev(13, "node.creating"),
            ev(20, "node.dead", {"from": "creating"}),  # the replacement dies too
            ev(21, "node.deleting", {"delete_calls": 1}),
            ev(22, "node.deleting", {"delete_calls": 2}),  # a retry is not a first delete
            ev(40, "node.ready"),
            ev(50, "node.ready"),  # nothing pending any more
        ]
    )
    assert facts == [
        Preempted("f", 1),
        Latency(LatencyKind.DEAD_TO_DELETE, "f", 1.0),
        Latency(LatencyKind.RECOVERY, "f", 30.0),
    ]


def test_planned_endings_are_not_losses_and_cancel_waiting() -> None:
    tracker = LifecycleTracker()
    facts = tracker.feed(
        [
            ev(1, "node.deleting", {"delete_calls": 1, "from": "ready"}),  # scale-down
            ev(2, "node.deleted"),
            ev(3, "node.ready"),
            preemption(4),
            ev(5, "slot.done"),
            ev(6, "node.ready"),
            preemption(7),
            ev(8, "fleet.down", slot=None),
            ev(9, "node.ready"),
            ev(10, "attempt.started"),  # not an outcome
            ev(11, "attempt.failed"),
            ev(12, "notice", slot=None, fleet="other"),
        ]
    )
    assert facts == [
        Preempted("f", 1),
        Preempted("f", 1),
        AttemptEnded("f", "failed"),
        Lost("f", "crash"),  # a crash is a loss by its cause
    ]


# -- goodput ------------------------------------------------------------------------------------


def test_goodput_credits_each_interval_by_the_state_at_its_start() -> None:
    g = GoodputTracker()
    t = T0
    g.update(snapshot(running=True), t)
    first = g.get(("f", 0))
    assert first is not None
    assert (first.wall_s, first.ratio) == (0.0, 0.0)
    g.update(snapshot(running=False), t + timedelta(seconds=30))  # 30 s productive
    g.update(snapshot(running=True), t + timedelta(seconds=40))  # 10 s idle
    g.update(snapshot(running=True), t + timedelta(seconds=100))  # 60 s
    last = g.get(("f", 0))
    assert last is not None
    assert (last.wall_s, last.productive_s) == (100.0, 90.0)
    assert last.ratio == pytest.approx(0.9)


def test_goodput_without_a_workload_is_ready_time_and_done_slots_stop() -> None:
    g = GoodputTracker()
    g.update(snapshot(workload=False, ready=True), T0)
    g.update(snapshot(workload=False, ready=False), T0 + timedelta(seconds=10))
    g.update(snapshot(workload=False, done=True), T0 + timedelta(seconds=20))
    t = g.get(("f", 0))
    assert t is not None
    assert (t.wall_s, t.productive_s) == (20.0, 10.0)
    g.update(snapshot(workload=False, done=True), T0 + timedelta(hours=1))
    assert g.get(("f", 0)) == t  # frozen
    g.update(snapshot(down=True), T0 + timedelta(hours=2))
    g.update(snapshot(down=True), T0 + timedelta(hours=3))
    still = g.get(("f", 0))
    assert still is not None
    assert still.wall_s == 20.0


def test_goodput_of_a_multislice_slot_without_a_workload_needs_every_slice_ready() -> None:
    spec = json.dumps({"name": "f", "workload": None, "slices": 2})
    fleet = FleetRecord("f", "h3", spec, T0)

    def two_slices(*phases: P) -> Snapshot:
        nodes = {
            ("f", 0, i): replace(
                IncarnationRecord(i + 1, "f", 0, f"f-0-{i}", "z", "v4-8", phase, T0, T0), slice=i
            )
            for i, phase in enumerate(phases)
        }
        return Snapshot(
            fleets=frozen_mapping({"f": fleet}),
            slots=frozen_mapping({("f", 0): SlotRecord("f", 0, "run")}),
            nodes=frozen_mapping(nodes),
        )

    g = GoodputTracker()
    g.update(two_slices(P.READY, P.READY), T0)  # 10 s productive
    g.update(two_slices(P.READY, P.DEAD), T0 + timedelta(seconds=10))  # 10 s: one slice lost
    g.update(two_slices(P.READY), T0 + timedelta(seconds=20))  # 10 s: slice 1 missing
    g.update(two_slices(P.READY, P.READY), T0 + timedelta(seconds=30))  # 10 s productive
    g.update(two_slices(P.READY, P.READY), T0 + timedelta(seconds=40))
    t = g.get(("f", 0))
    assert t is not None
    assert (t.wall_s, t.productive_s) == (40.0, 20.0)


def test_goodput_forgets_slots_that_left() -> None:
    g = GoodputTracker()
    g.update(snapshot(running=True), T0)
    g.update(snapshot(running=True), T0 + timedelta(seconds=10))
    assert g.update(replace(snapshot(), slots=frozen_mapping()), T0) == {("f", 0)}
    assert list(g.times()) == []
    g.update(snapshot(running=True), T0 + timedelta(seconds=20))
    again = g.get(("f", 0))
    assert again is not None
    assert again.wall_s == 0.0


def test_goodput_totals_are_exact_sums_of_the_intervals() -> None:
    # Microseconds, not float seconds summed tick by tick (0.1 + 0.1 + 0.1 != 0.3 in floats).
    g = GoodputTracker()
    for tenths in range(4):
        g.update(snapshot(running=True), T0 + timedelta(seconds=tenths / 10))
    t = g.get(("f", 0))
    assert t is not None
    assert (t.wall_s, t.productive_s, t.ratio) == (0.3, 0.3, 1.0)
