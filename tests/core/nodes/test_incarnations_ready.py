"""Decision tables for one live incarnation (core/nodes/incarnations.py), one row per situation:
READY, when a usable node counts as dead, and what is never ours to adopt or touch.

A row (nodes_support.Row) and the other actions its test checks are the spec, kopf-style.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from tpucared.core.nodes.cloud import ABSENT
from tpucared.core.vocab.actions import (
    Adopt,
    CreateNode,
    DeleteNode,
    Notice,
    RecordCloud,
    Transition,
)

from ..core_support import (
    FLEET,
    OWNER,
    T0,
    Z1,
    Z2,
    ago,
    failed,
    inc,
    listed,
    node,
    ours,
    run,
    seen,
    snapshot,
    world,
)
from .nodes_support import READY_NODE, SPEC, C, P, Row, by_row, check_row, pending, plan_for, ready

DEAD_DELETE = [("ready", "dead")]

# ---------------------------------------------------------------------------------------------
# READY: when does a usable node count as dead?

READY_ROWS: list[Row] = [
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


@by_row(READY_ROWS)
def test_ready(row: Row) -> None:
    check_row(row)


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


def test_no_adopt_or_touch_without_owner() -> None:
    other = node(labels=ours(FLEET, "other-daemon"))
    p = run([SPEC], world(other), snapshot(specs=[SPEC]))
    assert not p.of(Adopt)
    assert not p.of(DeleteNode)
    assert OWNER != "other-daemon"
