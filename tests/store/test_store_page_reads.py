"""The page's slot table read (store/page_reads.py), on SQLite and PostgreSQL: each slot by its
newest incarnation, filtered by fleet, state and zone, sorted, then one page's records."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from store_support import ENGINES, T0, facts, seed

from tpucared.core.model.records import NodePhase
from tpucared.store import Store
from tpucared.store.page_reads import NO_NODE, SlotFilter

P = NodePhase
M = timedelta(minutes=1)


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def fleet_of_three(store: Store) -> None:
    """sweep/0: a node preempted, then a READY one in z-b running attempt 1; sweep/1: a node
    requested in z-a; sweep/2: none. other/0: READY in z-a."""
    await seed(store, "sweep", 3, T0)
    await seed(store, "other", 1, T0)
    async with store.write() as tx:
        a = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v6e-8", T0)
        a = await tx.transition(a.id, P.REQUESTED, P.CREATING, T0 + M)
        a = await tx.transition(a.id, P.CREATING, P.READY, T0 + 2 * M, cloud=facts(workers=1))
        await tx.transition(a.id, P.READY, P.DEAD, T0 + 3 * M, end_reason="preempted")
        await tx.begin_delete(a.id, P.DEAD, T0 + 4 * M)
        await tx.transition(a.id, P.DELETING, P.DELETED, T0 + 5 * M)
        b = await tx.request_node("sweep", 0, "sweep-0", "z-b", "v6e-8", T0 + 6 * M)
        b = await tx.transition(b.id, P.REQUESTED, P.CREATING, T0 + 7 * M)
        b = await tx.transition(b.id, P.CREATING, P.READY, T0 + 8 * M, cloud=facts(workers=1))
        await tx.start_attempt(b.id, T0 + 9 * M)
        await tx.request_node("sweep", 1, "sweep-1", "z-a", "v6e-8", T0 + 10 * M)
        o = await tx.request_node("other", 0, "other-0", "z-a", "v6e-8", T0)
        o = await tx.transition(o.id, P.REQUESTED, P.CREATING, T0 + M)
        await tx.transition(o.id, P.CREATING, P.READY, T0 + M, cloud=facts(workers=1))


async def test_filters_sorts_and_one_page(store: Store) -> None:
    await fleet_of_three(store)

    async def keys(**kw: Any) -> list[tuple[str, int]]:
        async with store.read() as r:
            return [(k[0], k[1]) for k in await r.page_slot_keys(SlotFilter(**kw))]

    everything = [("other", 0), ("sweep", 0), ("sweep", 1), ("sweep", 2)]
    assert await keys() == everything
    assert await keys(descending=True) == everything[::-1]
    assert await keys(fleet="sweep") == everything[1:]
    assert await keys(state="ready") == [("other", 0), ("sweep", 0)]
    assert await keys(state=NO_NODE) == [("sweep", 2)]
    assert await keys(zone="z-a") == [("other", 0), ("sweep", 1)]
    assert await keys(fleet="sweep", zone="z-b", state="ready") == [("sweep", 0)]
    # Uptime: the longest up first (the oldest ready_at), slots without a node last.
    assert (await keys(sort="uptime", descending=True))[:2] == [("other", 0), ("sweep", 0)]
    async with store.read() as r:
        page = await r.page_slot_rows((await r.page_slot_keys(SlotFilter("sweep")))[:2])
    assert [(p.slot.index, p.node and p.node.zone) for p in page] == [(0, "z-b"), (1, "z-a")]
    assert page[0].attempt is not None
    assert page[0].attempt.number == 1
    assert page[1].attempt is None
