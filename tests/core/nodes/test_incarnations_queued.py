"""Decision tables for one live incarnation (core/nodes/incarnations.py), one row per situation:
queued resources, from the accepted queue entry to a READY node, and the entry deleted
with its node.

A row (nodes_support.Row) and the other actions its test checks are the spec, kopf-style.
"""

from __future__ import annotations

from datetime import timedelta

from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import ErrorKind, Provisioning
from tpucared.core.vocab.actions import DeleteNode, Transition
from tpucared.gcp.tpu.states import QueuedState

from ..core_support import T0, Z1, Z2, ago, inc, listed, node, qr, run, seen, snapshot, spec, world
from .nodes_support import P, Row, by_row, check_row

QSPEC = spec(size=1, provisioning=Provisioning.QUEUED)


def qinc(phase: NodePhase, **kw: object) -> IncarnationRecord:
    return inc(1, 0, phase, queued_resource="sweep-0", **kw)  # type: ignore[arg-type]


QUEUED_ROWS: list[Row] = [
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


@by_row(QUEUED_ROWS)
def test_queued(row: Row) -> None:
    p = check_row(row, QSPEC)
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
