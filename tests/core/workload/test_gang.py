"""The gang: a multislice slot's slices as the workload rules see them (core/workload/gang.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tpucared.core.model.records import IncarnationRecord, NodePhase, WorkloadAttemptRecord
from tpucared.core.workload.gang import Gang, by_slot, slot_node

P = NodePhase
T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def piece(
    id: int, index: int, phase: NodePhase = P.READY, ready_min: int = 10
) -> IncarnationRecord:
    return IncarnationRecord(
        id=id, fleet="ms", slot=0, slice=index, node_name=f"ms-0-{index}", zone="z",
        accelerator_type="v4-16", phase=phase, phase_since=T0, requested_at=T0,
        ready_at=T0 - timedelta(minutes=ready_min) if phase is P.READY else None,
    )  # fmt: skip


def gang(*slices: IncarnationRecord, expected: int = 2, after: dict[int, NodePhase] | None = None,
         workers: int = 2) -> Gang:  # fmt: skip
    phases = {i.id: i.phase for i in slices} | (after or {})
    return Gang("ms-0", expected, slices, phases, {i.id: workers for i in slices})


def test_the_stand_in_is_the_newest_slice_ready_only_when_every_slice_is() -> None:
    whole = gang(piece(3, 0), piece(7, 1))
    node = whole.stand_in()
    assert node is not None
    assert (node.id, node.node_name, node.phase) == (7, "ms-0", P.READY)
    assert (whole.complete, whole.phase_after(), whole.worker_count()) == (True, P.READY, 4)


@pytest.mark.parametrize(
    ("slices", "after", "phase", "phase_after"),
    [
        # The newest slice READY, the other dead: not READY (it was, wrongly, once).
        ((piece(3, 0, P.DEAD), piece(7, 1)), {}, P.DEAD, P.DEAD),
        ((piece(3, 0), piece(7, 1, P.CREATING)), {}, P.CREATING, P.CREATING),
        ((piece(3, 0),), {}, P.CREATING, P.CREATING),  # a slice missing
        ((piece(3, 0), piece(7, 1)), {7: P.DEAD}, P.READY, P.DEAD),  # dies this tick
        ((piece(3, 0), piece(7, 1)), {3: P.DELETING}, P.READY, P.DELETING),
    ],
    ids=["one-dead", "one-creating", "one-missing", "dies-now", "released-now"],
)
def test_a_gang_with_a_slice_not_ready_is_not_ready(
    slices: tuple[IncarnationRecord, ...],
    after: dict[int, NodePhase],
    phase: NodePhase,
    phase_after: NodePhase,
) -> None:
    g = gang(*slices, after=after)
    node = g.stand_in()
    assert node is not None
    assert (node.phase, g.phase_after(), g.complete) == (phase, phase_after, False)


def test_workers_are_numbered_slice_by_slice() -> None:
    a, b = piece(3, 0), piece(7, 1)
    g = gang(b, a)  # any order in: slice order out
    assert [(inc.slice, w) for inc, w in (g.locate(n) for n in range(4)) if inc] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    assert g.locate(4) is None
    assert [i.slice for i in g.slices_of([3])] == [1]
    assert [i.slice for i in g.slices_of([0, 3])] == [0, 1]
    assert [i.slice for i in g.slices_of([99])] == [0, 1]  # unknown: every slice


def test_an_attempt_ran_on_a_slice_ready_before_it_started() -> None:
    def attempt(started: datetime, on: int) -> WorkloadAttemptRecord:
        return WorkloadAttemptRecord(1, "ms", 0, on, 1, started)

    kept, fresh = piece(3, 0, ready_min=60), piece(9, 1, ready_min=1)
    g = gang(kept, fresh)
    assert g.ran(attempt(T0 - timedelta(minutes=30), on=7))  # slice 0 was there
    assert not gang(piece(8, 0, ready_min=1), fresh).ran(attempt(T0 - timedelta(minutes=30), 7))
    assert g.ran(attempt(T0, on=9))  # recorded on this gang itself


def test_slot_node_from_a_snapshot() -> None:
    a, b = piece(3, 0), piece(7, 1, P.CREATING)
    grouped = by_slot([b, a])
    assert list(grouped) == [("ms", 0)]
    assert [i.slice for i in grouped[("ms", 0)]] == [0, 1]
    node = slot_node(grouped[("ms", 0)])
    assert node is not None
    assert (node.id, node.phase) == (7, P.CREATING)
    ready = slot_node([a, piece(7, 1)])
    assert ready is not None
    assert (ready.id, ready.phase) == (7, P.READY)
    assert slot_node([]) is None
