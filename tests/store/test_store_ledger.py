"""The ledger's read (store/ledger_reads.py), on SQLite and PostgreSQL: every record of a slot,
or only what matters since a time, and the same ledger from `since` on either way."""

from __future__ import annotations

from datetime import timedelta

import pytest
from store_support import ENGINES, T0, facts, seed

from tpucared.core.ledger.categories import Category, SlotHistory
from tpucared.core.ledger.tiling import clipped, slot_ledger
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import AttemptOutcome, CreateAttemptRecord, NodePhase
from tpucared.store import Store
from tpucared.store.ledger_reads import LedgerRecords

P = NodePhase
H = timedelta(hours=1)
M = timedelta(minutes=1)


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def preempted_then_stockout(store: Store) -> None:
    """sweep/0: READY at T0+5m, attempt 1 until preempted at T0+2h, deleted, a create that
    fails for capacity, then a node READY at T0+3h running attempt 2. sweep/1: never created.
    Fleet other/0: a node requested."""
    await seed(store, "sweep", 2, T0)
    await seed(store, "other", 1, T0)
    async with store.write() as tx:
        a = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v6e-8", T0)
        await tx.record_create_attempt(
            CreateAttemptRecord("sweep", 0, "z-a", "v6e-8", T0, "ok", 1.0, None, a.id)
        )
        a = await tx.transition(a.id, P.REQUESTED, P.CREATING, T0 + M)
        a = await tx.transition(a.id, P.CREATING, P.READY, T0 + 5 * M, cloud=facts(workers=1))
        first = await tx.start_attempt(a.id, T0 + 6 * M)
        died = T0 + 2 * H
        await tx.transition(
            a.id, P.READY, P.DEAD, died, end_reason="preempted", cause=LossCause.PREEMPTED
        )
        await tx.finish_attempt(first.id, AttemptOutcome.PREEMPTED, died + 10 * M)
        await tx.begin_delete(a.id, P.DEAD, died + 11 * M)
        await tx.transition(a.id, P.DELETING, P.DELETED, died + 12 * M)
        b = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v6e-8", died + 13 * M)
        await tx.record_create_attempt(
            CreateAttemptRecord("sweep", 0, "z-a", "v6e-8", died + 13 * M, "capacity", 2.0,
                                "stockout", b.id)
        )  # fmt: skip
        await tx.transition(b.id, P.REQUESTED, P.FAILED, died + 13 * M)
        c = await tx.request_node("sweep", 0, "sweep-0", "z-b", "v6e-8", died + 40 * M)
        await tx.record_create_attempt(
            CreateAttemptRecord("sweep", 0, "z-b", "v6e-8", died + 40 * M, "ok", 1.0, None, c.id)
        )
        c = await tx.transition(c.id, P.REQUESTED, P.CREATING, died + 41 * M)
        c = await tx.transition(c.id, P.CREATING, P.READY, T0 + 3 * H, cloud=facts(workers=1))
        await tx.start_attempt(c.id, T0 + 3 * H + M)
        await tx.request_node("other", 0, "other-0", "z-a", "v6e-8", T0)


def history(records: LedgerRecords, fleet: str, slot: int) -> SlotHistory:
    key = (fleet, slot)
    return SlotHistory(
        fleet,
        slot,
        nodes=records.nodes.get(key, []),
        attempts=records.attempts.get(key, []),
        creates=records.creates.get(key, []),
        start=records.first_create.get(key),
    )


async def test_the_ledger_read_has_every_record_and_what_matters_since(store: Store) -> None:
    await preempted_then_stockout(store)
    async with store.read() as r:
        everything = await r.ledger("sweep")
        since = T0 + 2 * H + 30 * M  # after the failed create, before the replacement
        recent = await r.ledger("sweep", since=since)
        one = await r.ledger("sweep", 0)
        other = await r.ledger()
    assert sorted(everything.fleets) == ["sweep"]
    assert [s.index for s in everything.slots] == [0, 1]
    assert len(everything.nodes[("sweep", 0)]) == 3
    assert len(everything.attempts[("sweep", 0)]) == 2
    assert [c.outcome for c in everything.creates[("sweep", 0)]] == ["ok", "capacity", "ok"]
    assert everything.first_create == {("sweep", 0): T0}
    assert ("sweep", 1) not in everything.nodes
    dead = everything.nodes[("sweep", 0)][0]
    assert (dead.creating_at, dead.ready_at, dead.dead_at) == (T0 + M, T0 + 5 * M, T0 + 2 * H)
    assert dead.loss_cause is LossCause.PREEMPTED
    assert [s.index for s in one.slots] == [0]
    assert sorted(other.fleets) == ["other", "sweep"]
    # Since: the failed create's node is left out; the preempted node stays (its attempt
    # is the newest before `since`), and so does the newest create before `since`.
    assert [n.zone for n in recent.nodes[("sweep", 0)]] == ["z-a", "z-b"]
    assert [a.number for a in recent.attempts[("sweep", 0)]] == [1, 2]
    assert [c.outcome for c in recent.creates[("sweep", 0)]] == ["capacity", "ok"]
    assert recent.first_create == everything.first_create
    now = T0 + 4 * H
    full = slot_ledger(history(everything, "sweep", 0), now)
    assert clipped(slot_ledger(history(recent, "sweep", 0), now), since) == clipped(full, since)
    assert sum(i.seconds for i in full) == 4 * 3600
    lost = {i.category for i in full if i.start >= T0 + 2 * H and i.end <= T0 + 3 * H + M}
    assert lost == {Category.RECOVERY}
