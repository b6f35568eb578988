"""Decision tables for one live incarnation (core/nodes/incarnations.py), one row per situation:
DEAD / DELETING, the delete until the node is gone.

Each row: the incarnation as recorded, what the zone's list shows, and the phase edges,
deletes and other actions the plan must hold for it. kopf-style: the table is the spec.
"""

from __future__ import annotations

import pytest

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import ErrorKind
from tpucared.core.vocab.actions import DeleteNode, Notice

from ..core_support import Z1, Z2, ago, deletes, edges, failed, inc, listed, node, world
from .nodes_support import C, P, plan_for


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
