"""Writes committed together: `Store.grouped` (groups.py) and the events a transaction
inserts in one statement at its commit (write_base.py `_event`), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import event, text
from store_support import ENGINES, T0

from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.store import StaleWrite, Store, StoreUnavailable, Tx
from tpucared.store.errors import LeaseLost

P = NodePhase


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _requested(store: Store, slots: int) -> list[IncarnationRecord]:
    async with store.write() as tx:
        return [
            await tx.request_node("sweep", s, f"sweep-{s}", "z-a", "v4-32", T0)
            for s in range(slots)
        ]


def _outcome(inc: IncarnationRecord, expected: NodePhase) -> object:
    async def work(tx: Tx) -> IncarnationRecord:
        return await tx.record_outcome(inc.id, expected, T0, operation=f"op-{inc.slot}")

    return work


async def test_concurrent_writes_share_transactions_and_a_stale_one_is_undone_alone(
    seeded: Store,
):
    incs = await _requested(seeded, 3)
    before = seeded.groups.groups
    # Slot 1's expectation is wrong: its caller alone gets StaleWrite.
    works = [_outcome(incs[0], P.REQUESTED), _outcome(incs[1], P.READY)]
    works += [_outcome(incs[2], P.REQUESTED)]
    results = await asyncio.gather(
        *(seeded.grouped(w) for w in works),  # type: ignore[arg-type]
        return_exceptions=True,
    )
    assert isinstance(results[1], StaleWrite)
    assert [r.operation for r in (results[0], results[2])] == ["op-0", "op-2"]  # type: ignore[union-attr]
    assert seeded.groups.groups - before == 1  # three callers, one transaction
    snap = await seeded.load_snapshot()
    assert [snap.nodes[("sweep", s, 0)].operation for s in range(3)] == ["op-0", None, "op-2"]
    async with seeded.read() as r:
        outcome_events = [
            e for e in await r.events(since_id=0, limit=100) if e.kind == "node.outcome"
        ]
    # The undone one's event went with it; the others' are there, in their order.
    assert [e.slot for e in outcome_events] == [0, 2]


async def test_a_group_gives_way_to_a_writer_that_waits(
    seeded: Store, monkeypatch: pytest.MonkeyPatch
):
    """Once it has written a chunk, a group commits when another writer of this process waits
    for the write queue (the tick's batch of intents), however long it could still go on;
    the works left form the next group, behind that writer."""
    monkeypatch.setattr("tpucared.store.groups.GROUP_S", 30.0)  # time alone would not end it
    chunk = 4
    monkeypatch.setattr("tpucared.store.groups.CHUNK", chunk)
    ran: list[int] = []
    started = asyncio.Event()

    def slow(i: int) -> object:
        async def work(tx: Tx) -> int:
            await tx.append_event("test.work", f"work {i}", T0)
            await asyncio.sleep(0.01)  # a few statements' worth
            ran.append(i)
            started.set()
            return i

        return work

    works = [asyncio.ensure_future(seeded.grouped(slow(i))) for i in range(40)]  # type: ignore[arg-type]
    await started.wait()
    async with seeded.write() as tx:  # waits for the group's turn to end
        seen = len(ran)
        await tx.append_event("test.tick", "the tick's batch", T0)
    assert seen <= 2 * chunk, f"the group went on for {seen} works with a writer waiting"
    assert sorted(await asyncio.gather(*works)) == list(range(40))
    assert seeded.groups.groups >= 2


async def test_a_failed_transaction_fails_every_caller_of_its_group(seeded: Store):
    incs = await _requested(seeded, 2)

    class Refuse:
        """A fence that says this process no longer leads: the whole transaction fails."""

        async def check(self, conn: object) -> None:
            raise LeaseLost("not leading")

    seeded.fence = Refuse()  # type: ignore[assignment]
    results = await asyncio.gather(
        *(seeded.grouped(_outcome(i, P.REQUESTED)) for i in incs),  # type: ignore[arg-type]
        return_exceptions=True,
    )
    assert [type(r) for r in results] == [LeaseLost, LeaseLost]
    seeded.fence = None
    snap = await seeded.load_snapshot()
    assert [snap.nodes[("sweep", s, 0)].operation for s in range(2)] == [None, None]
    # The flusher survived it: the next writes go through.
    assert (await seeded.grouped(_outcome(incs[0], P.REQUESTED))).operation == "op-0"  # type: ignore[arg-type]


async def test_a_cancelled_caller_that_had_not_started_writes_nothing(seeded: Store):
    incs = await _requested(seeded, 2)
    async with seeded.write():  # holds the write queue: the group waits behind it
        first = asyncio.create_task(seeded.grouped(_outcome(incs[0], P.REQUESTED)))  # type: ignore[arg-type]
        second = asyncio.create_task(seeded.grouped(_outcome(incs[1], P.REQUESTED)))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        first.cancel()
    assert (await second).operation == "op-1"
    with pytest.raises(asyncio.CancelledError):
        await first
    snap = await seeded.load_snapshot()
    assert snap.nodes[("sweep", 0, 0)].operation is None


async def test_events_keep_their_order_and_are_seen_inside_the_transaction(seeded: Store):
    async with seeded.write() as tx:
        inc = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v4-32", T0)  # buffered
        notice = await tx.append_event("notice", "now", T0)  # immediate: after the buffer
        await tx.record_outcome(inc.id, P.REQUESTED, T0, operation="op")  # buffered
        seen = [e.kind for e in await tx.events(since_id=notice.id - 1, limit=10)]
        assert seen == ["notice", "node.outcome"]
    async with seeded.read() as r:
        kinds = [e.kind for e in await r.events(since_id=0, limit=100)]
    assert kinds[-3:] == ["node.requested", "notice", "node.outcome"]


def _savepoints(store: Store) -> list[str]:
    """The SAVEPOINT statements `store` runs from now on (SQLAlchemy's engine events)."""
    seen: list[str] = []

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        if statement.startswith("SAVEPOINT"):
            seen.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", count)
    return seen


async def test_apply_each_shares_one_savepoint_until_a_work_is_refused(seeded: Store):
    incs = await _requested(seeded, 3)
    savepoints = _savepoints(seeded)
    undone: list[int] = []
    async with seeded.write() as tx:
        fine = await tx.apply_each([_outcome(incs[0], P.REQUESTED)] * 2)  # type: ignore[list-item]
        assert len(savepoints) == 1  # two works, one savepoint
        # The last one's expectation is wrong: the chunk is undone and run again, each alone.
        works = [_outcome(incs[1], P.REQUESTED), _outcome(incs[2], P.READY)]
        mixed = await tx.apply_each(works, undone=lambda: undone.append(1))  # type: ignore[arg-type]
        assert len(savepoints) == 1 + 1 + 2
    assert [r.error for r in fine] == [None, None]
    assert mixed[0].error is None
    assert mixed[0].value.operation == "op-1"
    assert isinstance(mixed[1].error, StaleWrite)
    assert mixed[1].value is None
    assert undone == [1]
    snap = await seeded.load_snapshot()
    ops = [snap.nodes[("sweep", s, 0)].operation for s in range(3)]
    assert ops == ["op-0", "op-1", None]
    async with seeded.read() as r:
        outcome_events = [
            e.slot for e in await r.events(since_id=0, limit=100) if e.kind == "node.outcome"
        ]
    assert outcome_events == [0, 0, 1]  # the refused one's event went with it, once


async def test_apply_each_raises_what_is_not_a_refusal(seeded: Store):
    incs = await _requested(seeded, 1)

    async def broken(tx: Tx) -> None:
        raise RuntimeError("a bug, not a refusal")

    with pytest.raises(RuntimeError):
        async with seeded.write() as tx:
            await tx.apply_each(
                [_outcome(incs[0], P.REQUESTED), broken],  # type: ignore[list-item]
                refusals=(StaleWrite,),
            )
    snap = await seeded.load_snapshot()
    assert snap.nodes[("sweep", 0, 0)].operation is None  # the transaction went as a whole


async def test_events_inserted_inside_an_undone_savepoint_are_not_lost(seeded: Store):
    """An event read (or `append_event`) inside a savepoint inserts the buffer, the events
    appended before the savepoint among them; undoing the savepoint undoes those rows, so
    they go back into the buffer and still commit."""
    async with seeded.write() as tx:
        inc = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v4-32", T0)  # buffered

        async def undone() -> None:
            async with tx.savepoint():
                await tx.append_event("notice", "inside", T0)  # inserts the buffer first
                await tx.record_outcome(inc.id, P.READY, T0, operation="op")  # stale

        with pytest.raises(StaleWrite):
            await undone()
    async with seeded.read() as r:
        kinds = [e.kind for e in await r.events(since_id=0, limit=100)]
    assert "node.requested" in kinds
    assert "notice" not in kinds


@pytest.mark.parametrize("engine_kind", ["postgresql"])
async def test_a_connection_lost_inside_a_group_is_the_database_gone_for_every_caller(
    seeded: Store,
):
    """The server ends the group's connection while a work runs (`pg_terminate_backend`, as a
    server stopped with `-m immediate` does): every caller gets StoreUnavailable, which the
    daemon waits out, not the PendingRollbackError of a commit on a dead connection, which
    ended the operation watcher's task (a CI run of test_database_outage)."""
    incs = await _requested(seeded, 2)
    await seeded.load_snapshot()
    assert seeded.records.kept_snapshot() is not None

    async def killed(tx: Tx) -> None:
        await tx._conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))

    works = [_outcome(incs[0], P.REQUESTED), killed, _outcome(incs[1], P.REQUESTED)]
    results = await asyncio.gather(
        *(seeded.grouped(w) for w in works),  # type: ignore[arg-type]
        return_exceptions=True,
    )
    assert [type(r) for r in results] == [StoreUnavailable] * 3, results
    # What comes back may have lost writes: the next snapshot is read whole (changes.py).
    assert seeded.records.kept_snapshot() is None
    # The connection pool recovers: the next group writes.
    assert (await seeded.grouped(_outcome(incs[0], P.REQUESTED))).operation == "op-0"  # type: ignore[arg-type]
