"""The badput ledger (core/ledger): every second of a slot in one category, with its cause.

Table tests of the stories the daemon records (a preemption, a stockout at the first create,
a crash, a maintenance loss, a hold, a finished run, a fleet without a workload), and a
property: whatever the records, the intervals tile [first create, now] exactly.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpucared.core.ledger.categories import Category, Interval, NodeTimes, Phase, SlotHistory
from tpucared.core.ledger.tiling import clipped, slot_ledger
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import AttemptOutcome, CreateAttemptRecord, WorkloadAttemptRecord

T0 = datetime(2026, 11, 1, tzinfo=UTC)
C = Category
P = Phase


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def node(i: int, requested: float, **times: float | LossCause | str | None) -> NodeTimes:
    kwargs: dict[str, object] = {}
    for key, value in times.items():
        kwargs[key] = at(value) if isinstance(value, int | float) else value
    return NodeTimes(i, f"n-{i}", "us-east5-b", "v6e-8", at(requested), **kwargs)  # type: ignore[arg-type]


def attempt(
    i: int, inc: int, start: float, end: float | None = None, outcome: AttemptOutcome | None = None
) -> WorkloadAttemptRecord:
    return WorkloadAttemptRecord(
        i, "f", 0, inc, i, at(start), at(end) if end is not None else None, outcome
    )


def create(start: float, outcome: str, inc: int | None = None) -> CreateAttemptRecord:
    return CreateAttemptRecord(
        "f", 0, "us-east5-b", "v6e-8", at(start), outcome, incarnation_id=inc
    )


def slot_history(**parts: Any) -> SlotHistory:
    """Slot 0 of fleet "f" with these parts (nodes, attempts, creates, ...)."""
    return SlotHistory("f", 0, **parts)


def preempted_and_replaced() -> list[NodeTimes]:
    """Node 1 READY at 100 and preempted at 1000 (deleted by 1100); node 2 READY at 1400."""
    return [
        node(1, 0, creating_at=10, ready_at=100, dead_at=1000, deleting_at=1035, deleted_at=1100,
             loss_cause=LossCause.PREEMPTED),
        node(2, 1100, creating_at=1110, ready_at=1400),
    ]  # fmt: skip


def table(intervals: list[Interval]) -> list[tuple[float, float, Category, Phase | None]]:
    return [
        ((i.start - T0).total_seconds(), (i.end - T0).total_seconds(), i.category, i.phase)
        for i in intervals
    ]


def test_a_preemption_costs_delete_provisioning_and_setup_from_the_clouds_loss() -> None:
    history = slot_history(
        nodes=preempted_and_replaced(),
        attempts=[
            attempt(1, 1, 130, 1030, AttemptOutcome.PREEMPTED),
            attempt(2, 2, 1450),
        ],
        creates=[create(0, "ok", 1), create(1100, "ok", 2)],
    )
    ledger = slot_ledger(history, at(2000))
    assert table(ledger) == [
        (0, 100, C.STARTUP, P.PROVISIONING),
        (100, 130, C.STARTUP, P.SETUP),
        # Productive ends at the node's death, not when the attempt was seen ending.
        (130, 1000, C.PRODUCTIVE, None),
        (1000, 1100, C.RECOVERY, P.DELETE),
        (1100, 1400, C.RECOVERY, P.PROVISIONING),
        (1400, 1450, C.RECOVERY, P.SETUP),
        (1450, 2000, C.PRODUCTIVE, None),
    ]
    recovery = [i for i in ledger if i.category is C.RECOVERY]
    assert {i.cause for i in recovery} == {LossCause.PREEMPTED}
    assert [i.node for i in recovery] == ["n-1", "n-2", "n-2"]
    assert {i.zone for i in ledger} == {"us-east5-b"}


def test_the_attempt_ending_before_the_node_is_marked_dead_is_detection() -> None:
    history = slot_history(
        nodes=[node(1, 0, ready_at=10, dead_at=100, deleted_at=120)],
        attempts=[attempt(1, 1, 10, 90, AttemptOutcome.PREEMPTED)],
    )
    assert table(slot_ledger(history, at(150)))[1:] == [
        (10, 90, C.PRODUCTIVE, None),
        (90, 100, C.RECOVERY, P.DETECTION),
        (100, 120, C.RECOVERY, P.DELETE),
        (120, 150, C.RECOVERY, None),
    ]


def test_a_stockout_at_the_first_create_is_a_capacity_wait_not_a_recovery() -> None:
    history = slot_history(
        nodes=[
            node(1, 0, failed_at=5),
            node(2, 60, failed_at=65),
            node(3, 120, creating_at=121, ready_at=200),
        ],
        attempts=[attempt(1, 3, 210)],
        creates=[create(0, "capacity", 1), create(60, "quota", 2), create(120, "ok", 3)],
    )
    assert table(slot_ledger(history, at(300))) == [
        (0, 120, C.CAPACITY_WAIT, None),
        (120, 200, C.STARTUP, P.PROVISIONING),
        (200, 210, C.STARTUP, P.SETUP),
        (210, 300, C.PRODUCTIVE, None),
    ]


def test_a_stockout_after_a_preemption_is_part_of_the_recovery() -> None:
    history = slot_history(
        nodes=[
            node(1, 0, ready_at=0, dead_at=100, deleted_at=110, loss_cause=LossCause.PREEMPTED),
            node(2, 110, failed_at=111),
            node(3, 500, creating_at=500, ready_at=600),
        ],
        attempts=[attempt(1, 1, 0, 100, AttemptOutcome.PREEMPTED), attempt(2, 3, 620)],
        creates=[create(110, "capacity", 2), create(500, "ok", 3)],
    )
    assert table(slot_ledger(history, at(700)))[1:] == [
        (100, 110, C.RECOVERY, P.DELETE),
        (110, 500, C.RECOVERY, P.CAPACITY_WAIT),
        (500, 600, C.RECOVERY, P.PROVISIONING),
        (600, 620, C.RECOVERY, P.SETUP),
        (620, 700, C.PRODUCTIVE, None),
    ]


def test_a_crash_is_a_crash_restart_until_the_next_attempt_runs() -> None:
    history = slot_history(
        nodes=[node(1, 0, ready_at=0)],
        attempts=[attempt(1, 1, 0, 100, AttemptOutcome.FAILED), attempt(2, 1, 130)],
    )
    ledger = slot_ledger(history, at(200))
    assert table(ledger) == [
        (0, 100, C.PRODUCTIVE, None),
        (100, 130, C.CRASH_RESTART, P.SETUP),
        (130, 200, C.PRODUCTIVE, None),
    ]
    assert ledger[1].cause is LossCause.CRASH


def test_loss_causes_pick_the_category_and_none_is_a_recovery() -> None:
    for cause, category in (
        (LossCause.MAINTENANCE, C.MAINTENANCE),
        (LossCause.BAD_HOST, C.BAD_HOST),
        (LossCause.STUCK, C.RECOVERY),
        (None, C.RECOVERY),
    ):
        history = slot_history(
            nodes=[node(1, 0, ready_at=0, dead_at=100, deleted_at=150, loss_cause=cause)],
            attempts=[attempt(1, 1, 0, 100, AttemptOutcome.PREEMPTED)],
        )
        lost = slot_ledger(history, at(200))[1:]
        assert {i.category for i in lost} == {category}
        assert {i.cause for i in lost} == {cause}


def test_a_hold_a_spent_budget_and_a_finished_run() -> None:
    held = SlotHistory(
        "f", 0, nodes=[node(1, 0, ready_at=0)], attempts=[attempt(1, 1, 0, 50,
        AttemptOutcome.CANCELLED)], held_since=at(80),
    )  # fmt: skip
    assert table(slot_ledger(held, at(100))) == [
        (0, 50, C.PRODUCTIVE, None),
        # Cancelled by us, the slot still wanted: its relaunch is startup time.
        (50, 80, C.STARTUP, P.SETUP),
        (80, 100, C.HELD, None),
    ]
    spent = SlotHistory(
        "f", 0, nodes=[node(1, 0, ready_at=0, deleting_at=60, deleted_at=70)],
        attempts=[attempt(1, 1, 0, 50, AttemptOutcome.FAILED)], done=True,
    )  # fmt: skip
    assert table(slot_ledger(spent, at(100)))[1:] == [(50, 100, C.HELD, None)]
    finished = SlotHistory(
        "f", 0, nodes=[node(1, 0, ready_at=0, deleting_at=60, deleted_at=70)],
        attempts=[attempt(1, 1, 0, 50, AttemptOutcome.SUCCEEDED)], done=True,
    )  # fmt: skip
    assert table(slot_ledger(finished, at(100)))[1:] == [(50, 100, C.IDLE, None)]


def test_without_a_workload_a_ready_node_is_productive() -> None:
    history = SlotHistory(
        "f", 0, nodes=[node(1, 0, creating_at=1, ready_at=30, deleting_at=90, deleted_at=95)],
        workload=False, done=True,
    )  # fmt: skip
    assert table(slot_ledger(history, at(100))) == [
        (0, 30, C.IDLE, None),
        (30, 90, C.PRODUCTIVE, None),
        (90, 100, C.IDLE, None),
    ]


def test_nothing_before_the_first_create_and_since_clips() -> None:
    assert slot_ledger(SlotHistory("f", 0), at(10)) == []
    history = slot_history(nodes=[node(1, 5, ready_at=10)], attempts=[attempt(1, 1, 10)])
    assert slot_ledger(history, at(5)) == []
    assert table(clipped(slot_ledger(history, at(100)), at(7))) == [
        (7, 10, C.STARTUP, P.PROVISIONING),
        (10, 100, C.PRODUCTIVE, None),
    ]


# -- property: the intervals tile [first create, now] -------------------------------------------

_OUTCOMES = st.sampled_from([None, *AttemptOutcome])
_CAUSES = st.sampled_from([None, *LossCause])


@st.composite
def histories(draw: st.DrawFn) -> tuple[SlotHistory, datetime]:
    """Incarnations one after another, each with a random subset of its phases, attempts
    and creates at random times (also out of order, overlapping, or past `now`)."""
    t = 0.0
    nodes: list[NodeTimes] = []
    attempts: list[WorkloadAttemptRecord] = []
    creates: list[CreateAttemptRecord] = []
    gap = st.floats(min_value=0, max_value=500, allow_nan=False)
    for i in range(1, draw(st.integers(1, 5)) + 1):
        start = t = t + draw(gap)
        times: dict[str, float | None] = {}
        for name in ("creating_at", "ready_at", "dead_at", "deleting_at", "deleted_at"):
            if draw(st.booleans()):
                t += draw(gap)
                times[name] = t
        if not times and draw(st.booleans()):
            t += draw(gap)
            times["failed_at"] = t
        if "dead_at" in times and draw(st.booleans()):  # the cloud's time: any, even skewed
            times["cloud_lost_at"] = draw(st.floats(min_value=0, max_value=t + 600))
        nodes.append(node(i, start, **times, loss_cause=draw(_CAUSES)))
        creates.append(
            create(start, draw(st.sampled_from(["ok", "capacity", "quota", "transient"])), i)
        )
        for _ in range(draw(st.integers(0, 2))):
            a = draw(st.floats(min_value=start, max_value=t + 600, allow_nan=False))
            end = a + draw(gap) if draw(st.booleans()) else None
            attempts.append(attempt(len(attempts) + 1, i, a, end, draw(_OUTCOMES) if end else None))
    now = at(draw(st.floats(min_value=0, max_value=t + 1000, allow_nan=False)))
    history = SlotHistory(
        "f", 0, nodes=nodes, attempts=attempts, creates=creates,
        workload=draw(st.booleans()), done=draw(st.booleans()),
        held_since=at(draw(gap)) if draw(st.booleans()) else None,
    )  # fmt: skip
    return history, now


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_the_intervals_tile_first_create_to_now_exactly(case: tuple[SlotHistory, datetime]) -> None:
    history, now = case
    ledger = slot_ledger(history, now)
    first = history.first
    assert first is not None
    if first >= now:
        assert ledger == []
        return
    assert ledger[0].start == first
    assert ledger[-1].end == now
    for a, b in pairwise(ledger):
        assert a.end == b.start  # no gap, no overlap
    assert all(i.start < i.end for i in ledger)
    assert sum((i.end - i.start for i in ledger), timedelta()) == now - first
    for i in ledger:
        assert (i.phase is None) or i.category is not C.PRODUCTIVE


def test_a_death_recorded_only_by_our_own_delete_is_no_loss() -> None:
    # `down`: the store sets dead_at on entering DELETING; with no cause that is our delete.
    history = slot_history(
        nodes=[node(1, 0, ready_at=0, dead_at=50, deleting_at=50, deleted_at=70)],
        attempts=[attempt(1, 1, 0, 50, AttemptOutcome.CANCELLED)],
        done=True,
    )
    assert table(slot_ledger(history, at(100))) == [
        (0, 50, C.PRODUCTIVE, None),
        (50, 100, C.IDLE, None),
    ]
