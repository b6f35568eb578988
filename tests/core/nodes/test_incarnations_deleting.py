"""Decision tables for one live incarnation (core/nodes/incarnations.py), one row per situation:
DEAD / DELETING, the delete until the node is gone.

A row (nodes_support.Row) and the other actions its test checks are the spec, kopf-style.
"""

from __future__ import annotations

from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import ErrorKind
from tpucared.core.vocab.actions import DeleteNode, Notice

from ..core_support import Z1, Z2, ago, deletes, failed, inc, listed, node, world
from .nodes_support import C, P, Row, by_row, check_row, plan_for


def deleting(**kw: object) -> IncarnationRecord:
    base: dict[str, object] = {"delete_calls": 1, "last_delete_at": ago(minutes=1)}
    base.update(kw)
    return inc(1, 0, P.DELETING, **base)  # type: ignore[arg-type]


DELETE_ROWS: list[Row] = [
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


@by_row(DELETE_ROWS)
def test_dead_and_deleting(row: Row) -> None:
    p = check_row(row)
    for d in p.of(DeleteNode):
        assert d.expected is row[1].phase


def test_a_delete_that_keeps_failing_is_told_once() -> None:
    record = deleting(delete_calls=5, last_delete_at=ago(minutes=16))
    p = plan_for(record, world(node(state=C.PREEMPTED)))
    (notice,) = p.of(Notice)
    assert notice.key == "delete-stuck/1"
    again = plan_for(record, world(node(state=C.PREEMPTED)), reported=frozenset({notice.key}))
    assert not again.of(Notice)
    assert notice.key in again.standing
    assert deletes(again) == ["sweep-0"]  # retries go on
