"""Which slots are in a stockout (core/planning/stockout.py): the rule of `status` and news."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from tpucared.core.model.records import (
    CreateAttemptRecord,
    FleetRecord,
    IncarnationRecord,
    NodePhase,
    SlotRecord,
)
from tpucared.core.model.specs import ErrorKind
from tpucared.core.planning.stockout import in_stockout, slots_in_stockout
from tpucared.core.vocab.snapshot import PlainSnapshot, SlotKey

NOW = datetime(2026, 1, 1, tzinfo=UTC)
P = NodePhase
CAPACITY = ErrorKind.CAPACITY.value


def slot(index: int = 0, failures: int = 1, *, done: bool = False, fleet: str = "f") -> SlotRecord:
    return SlotRecord(fleet, index, f"run-{index}", create_failures=failures, done=done)


def create(outcome: str = CAPACITY, index: int = 0) -> CreateAttemptRecord:
    return CreateAttemptRecord("f", index, "z", "v5litepod-8", NOW, outcome)


def node(phase: NodePhase, index: int = 0, slice_: int = 0) -> IncarnationRecord:
    return IncarnationRecord(
        id=index * 10 + slice_ + 1,
        fleet="f",
        slot=index,
        node_name=f"n-{index}-{slice_}",
        zone="z",
        accelerator_type="v5litepod-8",
        phase=phase,
        phase_since=NOW,
        requested_at=NOW,
        slice=slice_,
    )


@pytest.mark.parametrize(
    ("record", "last", "incarnation", "down", "expected"),
    [
        (slot(), create(), None, False, True),
        (slot(), create(), node(P.REQUESTED), False, True),  # a retry in flight: same stockout
        (slot(), create(), node(P.CREATING), False, True),
        (slot(), create(), node(P.READY), False, False),  # a node serves: over
        (slot(), create(), node(P.DEAD), False, False),
        (slot(), create(), node(P.DELETING), False, False),
        (slot(), create(), node(P.DELETED), False, True),  # an ended node serves nothing
        (slot(), create(), node(P.FAILED), False, True),
        (slot(failures=0), create(), None, False, False),  # the last create worked since
        (slot(), create(ErrorKind.QUOTA.value), None, False, False),  # not a stockout
        (slot(), create("ok"), None, False, False),
        (slot(), None, None, False, False),  # never made a create
        (slot(done=True), create(), None, False, False),  # not retrying: done
        (slot(), create(), None, True, False),  # not retrying: fleet down
    ],
)
def test_in_stockout(
    record: SlotRecord,
    last: CreateAttemptRecord | None,
    incarnation: IncarnationRecord | None,
    down: bool,
    expected: bool,
) -> None:
    assert in_stockout(record, last, incarnation, down=down) is expected


@dataclass(frozen=True)
class WithCreates(PlainSnapshot):
    """A plain snapshot with the store's `last_creates`."""

    last_creates: Mapping[SlotKey, CreateAttemptRecord] = field(default_factory=dict)


def with_creates(plain: PlainSnapshot, last: Mapping[SlotKey, CreateAttemptRecord]) -> WithCreates:
    return WithCreates(plain.fleets, plain.slots, plain.nodes, last)


def test_slots_in_stockout_of_a_snapshot() -> None:
    fleet = FleetRecord("f", "h", "{}", NOW)
    plain = PlainSnapshot.of(
        [fleet],
        [slot(0), slot(1), slot(2), slot(3, failures=0), slot(4, fleet="gone")],
        # slot 1's slice 0 stands for it (READY: over), slot 2 hunts with slice 0 CREATING
        # while its slice 1 is READY: slice 0 decides.
        [node(P.READY, 1), node(P.CREATING, 2, 0), node(P.READY, 2, 1)],
    )
    last = {(s.fleet, s.index): create(index=s.index) for s in plain.slots.values()}
    assert slots_in_stockout(with_creates(plain, last)) == [("f", 0), ("f", 2)]


def test_a_down_fleet_waits_for_nothing() -> None:
    plain = PlainSnapshot.of([FleetRecord("f", "h", "{}", NOW, down=True)], [slot(0)])
    assert slots_in_stockout(with_creates(plain, {("f", 0): create()})) == []
