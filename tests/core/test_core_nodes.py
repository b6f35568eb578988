"""Decision tables for one live incarnation (core/nodes/incarnations.py), one row per situation.

Each row: the incarnation as recorded, what the zone's list shows, and the phase edges,
deletes and other actions the plan must hold for it. kopf-style: the table is the spec.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from core_support import (
    FLEET,
    OWNER,
    T0,
    Z1,
    Z2,
    ago,
    deletes,
    edges,
    failed,
    inc,
    listed,
    node,
    ours,
    qr,
    run,
    seen,
    snapshot,
    spec,
    world,
)

from tpucared.core.model.observed import CloudState, ObservedNode, QueuedState, ZoneObservation
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import ErrorKind, Provisioning
from tpucared.core.nodes.cloud import ABSENT
from tpucared.core.planning.actions import (
    Adopt,
    CreateNode,
    DeleteNode,
    Notice,
    RecordCloud,
    Transition,
)
from tpucared.core.planning.plan import Plan

P = NodePhase
C = CloudState
SPEC = spec(size=1)
DEAD_DELETE = [("ready", "dead")]


def plan_for(
    record: IncarnationRecord,
    observations: list[ZoneObservation],
    reported: frozenset[str] = frozenset(),
) -> Plan:
    return run([SPEC], observations, snapshot(record, specs=[SPEC]), reported=reported)


def ready(
    n: ObservedNode, *, since: timedelta = timedelta(minutes=5), **kw: object
) -> IncarnationRecord:
    return seen(inc(1, 0, P.READY, since=T0 - since, **kw), n)  # type: ignore[arg-type]


READY_NODE = node()

# ---------------------------------------------------------------------------------------------
# READY: when does a usable node count as dead?

READY_ROWS = [
    # id, record, observations, expected edges, expected deletes
    ("healthy", ready(READY_NODE), world(READY_NODE), [], []),
    ("preempted", ready(READY_NODE), world(node(state=C.PREEMPTED)), DEAD_DELETE, ["sweep-0"]),
    ("terminated", ready(READY_NODE), world(node(state=C.TERMINATED)), DEAD_DELETE, ["sweep-0"]),
    # The API's own UNKNOWN is dead only after its grace (policy timeout "unknown", 10 min).
    ("unknown", ready(READY_NODE), world(node(state=C.UNKNOWN)), [], []),
    (
        "unknown-past-its-grace",
        ready(node(state=C.UNKNOWN), since=timedelta(minutes=11)),
        world(node(state=C.UNKNOWN)),
        DEAD_DELETE,
        ["sweep-0"],
    ),
    # A state we cannot read is never acted on, however long it lasts.
    (
        "unrecognized",
        ready(node(state=C.UNRECOGNIZED), since=timedelta(days=3)),
        world(node(state=C.UNRECOGNIZED)),
        [],
        [],
    ),
    ("stopped", ready(READY_NODE), world(node(state=C.STOPPED)), DEAD_DELETE, ["sweep-0"]),
    (
        "deleted-by-someone",
        ready(READY_NODE),
        world(node(state=C.DELETING)),
        [("ready", "deleting")],
        [],
    ),
    (
        "zone-list-failed",
        ready(READY_NODE),
        [failed(Z1), listed(Z2)],
        [],
        [],
    ),
    (
        "zone-not-observed",
        ready(READY_NODE),
        [listed(Z2)],
        [],
        [],
    ),
    (
        "missing-once",
        ready(READY_NODE),
        world(),
        [],
        [],
    ),
    (
        "missing-past-vanish-grace",
        replace(ready(READY_NODE), cloud_state=ABSENT, cloud_state_since=ago(seconds=30)),
        world(),
        [("ready", "dead"), ("dead", "deleted")],
        [],
    ),
    (
        "missing-within-vanish-grace",
        replace(ready(READY_NODE), cloud_state=ABSENT, cloud_state_since=ago(seconds=10)),
        world(),
        [],
        [],
    ),
    (
        "repairing-a-while",
        seen(inc(1, 0, P.READY), node(state=C.REPAIRING), since=ago(minutes=5)),
        world(node(state=C.REPAIRING)),
        [],
        [],
    ),
    (
        "repairing-too-long",
        seen(inc(1, 0, P.READY), node(state=C.REPAIRING), since=ago(minutes=31)),
        world(node(state=C.REPAIRING)),
        DEAD_DELETE,
        ["sweep-0"],
    ),
    (
        "restarting-too-long",
        seen(inc(1, 0, P.READY), node(state=C.RESTARTING), since=ago(minutes=21)),
        world(node(state=C.RESTARTING)),
        DEAD_DELETE,
        ["sweep-0"],
    ),
    (
        "unhealthy-briefly",
        seen(inc(1, 0, P.READY), node(health="TIMEOUT"), since=ago(minutes=2)),
        world(node(health="TIMEOUT")),
        [],
        [],
    ),
    (
        "unhealthy-past-grace",
        seen(inc(1, 0, P.READY), node(health="UNHEALTHY_MAINTENANCE"), since=ago(minutes=11)),
        world(node(health="UNHEALTHY_MAINTENANCE")),
        DEAD_DELETE,
        ["sweep-0"],
    ),
    (
        "tensorflow-health-ignored",
        seen(inc(1, 0, P.READY), node(health="UNHEALTHY_TENSORFLOW"), since=ago(hours=5)),
        world(node(health="UNHEALTHY_TENSORFLOW")),
        [],
        [],
    ),
    (
        "same-name-other-node",
        replace(ready(READY_NODE), cloud_state=ABSENT, cloud_state_since=ago(seconds=30)),
        world(node(cloud_id="999")),
        [("ready", "dead"), ("dead", "deleted")],
        [],
    ),
    (
        "lost-our-labels",
        ready(READY_NODE),
        world(node(labels={"team": "x"})),
        [("ready", "dead"), ("dead", "deleted")],
        [],
    ),
    (
        "other-owner-now",
        ready(READY_NODE),
        world(node(labels=ours(FLEET, "someone-else"))),
        [("ready", "dead"), ("dead", "deleted")],
        [],
    ),
]


@pytest.mark.parametrize(
    ("record", "observations", "want_edges", "want_deletes"),
    [row[1:] for row in READY_ROWS],
    ids=[row[0] for row in READY_ROWS],
)
def test_ready(
    record: IncarnationRecord,
    observations: list[ZoneObservation],
    want_edges: list[tuple[str, str]],
    want_deletes: list[str],
) -> None:
    p = plan_for(record, observations)
    assert edges(p, 1) == want_edges
    assert deletes(p) == want_deletes


def test_preemption_counts_and_recreates_at_once() -> None:
    p = plan_for(ready(READY_NODE), world(node(state=C.PREEMPTED)))
    (dead,) = [t for t in p.of(Transition) if t.new is P.DEAD]
    assert dead.end_reason == "preempted"
    assert dead.slot_update is not None
    assert dead.slot_update.add_preemptions == 1
    assert dead.slot_update.next_create_at is None
    (delete,) = p.of(DeleteNode)
    assert delete.expected is P.DEAD
    # The name is still taken until the delete finishes: no create yet.
    assert not p.of(CreateNode)
    assert [h.node_name for h in p.holds] == ["sweep-0"]


def test_relabelled_while_creating_moves_to_the_next_zone_at_once() -> None:
    """A person relabels our node while it is still CREATING: the name is taken in that zone
    by a node we must not touch, and the fleet has a second zone: the slot goes there at once
    instead of waiting out the 10-30 minute error backoff."""
    p = plan_for(pending(P.CREATING), world(node(state=C.CREATING, labels={"team": "x"})))
    (failed,) = [t for t in p.of(Transition) if t.new is P.FAILED]
    assert failed.slot_update is not None
    assert failed.slot_update.next_zone == Z2
    assert failed.slot_update.next_create_at is None
    assert [(c.node_name, c.zone) for c in p.of(CreateNode)] == [("sweep-0", Z2)]


def test_vanished_node_is_recreated_in_the_same_plan() -> None:
    record = replace(ready(READY_NODE), cloud_state=ABSENT, cloud_state_since=ago(seconds=30))
    p = plan_for(record, world())
    assert [c.node_name for c in p.of(CreateNode)] == ["sweep-0"]
    kinds = [a.kind for a in p.actions]
    assert kinds.index("transition") < kinds.index("create")


def test_losing_our_labels_tells_a_person_and_touches_nothing() -> None:
    p = plan_for(ready(READY_NODE), world(node(labels={})))
    (notice,) = p.of(Notice)
    assert notice.key == f"foreign/{Z1}/sweep-0"
    assert not p.of(DeleteNode)
    # The slot moves on to the next zone, where the name is free.
    assert [(c.node_name, c.zone) for c in p.of(CreateNode)] == [("sweep-0", Z2)]


def test_facts_are_recorded_when_they_change() -> None:
    record = ready(READY_NODE)
    p = plan_for(record, world(node(health="TIMEOUT")))
    (rec,) = p.of(RecordCloud)
    assert rec.cloud.health == "TIMEOUT"
    assert rec.cloud.unhealthy_since == T0
    assert rec.cloud.cloud_state_since == record.cloud_state_since  # state unchanged


# ---------------------------------------------------------------------------------------------
# REQUESTED / CREATING: the create's outcome, the list-after-create window, stuck creates


def pending(
    phase: NodePhase, age: timedelta = timedelta(minutes=1), **kw: object
) -> IncarnationRecord:
    return inc(1, 0, phase, since=T0 - age, **kw)  # type: ignore[arg-type]


M = timedelta(minutes=1)

PENDING_ROWS = [
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


@pytest.mark.parametrize(
    ("record", "observations", "want_edges", "want_deletes"),
    [row[1:] for row in PENDING_ROWS],
    ids=[row[0] for row in PENDING_ROWS],
)
def test_pending(
    record: IncarnationRecord,
    observations: list[ZoneObservation],
    want_edges: list[tuple[str, str]],
    want_deletes: list[str],
) -> None:
    p = plan_for(record, observations)
    assert edges(p, 1) == want_edges
    assert deletes(p) == want_deletes


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
    from core_support import slot

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
    from core_support import slot

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


def test_a_ready_node_resets_the_budget() -> None:
    p = plan_for(seen(pending(P.CREATING), node(state=C.CREATING)), world(node()))
    (t,) = p.of(Transition)
    assert t.slot_update is not None
    assert (t.slot_update.create_failures, t.slot_update.next_create_at) == (0, None)
    assert t.slot_update.next_zone == Z1  # sticky: the zone that worked
    assert t.cloud is not None
    assert t.cloud.endpoints is not None


# ---------------------------------------------------------------------------------------------
# DEAD / DELETING


def deleting(**kw: object) -> IncarnationRecord:
    base: dict[str, object] = {"delete_calls": 1, "last_delete_at": ago(minutes=1)}
    base.update(kw)
    return inc(1, 0, P.DELETING, **base)  # type: ignore[arg-type]


DELETE_ROWS = [
    ("dead-listed", inc(1, 0, P.DEAD), world(node(state=C.PREEMPTED)), [], ["sweep-0"]),
    ("dead-gone", inc(1, 0, P.DEAD), world(), [("dead", "deleted")], []),
    ("dead-blind", inc(1, 0, P.DEAD), [failed(Z1), listed(Z2)], [], ["sweep-0"]),
    ("deleting-listed", deleting(), world(node(state=C.DELETING)), [], []),
    ("deleting-gone", deleting(), world(), [("deleting", "deleted")], []),
    ("deleting-blind", deleting(), [failed(Z1), listed(Z2)], [], []),
    (
        "deleting-not-found",
        deleting(error=ErrorKind.NOT_FOUND),
        [failed(Z1), listed(Z2)],
        [("deleting", "deleted")],
        [],
    ),
    (
        "deleting-stuck",
        deleting(last_delete_at=ago(minutes=16)),
        world(node(state=C.DELETING)),
        [],
        ["sweep-0"],
    ),
    (
        "deleting-operation-running",
        deleting(operation="op-2", last_delete_at=ago(minutes=5)),
        world(node(state=C.DELETING)),
        [],
        [],
    ),
    (
        "delete-conflict-retried",
        deleting(error=ErrorKind.CONFLICT, last_delete_at=ago(seconds=10)),
        world(node(state=C.PREEMPTED)),
        [],
        ["sweep-0"],
    ),
    (
        "delete-denied-waits",
        deleting(error=ErrorKind.PERMISSION, last_delete_at=ago(minutes=5)),
        world(node(state=C.PREEMPTED)),
        [],
        [],
    ),
    (
        "delete-denied-retried-later",
        deleting(error=ErrorKind.PERMISSION, last_delete_at=ago(minutes=11)),
        world(node(state=C.PREEMPTED)),
        [],
        ["sweep-0"],
    ),
    (
        "external-delete-adopted",
        deleting(delete_calls=0, last_delete_at=None, since=ago(minutes=16)),
        world(node(state=C.DELETING)),
        [],
        ["sweep-0"],
    ),
]


@pytest.mark.parametrize(
    ("record", "observations", "want_edges", "want_deletes"),
    [row[1:] for row in DELETE_ROWS],
    ids=[row[0] for row in DELETE_ROWS],
)
def test_dead_and_deleting(
    record: IncarnationRecord,
    observations: list[ZoneObservation],
    want_edges: list[tuple[str, str]],
    want_deletes: list[str],
) -> None:
    p = plan_for(record, observations)
    assert edges(p, 1) == want_edges
    assert deletes(p) == want_deletes
    for d in p.of(DeleteNode):
        assert d.expected is record.phase


def test_a_delete_that_keeps_failing_is_told_once() -> None:
    record = deleting(delete_calls=5, last_delete_at=ago(minutes=16))
    p = plan_for(record, world(node(state=C.PREEMPTED)))
    (notice,) = p.of(Notice)
    assert notice.key == "delete-stuck/1"
    again = plan_for(record, world(node(state=C.PREEMPTED)), reported=frozenset({notice.key}))
    assert not again.of(Notice)
    assert notice.key in again.standing
    assert deletes(again) == ["sweep-0"]  # retries go on


# ---------------------------------------------------------------------------------------------
# Queued resources


QSPEC = spec(size=1, provisioning=Provisioning.QUEUED)


def qinc(phase: NodePhase, **kw: object) -> IncarnationRecord:
    return inc(1, 0, phase, queued_resource="sweep-0", **kw)  # type: ignore[arg-type]


QUEUED_ROWS = [
    (
        "accepted-waiting",
        qinc(P.REQUESTED, since=ago(minutes=1)),
        world(queued=True, zones=(Z1, Z2)),
        [],
        [],
    ),
    (
        "queued-listed",
        qinc(P.REQUESTED),
        [listed(Z1, queued=[qr()]), listed(Z2, queued=[])],
        [("requested", "creating")],
        [],
    ),
    (
        "waits-for-days",
        qinc(
            P.CREATING,
            since=ago(days=3),
            cloud_state="QUEUED:WAITING_FOR_RESOURCES",
            cloud_state_since=ago(days=3),
        ),
        [listed(Z1, queued=[qr()]), listed(Z2, queued=[])],
        [],
        [],
    ),
    (
        "provisioning-too-long",
        qinc(P.CREATING, cloud_state="QUEUED:PROVISIONING", cloud_state_since=ago(minutes=61)),
        [listed(Z1, queued=[qr(state=QueuedState.PROVISIONING)]), listed(Z2, queued=[])],
        [("creating", "dead")],
        ["sweep-0"],
    ),
    (
        "queue-failed",
        qinc(P.CREATING),
        [listed(Z1, queued=[qr(state=QueuedState.FAILED)]), listed(Z2, queued=[])],
        [("creating", "dead")],
        ["sweep-0"],
    ),
    (
        "active-ready",
        qinc(P.CREATING),
        [
            listed(Z1, node(queued_resource="sweep-0"), queued=[qr(state=QueuedState.ACTIVE)]),
            listed(Z2, queued=[]),
        ],
        [("creating", "ready")],
        [],
    ),
    (
        "suspended-after-preemption",
        seen(qinc(P.READY), node()),
        [listed(Z1, queued=[qr(state=QueuedState.SUSPENDED)]), listed(Z2, queued=[])],
        [("ready", "dead")],
        ["sweep-0"],
    ),
    (
        "queued-list-not-taken",
        qinc(P.CREATING, since=ago(hours=2)),
        world(),
        [],
        [],
    ),
    (
        "deleting-until-queue-entry-gone",
        qinc(P.DELETING, delete_calls=1, last_delete_at=ago(minutes=1)),
        [listed(Z1, queued=[qr(state=QueuedState.DELETING)]), listed(Z2, queued=[])],
        [],
        [],
    ),
    (
        "queue-entry-gone",
        qinc(P.DELETING, delete_calls=1, last_delete_at=ago(minutes=1)),
        [listed(Z1, queued=[]), listed(Z2, queued=[])],
        [("deleting", "deleted")],
        [],
    ),
]


@pytest.mark.parametrize(
    ("record", "observations", "want_edges", "want_deletes"),
    [row[1:] for row in QUEUED_ROWS],
    ids=[row[0] for row in QUEUED_ROWS],
)
def test_queued(
    record: IncarnationRecord,
    observations: list[ZoneObservation],
    want_edges: list[tuple[str, str]],
    want_deletes: list[str],
) -> None:
    p = run([QSPEC], observations, snapshot(record, specs=[QSPEC]))
    assert edges(p, 1) == want_edges
    assert deletes(p) == want_deletes
    for d in p.of(DeleteNode):
        assert d.queued_resource == "sweep-0"  # the queued resource goes, with its node


def test_failed_queue_entry_counts_as_a_create_failure() -> None:
    record = qinc(P.CREATING)
    obs = [
        listed(Z1, queued=[qr(state=QueuedState.FAILED, error=ErrorKind.QUOTA)]),
        listed(Z2, queued=[]),
    ]
    p = run([QSPEC], obs, snapshot(record, specs=[QSPEC]))
    (dead,) = p.of(Transition)
    assert dead.slot_update is not None
    assert dead.slot_update.create_failures == 1
    assert dead.slot_update.next_create_at is not None
    assert dead.slot_update.next_create_at - T0 >= timedelta(minutes=10)


def test_no_adopt_or_touch_without_owner() -> None:
    other = node(labels=ours(FLEET, "other-daemon"))
    p = run([SPEC], world(other), snapshot(specs=[SPEC]))
    assert not p.of(Adopt)
    assert not p.of(DeleteNode)
    assert OWNER != "other-daemon"
