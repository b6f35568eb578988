"""A loss's cause in the store (node_values.py, write_nodes.py, write_many.py; issue 41 item 4):
a Transition or DeleteNode that carries one writes `nodes.loss_cause` and puts `cause` in its
event's details; one that carries none leaves the recorded cause alone, and repeating the
recorded cause puts it in no second event (each loss is counted once). The same through
`transition`/`begin_delete` and through `cas_many`, on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

import pytest
from store_support import ENGINES, T0, ready_nodes

from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import EventRecord, IncarnationRecord, NodePhase
from tpucared.core.vocab.actions import DeleteNode, Transition
from tpucared.store import Store

P = NodePhase


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _ready(store: Store, size: int = 2) -> list[IncarnationRecord]:
    return await ready_nodes(store, size)


async def _row(store: Store, incarnation_id: int) -> IncarnationRecord:
    async with store.read() as r:
        inc = await r.incarnation(incarnation_id)
    assert inc is not None
    return inc


async def _events(store: Store, incarnation_id: int) -> list[EventRecord]:
    async with store.read() as r:
        return await r.events(since_id=0, limit=100, incarnation_id=incarnation_id)


def _causes(events: list[EventRecord]) -> list[tuple[str, object]]:
    return [(e.kind, e.details["cause"]) for e in events if "cause" in e.details]


async def test_transition_and_delete_write_the_cause_once(store: Store) -> None:
    a, b = await _ready(store)
    async with store.write() as tx:
        await tx.transition(
            a.id, P.READY, P.DEAD, T0, end_reason="preempted", cause=LossCause.PREEMPTED
        )
        await tx.begin_delete(a.id, P.DEAD, T0, reason="dead: delete it")  # no cause: kept
        await tx.begin_delete(
            b.id, P.READY, T0, end_reason="deleted outside", cause=LossCause.DELETED_OUTSIDE
        )
        # The same cause again (a retried delete): written, but in no second event.
        await tx.begin_delete(b.id, P.DELETING, T0, cause=LossCause.DELETED_OUTSIDE)
    assert (await _row(store, a.id)).loss_cause is LossCause.PREEMPTED
    assert (await _row(store, b.id)).loss_cause is LossCause.DELETED_OUTSIDE
    assert _causes(await _events(store, a.id)) == [("node.dead", "preempted")]
    assert _causes(await _events(store, b.id)) == [("node.deleting", "deleted_outside")]


async def test_an_end_of_our_choosing_has_no_cause(store: Store) -> None:
    (a,) = await _ready(store, 1)
    async with store.write() as tx:
        await tx.begin_delete(a.id, P.READY, T0, end_reason="scaled down")
    assert (await _row(store, a.id)).loss_cause is None
    assert _causes(await _events(store, a.id)) == []


async def test_cas_many_writes_causes_as_the_single_writes_do(store: Store) -> None:
    a, b = await _ready(store)
    dead = Transition(
        reason="terminated", incarnation_id=a.id, node_name=a.node_name, expected=P.READY,
        new=P.DEAD, end_reason="host maintenance", cause=LossCause.MAINTENANCE,
    )  # fmt: skip
    actions = [
        dead,
        DeleteNode.of(replace(a, phase=P.DEAD), P.DEAD, reason="dead: delete it"),
        DeleteNode.of(b, P.READY, reason="stuck", end_reason="stuck", cause=LossCause.STUCK),
    ]
    async with store.write() as tx:
        results = await tx.cas_many(actions, T0)
    assert all(isinstance(r, IncarnationRecord) for r in results)
    assert (await _row(store, a.id)).loss_cause is LossCause.MAINTENANCE
    assert (await _row(store, b.id)).loss_cause is LossCause.STUCK
    assert _causes(await _events(store, a.id)) == [("node.dead", "maintenance")]
    assert _causes(await _events(store, b.id)) == [("node.deleting", "stuck")]
