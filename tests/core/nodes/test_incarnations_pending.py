"""Decision tables for one live incarnation (core/nodes/incarnations.py), one row per situation:
REQUESTED / CREATING, the create's outcome, the list-after-create window, stuck creates.

A row (nodes_support.Row) and the other actions its test checks are the spec, kopf-style.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tpucared.core.model.observed import ObservedNode
from tpucared.core.model.specs import ErrorKind
from tpucared.core.nodes.cloud import ABSENT
from tpucared.core.vocab.actions import CreateNode, Notice, Transition

from ..core_support import (
    T0,
    Z1,
    Z2,
    ago,
    deletes,
    edges,
    failed,
    listed,
    node,
    run,
    seen,
    snapshot,
    world,
)
from .nodes_support import SPEC, C, P, Row, by_row, check_row, pending, plan_for

M = timedelta(minutes=1)

PENDING_ROWS: list[Row] = [
    # id, record, observations, expected edges, expected deletes
    ("requested-waiting", pending(P.REQUESTED), world(), [], []),
    ("requested-unconfirmed", pending(P.REQUESTED, 6 * M), world(), [("requested", "failed")], []),
    (
        "requested-unconfirmed-blind",
        pending(P.REQUESTED, 6 * M),
        [failed(Z1), listed(Z2)],
        [],
        [],
    ),
    (
        "requested-listed-creating",
        pending(P.REQUESTED),
        world(node(state=C.CREATING)),
        [("requested", "creating")],
        [],
    ),
    (
        "requested-listed-ready",
        pending(P.REQUESTED),
        world(node()),
        [("requested", "ready")],
        [],
    ),
    (
        "requested-listed-preempted",
        pending(P.REQUESTED),
        world(node(state=C.PREEMPTED)),
        [("requested", "dead")],
        ["sweep-0"],
    ),
    (
        "capacity-error",
        pending(P.REQUESTED, error=ErrorKind.CAPACITY),
        world(),
        [("requested", "failed")],
        [],
    ),
    (
        "quota-error",
        pending(P.REQUESTED, error=ErrorKind.QUOTA),
        world(),
        [("requested", "failed")],
        [],
    ),
    (
        "error-blind-still-fails",
        pending(P.REQUESTED, error=ErrorKind.PERMISSION),
        [failed(Z1), listed(Z2)],
        [("requested", "failed")],
        [],
    ),
    (
        "transient-error-but-created",
        pending(P.REQUESTED, error=ErrorKind.TRANSIENT),
        world(node(state=C.CREATING)),
        [("requested", "creating")],
        [],
    ),
    (
        "already-exists-ours",
        pending(P.REQUESTED, error=ErrorKind.ALREADY_EXISTS),
        world(node()),
        [("requested", "ready")],
        [],
    ),
    (
        "already-exists-foreign",
        pending(P.REQUESTED, error=ErrorKind.ALREADY_EXISTS),
        world(node(labels={"owner": "bob"})),
        [("requested", "failed")],
        [],
    ),
    (
        "already-exists-gone",
        pending(P.REQUESTED, error=ErrorKind.ALREADY_EXISTS),
        world(),
        [("requested", "failed")],
        [],
    ),
    (
        "already-exists-blind",
        pending(P.REQUESTED, error=ErrorKind.ALREADY_EXISTS),
        [failed(Z1), listed(Z2)],
        [],
        [],
    ),
    (
        "creating-listed",
        seen(pending(P.CREATING), node(state=C.CREATING)),
        world(node(state=C.CREATING)),
        [],
        [],
    ),
    (
        "creating-ready",
        seen(pending(P.CREATING), node(state=C.CREATING)),
        world(node()),
        [("creating", "ready")],
        [],
    ),
    (
        "creating-stuck",
        seen(pending(P.CREATING, 31 * M), node(state=C.CREATING)),
        world(node(state=C.CREATING)),
        [("creating", "dead")],
        ["sweep-0"],
    ),
    (
        "creating-preempted",
        seen(pending(P.CREATING), node(state=C.CREATING)),
        world(node(state=C.PREEMPTED)),
        [("creating", "dead")],
        ["sweep-0"],
    ),
    (
        "operation-failed-nothing-listed",
        pending(P.CREATING, error=ErrorKind.CAPACITY),
        world(),
        [("creating", "failed")],
        [],
    ),
    (
        "operation-failed-node-left",
        pending(P.CREATING, error=ErrorKind.CAPACITY),
        world(node(state=C.CREATING)),
        [("creating", "dead")],
        ["sweep-0"],
    ),
    (
        "operation-running-not-listed",
        pending(P.CREATING, 10 * M, operation="op-1"),
        world(),
        [],
        [],
    ),
    (
        "operation-running-too-long",
        pending(P.CREATING, 31 * M, operation="op-1"),
        world(),
        [("creating", "failed")],
        [],
    ),
    (
        "list-after-create-grace",
        pending(P.CREATING, 1 * M),
        world(),
        [],
        [],
    ),
    (
        "never-listed",
        pending(P.CREATING, 3 * M, cloud_state=ABSENT, cloud_state_since=ago(seconds=30)),
        world(),
        [("creating", "failed")],
        [],
    ),
    (
        "vanished-while-creating",
        pending(
            P.CREATING, 3 * M, cloud_id="101", cloud_state=ABSENT, cloud_state_since=ago(seconds=30)
        ),
        world(),
        [("creating", "dead"), ("dead", "deleted")],
        [],
    ),
    (
        "labels-not-visible-yet",
        pending(P.CREATING),
        world(node(state=C.CREATING, labels={})),
        [],
        [],
    ),
    (
        "creating-zone-failed",
        pending(P.CREATING, 40 * M),
        [failed(Z1), listed(Z2)],
        [],
        [],
    ),
]


@by_row(PENDING_ROWS)
def test_pending(row: Row) -> None:
    check_row(row)


@pytest.mark.parametrize(
    ("error", "failures", "next_zone", "wait_at_least", "wait_at_most"),
    [
        # First stockout: the other zone has not been tried, so try it now.
        (ErrorKind.CAPACITY, 0, Z2, None, None),
        # Every zone stocked out in a row: the capacity backoff (3.6..4 s, near-constant) runs
        # from the failed create's post, here 2 s before its failure is seen.
        (ErrorKind.CAPACITY, 1, Z2, timedelta(seconds=1.6), timedelta(seconds=2)),
        (ErrorKind.CAPACITY, 9, Z2, timedelta(seconds=1.6), timedelta(seconds=2)),
        # Quota and friends: same zone, 10-30 minutes.
        (ErrorKind.QUOTA, 0, Z1, timedelta(minutes=10), timedelta(minutes=10)),
        (ErrorKind.PERMISSION, 3, Z1, timedelta(minutes=10), timedelta(minutes=30)),
        (ErrorKind.INVALID, 0, Z1, timedelta(minutes=10), timedelta(minutes=10)),
        # Transient: same zone, short.
        (ErrorKind.TRANSIENT, 0, Z1, timedelta(0), timedelta(seconds=5)),
        (ErrorKind.CONFLICT, 4, Z1, timedelta(0), timedelta(seconds=80)),
    ],
)
def test_create_failure_budget(
    error: ErrorKind,
    failures: int,
    next_zone: str,
    wait_at_least: timedelta | None,
    wait_at_most: timedelta | None,
) -> None:
    from ..core_support import slot

    record = pending(P.REQUESTED, timedelta(seconds=2), error=error)
    snap = snapshot(record, specs=[SPEC], slots=[slot(0, create_failures=failures)])
    p = run([SPEC], world(), snap)
    (fail,) = p.of(Transition)
    update = fail.slot_update
    assert update is not None
    assert update.create_failures == failures + 1
    assert update.next_zone == next_zone
    if wait_at_least is None:
        assert update.next_create_at is None
        assert [(c.zone, c.attempt) for c in p.of(CreateNode)] == [(next_zone, failures + 2)]
    else:
        assert update.next_create_at is not None
        assert wait_at_most is not None
        wait = update.next_create_at - T0
        assert wait_at_least <= wait <= wait_at_most
        assert not p.of(CreateNode)
        (hold,) = p.holds
        assert hold.until == update.next_create_at


@pytest.mark.parametrize(
    ("seen_after", "wait_at_least", "wait_at_most"),
    [
        (0.0, 3.6, 4.0),  # failed at the POST: the whole wait
        (2.0, 1.6, 2.0),  # the emulator's 2 s failing operation: the rest of the wait
        (3.9, 0.0, 0.1),  # the wait may end while the failure is being seen
        (10.0, None, None),  # a slow failing operation: the next create goes at once
        (600.0, None, None),
    ],
)
def test_the_capacity_wait_is_a_pace_from_the_post(
    seen_after: float, wait_at_least: float | None, wait_at_most: float | None
) -> None:
    """Every zone stocked out: the next create is due one capacity wait after the failed one
    was posted, not after its failure was seen. A slot hunts at one create per wait however
    long the API takes to fail a create, and loses no time to a slow failure."""
    from ..core_support import slot

    record = pending(P.REQUESTED, timedelta(seconds=seen_after), error=ErrorKind.CAPACITY)
    snap = snapshot(record, specs=[SPEC], slots=[slot(0, create_failures=1)])
    p = run([SPEC], world(), snap)
    (fail,) = p.of(Transition)
    update = fail.slot_update
    assert update is not None
    if wait_at_least is None:
        assert update.next_create_at is None
        assert [c.zone for c in p.of(CreateNode)] == [Z2]
        return
    assert wait_at_most is not None
    due = update.next_create_at
    if due is None:  # the wait ended exactly as the failure was seen
        assert wait_at_least == 0.0
        assert len(p.of(CreateNode)) == 1
        return
    assert timedelta(seconds=wait_at_least) <= due - T0 <= timedelta(seconds=wait_at_most)
    assert not p.of(CreateNode)


def test_hard_create_errors_tell_a_person() -> None:
    p = plan_for(pending(P.REQUESTED, error=ErrorKind.QUOTA), world())
    (notice,) = p.of(Notice)
    assert notice.key == "create-failed/1"
    assert "quota" in notice.reason
    assert "a person must fix this" in notice.reason


def _incomplete_slice() -> ObservedNode:
    """A DEAD node that capacity did not take: what the cloud made cannot be used."""
    return replace(node(state=C.PREEMPTED), state="SLICE_INCOMPLETE", defect="1 of 2 VMs")


@pytest.mark.parametrize("failures", [0, 1, 2, 5, 9])
def test_a_defective_result_before_ready_is_a_failed_create_with_a_doubling_wait(
    failures: int,
) -> None:
    """Issue 39: a slice that never becomes whole was deleted and made again at capacity's
    pace (49 paid slice creates in 4 minutes). It is a failed create of its own kind: the same
    zone, a wait of 30 s doubling to 30 min, a person told at the third in a row."""
    from ..core_support import slot

    record = seen(pending(P.CREATING), node(state=C.CREATING))
    snap = snapshot(record, specs=[SPEC], slots=[slot(0, create_failures=failures)])
    p = run([SPEC], world(_incomplete_slice()), snap)
    assert edges(p) == [("creating", "dead")]
    assert deletes(p) == ["sweep-0"]
    (dead,) = p.of(Transition)
    update = dead.slot_update
    assert update is not None
    assert update.create_failures == failures + 1
    assert update.next_zone == Z1
    assert "SLICE_INCOMPLETE before READY: 1 of 2 VMs" in (update.last_error or "")
    assert update.next_create_at is not None
    ceiling = min(timedelta(seconds=30) * 2**failures, timedelta(minutes=30))
    assert timedelta(0) < update.next_create_at - T0 <= ceiling
    assert not p.of(CreateNode)
    notices = p.of(Notice)
    if failures + 1 in (3, 10):
        (notice,) = notices
        assert notice.key == "create-defective/1"
        assert f"{failures + 1} creates of sweep-0 in a row failed" in notice.reason
    else:
        assert not notices


def test_a_dead_node_without_a_defect_before_ready_is_still_a_stockout() -> None:
    record = seen(pending(P.CREATING), node(state=C.CREATING))
    p = run([SPEC], world(node(state=C.PREEMPTED)), snapshot(record, specs=[SPEC]))
    (dead,) = p.of(Transition)
    assert dead.slot_update is not None
    assert dead.slot_update.next_zone == Z2  # capacity: the next zone, at once
    assert dead.slot_update.next_create_at is None


def test_a_ready_node_resets_the_budget() -> None:
    p = plan_for(seen(pending(P.CREATING), node(state=C.CREATING)), world(node()))
    (t,) = p.of(Transition)
    assert t.slot_update is not None
    assert (t.slot_update.create_failures, t.slot_update.next_create_at) == (0, None)
    assert t.slot_update.next_zone == Z1  # sticky: the zone that worked
    assert t.cloud is not None
    assert t.cloud.endpoints is not None
