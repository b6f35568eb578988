"""Incremental snapshots (store/changes.py): the kept snapshot brought up to date with the rows
stamped since (migration 0010) equals a whole read, after any mix of writes, on SQLite and
PostgreSQL; a delete, or an older database, falls back to the whole read."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from store_support import ENGINES, SQLITE_ONLY, T0, facts, seed, slot_update

from tpucared.core.model.observed import WorkerEndpoint
from tpucared.core.model.records import AttemptOutcome, CreateAttemptRecord, NodePhase
from tpucared.store import Snapshot, Store, Tx

P = NodePhase
FLEETS = {"sweep": 6, "eval": 3}


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def whole(store: Store) -> Snapshot:
    """What a whole read returns (a write transaction's reader has no cache)."""
    async with store.write() as tx:
        return await tx.snapshot()


async def a_random_write(tx: Tx, rng: random.Random, step: int) -> str:
    """One write of the daemon's kinds, chosen among those the current state allows."""
    now = T0 + timedelta(seconds=step)
    snap = await tx.snapshot()
    live = sorted(snap.nodes.values(), key=lambda i: i.id)
    free = [k for k in snap.slots if (k[0], k[1], 0) not in snap.nodes]
    choices = ["create"] + (["request"] if free else []) + (["advance"] * 3 if live else [])
    ready = [i for i in live if i.phase is P.READY]
    if ready:
        choices += ["workers", "keys", "attempt"]
    match rng.choice(choices):
        case "request":
            fleet, index = rng.choice(free)
            await tx.request_node(fleet, index, f"{fleet}-{index}", "z-a", "v4-8", now)
        case "advance":
            inc = rng.choice(live)
            if inc.phase is P.REQUESTED:
                await tx.transition(inc.id, P.REQUESTED, P.CREATING, now)
            elif inc.phase is P.CREATING:
                cloud = facts(workers=rng.randint(1, 3), cloud_id=str(inc.id))
                await tx.transition(inc.id, P.CREATING, P.READY, now, cloud=cloud)
            elif inc.phase is P.READY:
                update = slot_update(inc.fleet, inc.slot, add_preemptions=1, last_error="gone")
                await tx.transition(
                    inc.id, P.READY, P.DEAD, now, end_reason="preempted", slot_update=update
                )
            elif inc.phase is P.DEAD:
                await tx.begin_delete(inc.id, P.DEAD, now)
            else:
                await tx.transition(inc.id, inc.phase, P.DELETED, now)
        case "workers":
            inc = rng.choice(ready)
            count = rng.randint(0, 3)
            ips = [f"10.1.{inc.id}.{rng.randint(1, 9)}" for _ in range(count)]
            await tx.set_workers(inc.id, [WorkerEndpoint(i, ip, None) for i, ip in enumerate(ips)])
        case "keys":
            inc = rng.choice(ready)
            workers = snap.workers_of(inc.id)
            if workers and not workers[0].host_keys:
                await tx.pin_host_keys(inc.id, workers[0].index, (f"ssh-ed25519 K{step}",))
        case "attempt":
            inc = rng.choice(ready)
            running = snap.running.get((inc.fleet, inc.slot))
            if running is None:
                await tx.start_attempt(inc.id, now)
            else:
                await tx.finish_attempt(running.id, AttemptOutcome.FAILED, now)
        case _:
            fleet, index = rng.choice(sorted(snap.slots))
            attempt = CreateAttemptRecord(fleet, index, "z-a", "v4-8", now, "capacity", 1.0)
            await tx.record_create_attempt(attempt)
    return "written"


async def test_the_changed_rows_laid_over_the_kept_snapshot_equal_a_whole_read(store: Store):
    rng = random.Random(20261127)
    for fleet, size in FLEETS.items():
        await seed(store, fleet, size, T0)
    assert await store.load_snapshot() == await whole(store)  # read whole, and kept
    for step in range(40):
        async with store.write() as tx:
            for _ in range(rng.randint(1, 4)):
                await a_random_write(tx, rng, step)
        cache = store.records
        before = cache.snapshot_updates + cache.snapshot_hits
        snap = await store.load_snapshot()
        assert snap == await whole(store), f"step {step}"
        # As changes (or the same snapshot, when the step happened to write nothing).
        assert cache.snapshot_updates + cache.snapshot_hits == before + 1, "read whole"
        # Newest first, as the whole read orders them.
        assert [n.id for n in snap.nodes.values()] == sorted(
            (n.id for n in snap.nodes.values()), reverse=True
        )


async def test_unchanged_rows_keep_their_records(store: Store):
    await seed(store, "sweep", 3, T0)
    async with store.write() as tx:
        a = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v4-8", T0)
        b = await tx.request_node("sweep", 1, "sweep-1", "z-a", "v4-8", T0)
        await tx.transition(b.id, P.REQUESTED, P.READY, T0, cloud=facts(workers=2))
    first = await store.load_snapshot()
    async with store.write() as tx:
        await tx.transition(a.id, P.REQUESTED, P.CREATING, T0)
    second = await store.load_snapshot()
    assert store.records.snapshot_updates == 1
    assert second.nodes[("sweep", 0, 0)].phase is P.CREATING
    assert second.nodes[("sweep", 1, 0)] is first.nodes[("sweep", 1, 0)]
    assert second.workers[b.id] is first.workers[b.id]
    assert second.slots[("sweep", 2)] is first.slots[("sweep", 2)]


async def test_a_worker_change_alone_is_seen(store: Store):
    """A worker has no version: its change touches its incarnation's."""
    await seed(store, "sweep", 1, T0)
    async with store.write() as tx:
        a = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v4-8", T0)
        await tx.transition(a.id, P.REQUESTED, P.READY, T0, cloud=facts(workers=2))
    await store.load_snapshot()
    async with store.write() as tx:
        await tx.pin_host_keys(a.id, 1, ("ssh-ed25519 AAAA",))
    pinned = await store.load_snapshot()
    assert pinned.workers[a.id][1].host_keys == ("ssh-ed25519 AAAA",)
    async with store.write() as tx:
        await tx.set_workers(a.id, [WorkerEndpoint(0, "10.9.9.9", None)])  # one removed
    fewer = await store.load_snapshot()
    assert [w.internal_ip for w in fewer.workers[a.id]] == ["10.9.9.9"]
    assert store.records.snapshot_updates == 2
    assert fewer == await whole(store)


async def test_another_writers_changes_are_seen(store: Store):
    """Versions are the database's, not this process's: `tpucared down` writes beside it."""
    await seed(store, "sweep", 2, T0)
    await store.load_snapshot()
    async with Store.open(store.engine.url) as other, other.write() as tx:
        await tx.request_node("sweep", 1, "sweep-1", "z-a", "v4-8", T0)
    snap = await store.load_snapshot()
    assert set(snap.nodes) == {("sweep", 1, 0)}
    assert store.records.snapshot_updates == 1


async def test_a_deleted_row_makes_the_next_read_whole(store: Store):
    """A removed row leaves no version behind: the deletion count moves, and the next read
    is a whole one (nothing in the store deletes these rows today; a person with `sqlite3`
    or `psql` may)."""
    await seed(store, "sweep", 2, T0)
    async with store.write() as tx:
        await tx.record_create_attempt(
            CreateAttemptRecord("sweep", 0, "z-a", "v4-8", T0, "capacity", 1.0)
        )
    first = await store.load_snapshot()
    assert ("sweep", 0) in first.last_creates
    async with store.engine.begin() as conn:
        await conn.execute(text("DELETE FROM create_attempts"))
    snap = await store.load_snapshot()
    assert store.records.snapshot_updates == 0
    assert snap.last_creates == {}
    assert snap == await whole(store)


async def test_new_slots_take_their_place_in_order(store: Store):
    await seed(store, "sweep", 2, T0)
    await store.load_snapshot()
    await seed(store, "abc", 2, T0)  # a fleet added later, sorted before "sweep"
    await seed(store, "sweep", 3, T0)  # and the fleet grown
    snap = await store.load_snapshot()
    assert store.records.snapshot_updates == 1
    assert list(snap.slots) == [("abc", 0), ("abc", 1), ("sweep", 0), ("sweep", 1), ("sweep", 2)]
    assert snap == await whole(store)


@SQLITE_ONLY
async def test_a_database_that_went_back_is_read_whole(store: Store, tmp_path: Path):
    """Writes the database lost (a restored copy here; a server that lost its last commits in
    test_database_outage) leave rows whose versions the kept snapshot is past: a counter lower
    than the kept one's makes the read a whole one."""
    await seed(store, "sweep", 1, T0)
    async with store.write() as tx:
        a = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v4-8", T0)
    await store.load_snapshot()
    db = Path(str(store.engine.url.database))
    with closing(sqlite3.connect(db)) as src, closing(sqlite3.connect(tmp_path / "copy.db")) as dst:
        src.backup(dst)
    async with store.write() as tx:
        await tx.transition(a.id, P.REQUESTED, P.CREATING, T0)
    assert (await store.load_snapshot()).nodes[("sweep", 0, 0)].phase is P.CREATING
    with closing(sqlite3.connect(tmp_path / "copy.db")) as src, closing(sqlite3.connect(db)) as dst:
        src.backup(dst)  # the database goes back to before the transition
    snap = await store.load_snapshot()
    assert snap.nodes[("sweep", 0, 0)].phase is P.REQUESTED
    assert snap == await whole(store)


async def test_a_whole_read_comes_at_least_every_few_minutes(
    store: Store, monkeypatch: pytest.MonkeyPatch
):
    await seed(store, "sweep", 2, T0)
    await store.load_snapshot()
    monkeypatch.setattr("tpucared.store.cache.WHOLE_READ_EVERY_S", 0.0)
    async with store.write() as tx:
        await tx.request_node("sweep", 1, "sweep-1", "z-a", "v4-8", T0)
    snap = await store.load_snapshot()
    assert store.records.snapshot_updates == 0  # due: read whole
    assert snap == await whole(store)
