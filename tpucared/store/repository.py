"""`Store`: the daemon's and the CLI's handle on the state database.

It owns one async engine and hands out transactions: `read()` (a deferred read transaction: one
consistent view, never blocks or is blocked by the daemon's writes under WAL; REPEATABLE READ,
READ ONLY on PostgreSQL) and `write()` (an
immediate write transaction whose effects commit together, or not at all when the block
raises), and `grouped(work)` (a small write that may share its transaction with other tasks':
groups.py). The common reads have one-call shortcuts. Every result is a frozen record from
`tpucared.core.model` or `tpucared.store.snapshot`.

    store = Store.open(config.daemon.db)
    try:
        snap = await store.load_snapshot()
        async with store.write() as tx:
            node = await tx.request_node("sweep", 3, "sweep-3", "us-central2-b", "v4-32", now)
    finally:
        await store.close()

The schema must already be at head (`tpucared.store.migrate.upgrade_to_head`); the store does
not migrate by itself, so a read-only CLI never changes the database file.

Compare-and-set failures (`StaleWrite`) roll back the whole `write()` block. If a commit itself
fails (the connection dropped), whether it landed is unknown: re-read before deciding again.
A transaction that fails because the database went away (the server stopped, the connection
dropped, the disk is full) raises `StoreUnavailable` naming the cause in one line
(`engine.unavailable_error`), whatever the driver's own exception was: the daemon stands by
on it instead of dying (runtime/terms.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from tpucared.core.leadership.lease import Lease
from tpucared.core.model.records import EventRecord, IncarnationRecord
from tpucared.store.cache import RecordCache
from tpucared.store.engine import (
    DEFAULT_BUSY_TIMEOUT_MS,
    make_engine,
    read_options,
    unavailable_error,
)
from tpucared.store.groups import WriteGroups
from tpucared.store.lease import Fence
from tpucared.store.reads import Reader
from tpucared.store.snapshot import FleetStatus, Snapshot
from tpucared.store.tx import Tx

T = TypeVar("T")

# How long a write transaction waits for the others of this process before giving up.
WRITE_QUEUE_TIMEOUT_S = 120.0


class Store:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._reader_engine = engine.execution_options(**read_options(engine))
        # Tasks inside `write()`: a nested write in the same task would wait for its own lock.
        self._writing: set[asyncio.Task[Any]] = set()
        # Records of unchanged rows, reused by the next read (cache.py): read transactions only.
        self.records = RecordCache()
        # In-process writers queue on this lock, first come first served, before BEGIN
        # IMMEDIATE. Without it they all spin in SQLite's busy handler, which is not fair: at a
        # fleet-wide launch of 1,000 slots (1,000 concurrent writers, one fsync each) some
        # waited past busy_timeout and failed with "database is locked". SQLite runs one
        # write transaction at a time anyway, so this changes the order, not the concurrency.
        # Other processes still meet busy_timeout. Made per event loop (a Lock belongs to one).
        self._write_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._queued = 0  # writers waiting for that lock (`writers_waiting`)
        # The daemon's leader lease (store/lease.py): every write checks its epoch first.
        # None (the CLI, `down`, tests): writes are not fenced.
        self.fence: Fence | None = None
        # Small writes from many tasks, committed together (groups.py).
        self.groups = WriteGroups(self.write, self.writers_waiting)

    @classmethod
    def open(
        cls, setting: str | os.PathLike[str] | URL, *, read_only: bool = False, **engine_kwargs: Any
    ) -> Store:
        """A store on the `daemon.db` setting (path or URL). Opens no connection yet.
        `read_only` (the CLI's status/events): never creates the file, refuses every write."""
        return cls(make_engine(setting, read_only=read_only, **engine_kwargs))

    async def close(self) -> None:
        await self.groups.close()
        await self.engine.dispose()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Reader]:
        """A read transaction: every query inside sees the same committed state."""
        with self._unavailable_named():
            async with self._reader_engine.begin() as conn:
                yield Reader(conn, self.records)

    @contextlib.contextmanager
    def _unavailable_named(self) -> Iterator[None]:
        """A database gone away, as `StoreUnavailable` (module docstring)."""
        try:
            yield
        except Exception as exc:
            unavailable = unavailable_error(exc, self.engine.url, DEFAULT_BUSY_TIMEOUT_MS)
            if unavailable is None:
                raise
            # What comes back may not be what went away (a server that lost its last commits,
            # a standby promoted behind, a restored backup): the next snapshot is read whole.
            self.records.forget_snapshot()
            raise unavailable from exc

    @asynccontextmanager
    async def write(self, *, fenced: bool = True) -> AsyncIterator[Tx]:
        """A write transaction: commits when the block ends, rolls back if it raises.
        Not re-entrant: inside the block, use the `Tx` it gave you. With a `fence` set (the
        daemon's store), it first checks that this process still leads, or raises `LeaseLost`
        having written nothing. `fenced=False` is for the lease attempts themselves, which
        also skip this process's queue of writers: a renewal must not wait behind a busy
        tick's writes (SQLite's busy handler, PostgreSQL's row lock still order them)."""
        task = asyncio.current_task()
        assert task is not None
        if task in self._writing:
            raise RuntimeError("nested Store.write() in one task would deadlock on its own lock")
        self._writing.add(task)
        queue = self._queue() if fenced else contextlib.nullcontext()
        try:
            with self._unavailable_named():
                async with queue, self.engine.begin() as conn:
                    if fenced and self.fence is not None:
                        await self.fence.check(conn)
                    tx = Tx(conn)
                    yield tx
                    await tx.flush_events()  # before the commit (write_base.py)
        finally:
            self._writing.discard(task)

    async def grouped(self, work: Callable[[Tx], Awaitable[T]]) -> T:
        """`work(tx)` in a transaction it may share with other callers' (groups.py): its
        result once committed, or its own exception (undone alone), or the transaction's."""
        return await self.groups.run(work)

    @asynccontextmanager
    async def _queue(self) -> AsyncIterator[None]:
        """This process's turn to write (see `_write_lock`). Waiting is bounded, so a task
        that awaits another task's write inside its own fails loudly instead of hanging."""
        loop = asyncio.get_running_loop()
        if self._write_lock is None or self._write_lock[0] is not loop:
            self._write_lock = (loop, asyncio.Lock())
        lock = self._write_lock[1]
        self._queued += 1
        try:
            async with asyncio.timeout(WRITE_QUEUE_TIMEOUT_S):
                await lock.acquire()
        except TimeoutError:
            raise TimeoutError(
                f"waited {WRITE_QUEUE_TIMEOUT_S:g}s for this process's other write transactions"
            ) from None
        finally:
            self._queued -= 1
        try:
            yield
        finally:
            lock.release()

    def writers_waiting(self) -> int:
        """How many of this process's write transactions wait for their turn: a group of
        small writes (groups.py) commits early rather than keep them waiting."""
        return self._queued

    # -- one-call reads -----------------------------------------------------------------------

    async def load_snapshot(self) -> Snapshot:
        async with self.read() as r:
            return await r.snapshot()

    async def status(self, fleet: str | None = None) -> list[FleetStatus]:
        async with self.read() as r:
            return await r.status(fleet)

    async def events(
        self, since_id: int | None = None, limit: int = 100, fleet: str | None = None
    ) -> list[EventRecord]:
        async with self.read() as r:
            return await r.events(since_id, limit, fleet)

    async def leader_lease(self) -> Lease | None:
        async with self.read() as r:
            return await r.leader_lease()

    async def incarnation(self, incarnation_id: int) -> IncarnationRecord | None:
        async with self.read() as r:
            return await r.incarnation(incarnation_id)
