"""What `on_maintenance` did, in the store (store/write_maintenance.py; issue 41 item 2): a
window handled records its start and, when a run got the stop signal, when; the early start
is recorded once; a later window handled forgets the early start asked for the one before
(else `now` would start only a node's first window early); a node no longer READY refuses
both (StaleWrite). On SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from store_support import ENGINES, T0, facts, seed

from tpucared.core.model.records import NodePhase
from tpucared.store import StaleWrite, Store

P = NodePhase
M = timedelta(minutes=1)


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_windows_handled_one_after_another(store: Store) -> None:
    await seed(store, "f", 1, T0)
    async with store.write() as tx:
        inc = await tx.request_node("f", 0, "f-0", "z-a", "v4-8", T0)
        await tx.transition(inc.id, P.REQUESTED, P.CREATING, T0)
        await tx.transition(inc.id, P.CREATING, P.READY, T0, cloud=facts())
        first = T0 + 60 * M
        done = await tx.handle_window(inc.id, first, T0 + 55 * M, signalled=True, message="m")
        assert (done.maintenance_handled_for, done.maintenance_checkpoint_at) == (
            first, T0 + 55 * M,
        )  # fmt: skip
        started = await tx.note_early_start(inc.id, T0 + 56 * M, kind="maintenance.start_asked",
                                            message="asked")  # fmt: skip
        assert started.maintenance_started_at == T0 + 56 * M
        second = T0 + 600 * M
        again = await tx.handle_window(inc.id, second, T0 + 595 * M, signalled=False, message="m")
    assert again.maintenance_handled_for == second
    assert again.maintenance_started_at is None  # the next early start is asked afresh
    assert again.maintenance_checkpoint_at == T0 + 55 * M  # no run signalled this time
    async with store.read() as r:
        kinds = [e.kind for e in await r.events()]
    assert kinds.count("maintenance.checkpoint") == 2
    assert kinds.count("maintenance.start_asked") == 1


async def test_a_node_no_longer_ready_refuses(store: Store) -> None:
    await seed(store, "f", 1, T0)
    async with store.write() as tx:
        inc = await tx.request_node("f", 0, "f-0", "z-a", "v4-8", T0)
    with pytest.raises(StaleWrite):
        async with store.write() as tx:
            await tx.handle_window(inc.id, T0, T0, signalled=False, message="m")
