"""Engine and column types: URLs, pragmas, transactions, and how values look on disk."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from store_support import T0, facts, open_raw

from tpucared.core.model.records import NodePhase
from tpucared.store import Store, database_url, make_engine
from tpucared.store.migrate import upgrade_to_head


def test_plain_paths_become_absolute_aiosqlite_urls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    url = database_url("state/db.sqlite")
    assert url.drivername == "sqlite+aiosqlite"
    assert url.database == str(tmp_path / "state" / "db.sqlite")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert database_url("~/x.db").database == str(tmp_path / "x.db")


def test_urls_are_kept_and_sync_drivers_made_async():
    assert str(database_url("sqlite:////var/lib/t.db")) == "sqlite+aiosqlite:////var/lib/t.db"
    assert database_url("sqlite+aiosqlite:////x.db").drivername == "sqlite+aiosqlite"
    assert database_url("postgresql://u@h/db").drivername == "postgresql+asyncpg"
    with pytest.raises(ValueError, match="empty"):
        database_url("  ")
    with pytest.raises(ValueError, match="not a valid"):
        database_url("::nonsense://")


async def test_engine_creates_the_directory_and_sets_pragmas(tmp_path: Path):
    path = tmp_path / "a" / "b" / "state.db"
    engine = make_engine(path)
    try:
        async with engine.connect() as conn:
            pragmas = {
                name: (await conn.exec_driver_sql(f"PRAGMA {name}")).scalar()
                for name in ("journal_mode", "foreign_keys", "synchronous", "busy_timeout")
            }
    finally:
        await engine.dispose()
    assert path.is_file()
    # synchronous 2 = FULL: the last commit survives power loss too.
    assert pragmas == {
        "journal_mode": "wal",
        "foreign_keys": 1,
        "synchronous": 2,
        "busy_timeout": 5000,
    }


async def test_write_transactions_take_the_lock_up_front_and_reads_do_not(store: Store):
    """BEGIN IMMEDIATE: a second writer waits at BEGIN (busy_timeout), never half-way; a read
    transaction started meanwhile neither waits nor sees the uncommitted write."""
    await store_seed(store)
    async with store.write() as tx:
        await tx.append_event("test.a", "inside", T0)
        raw = open_raw(_path(store))
        raw.execute("PRAGMA busy_timeout = 0")
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            raw.execute("BEGIN IMMEDIATE")
        raw.close()
        async with store.read() as r:
            assert [e.kind for e in await r.events()] == ["fleet.recorded", "slot.opened"]
    assert (await store.events())[-1].kind == "test.a"


async def test_an_exception_rolls_back_the_whole_block(store: Store):
    await store_seed(store)

    async def crashing_block() -> None:
        async with store.write() as tx:
            await tx.append_event("test.a", "first", T0)
            await tx.request_node("f", 0, "f-0", "z", "v4-8", T0)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await crashing_block()
    assert [e.kind for e in await store.events()] == ["fleet.recorded", "slot.opened"]
    assert (await store.load_snapshot()).nodes == {}


async def test_values_are_readable_on_disk(store: Store):
    await store_seed(store)
    other_tz = timezone(timedelta(hours=2))
    async with store.write() as tx:
        inc = await tx.request_node("f", 0, "f-0", "z", "v4-8", T0.astimezone(other_tz))
        await tx.transition(inc.id, NodePhase.REQUESTED, NodePhase.READY, T0, cloud=facts())
    raw = open_raw(_path(store))
    row = raw.execute("SELECT phase, requested_at, cloud_state FROM nodes").fetchone()
    event = raw.execute("SELECT details FROM events WHERE kind = 'node.ready'").fetchone()
    raw.close()
    # Enum values, UTC wall-clock text (converted from +02:00), JSON text.
    assert tuple(row) == ("ready", "2025-06-01 12:00:00.000000", "READY")
    assert event[0].startswith('{"cloud":{"cloud_id":"4242","cloud_state":"READY"')
    # ...and they come back as aware UTC datetimes and enums.
    back = await store.incarnation(inc.id)
    assert back is not None
    assert back.requested_at == T0
    assert back.requested_at.tzinfo is UTC
    assert back.phase is NodePhase.READY


async def test_naive_datetimes_are_refused(store: Store):
    await store_seed(store)
    with pytest.raises(Exception, match="naive datetime"):
        async with store.write() as tx:
            await tx.append_event("test.a", "x", datetime(2025, 1, 1))


async def test_many_coroutines_share_one_store(store: Store):
    """The daemon's tasks write concurrently through one engine: they queue, none fails."""
    await store_seed(store)

    async def writer(i: int) -> None:
        for j in range(5):
            async with store.write() as tx:
                await tx.append_event("test.c", f"{i}.{j}", T0)

    async def reader() -> None:
        for _ in range(10):
            await store.load_snapshot()

    await asyncio.gather(*(writer(i) for i in range(8)), reader(), reader())
    assert len([e for e in await store.events(limit=1000) if e.kind == "test.c"]) == 40


async def store_seed(store: Store) -> None:
    async with store.write() as tx:
        await tx.record_fleet("f", "h", "{}", T0)
        await tx.open_slot("f", 0, T0)


def _path(store: Store) -> Path:
    database = store.engine.url.database
    assert database is not None
    return Path(database)


async def test_a_read_only_store_reads_but_never_writes_or_creates(store: Store, tmp_path: Path):
    await store_seed(store)
    weird = tmp_path / "dir with space?#" / "state.db"
    async with Store.open(_path(store), read_only=True) as ro:
        assert [e.kind for e in await ro.events()] == ["fleet.recorded", "slot.opened"]
        assert set((await ro.load_snapshot()).slots) == {("f", 0)}
        with pytest.raises(Exception, match=r"readonly|read-only"):
            async with ro.write() as tx:
                await tx.append_event("test.a", "nope", T0)
    async with Store.open(weird, read_only=True) as ro:
        with pytest.raises(Exception, match="unable to open"):
            await ro.load_snapshot()
    assert not weird.parent.exists()
    # The same odd path opened for writing: created, and then readable read-only.
    await upgrade_to_head(weird)
    async with Store.open(weird) as rw:
        await store_seed(rw)
    async with Store.open(weird, read_only=True) as ro:
        assert len(await ro.events()) == 2


async def test_a_nested_write_fails_at_once_instead_of_deadlocking(store: Store):
    await store_seed(store)

    async def nested() -> None:
        async with store.write(), store.write():
            pass

    with pytest.raises(RuntimeError, match="nested"):
        await asyncio.wait_for(nested(), timeout=2)  # not after busy_timeout (5 s)
    async with store.write() as tx:  # and the store is usable afterwards
        await tx.append_event("test.a", "after", T0)
