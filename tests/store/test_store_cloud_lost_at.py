"""The cloud's own time of a loss in the store (migration 0016, issue 42): a Transition that
carries `lost_at` writes `nodes.cloud_lost_at` and puts `lost_at` in its event's details, one
without it leaves the column NULL; through `transition` and through `cas_many` alike, and the
ledger's read hands it to the ledger, which starts the loss there. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from store_support import ENGINES, T0, ready_nodes

from tpucared.core.ledger.categories import Category, Phase, SlotHistory
from tpucared.core.ledger.tiling import slot_ledger
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import AttemptOutcome, IncarnationRecord, NodePhase
from tpucared.core.vocab.actions import Transition
from tpucared.store import Store

P = NodePhase
M = timedelta(minutes=1)


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _ready(store: Store, size: int = 2) -> list[IncarnationRecord]:
    return await ready_nodes(store, size, T0 + M)


async def _row(store: Store, incarnation_id: int) -> IncarnationRecord:
    async with store.read() as r:
        inc = await r.incarnation(incarnation_id)
    assert inc is not None
    return inc


async def _lost_at_events(store: Store, incarnation_id: int) -> list[tuple[str, object]]:
    async with store.read() as r:
        events = await r.events(since_id=0, limit=100, incarnation_id=incarnation_id)
    return [(e.kind, e.details["lost_at"]) for e in events if "lost_at" in e.details]


async def test_transition_and_cas_many_write_the_clouds_time(store: Store) -> None:
    a, b = await _ready(store)
    cloud = T0 + 10 * M  # the preemption record's time; the daemon notices at T0 + 11m
    noticed = T0 + 11 * M
    async with store.write() as tx:
        await tx.transition(a.id, P.READY, P.DEAD, noticed, end_reason="preempted",
                            cause=LossCause.PREEMPTED, lost_at=cloud)  # fmt: skip
        dead = Transition(
            reason="preempted", incarnation_id=b.id, node_name=b.node_name, expected=P.READY,
            new=P.DEAD, end_reason="preempted", cause=LossCause.PREEMPTED, lost_at=cloud,
        )  # fmt: skip
        [written] = await tx.cas_many([dead], noticed)
    assert isinstance(written, IncarnationRecord)
    for inc in (a, b):
        row = await _row(store, inc.id)
        assert (row.cloud_lost_at, row.dead_at) == (cloud, noticed)
        assert await _lost_at_events(store, inc.id) == [("node.dead", cloud.isoformat())]


async def test_without_the_clouds_time_the_column_stays_null(store: Store) -> None:
    (a,) = await _ready(store, 1)
    async with store.write() as tx:
        await tx.transition(a.id, P.READY, P.DEAD, T0 + 5 * M, cause=LossCause.PREEMPTED)
        await tx.begin_delete(a.id, P.DEAD, T0 + 5 * M)
    assert (await _row(store, a.id)).cloud_lost_at is None
    assert await _lost_at_events(store, a.id) == []


async def test_the_ledger_read_starts_the_loss_at_the_clouds_time(store: Store) -> None:
    (a,) = await _ready(store, 1)
    async with store.write() as tx:
        attempt = await tx.start_attempt(a.id, T0 + 2 * M)
        await tx.transition(a.id, P.READY, P.DEAD, T0 + 11 * M, end_reason="preempted",
                            cause=LossCause.PREEMPTED, lost_at=T0 + 10 * M)  # fmt: skip
        await tx.finish_attempt(attempt.id, AttemptOutcome.PREEMPTED, T0 + 11 * M)
    async with store.read() as r:
        records = await r.ledger("f")
    [times] = records.nodes[("f", 0)]
    assert times.cloud_lost_at == T0 + 10 * M
    history = SlotHistory("f", 0, nodes=[times], attempts=records.attempts[("f", 0)])
    ledger = slot_ledger(history, T0 + 12 * M)
    productive = [i for i in ledger if i.category is Category.PRODUCTIVE]
    assert [(i.start, i.end) for i in productive] == [(T0 + 2 * M, T0 + 10 * M)]
    [detection] = [i for i in ledger if i.phase is Phase.DETECTION]
    assert (detection.start, detection.end) == (T0 + 10 * M, T0 + 11 * M)
    assert detection.cause is LossCause.PREEMPTED
