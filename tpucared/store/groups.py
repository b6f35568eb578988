"""`WriteGroups`: many small, independent writes committed in one transaction.

Where it sits: `Store.grouped(work)`, used by the writers that record what the cloud said,
one node at a time and from many tasks at once: a create or delete call's outcome
(runtime/nodes/calls.py) and an operation's end (runtime/nodes/operations.py). Each is a
few statements; alone, each paid a transaction of its own (BEGIN, the leader fence's check, a
COMMIT that syncs the WAL), which in a preemption storm (100 deletes and their operations a
tick) queued the tick's own writes behind hundreds of them (docs/benchmarks.md).

How: `work(tx)` joins the pending list and its caller waits. One flusher task takes what is
pending, `CHUNK` works at a time for at most `GROUP_S`, and runs it in one `Store.write()`, in
the order they came, as if each work had a savepoint of its own (`Tx.apply_each`, which shares
one among up to `CHUNK` and runs them again alone only when one raises): one that raises (e.g.
`StaleWrite`) is undone alone and its caller gets the exception; the others commit together.
A work may run twice, so it only writes. Results are handed out only after the commit; if the
transaction fails as a whole (the lease lost, the database gone), every work of it gets that
error, as its own transaction would have. No timer gathers them: the works that arrive while
the flusher waits for this process's write queue, or writes, form the next group.

A group gives way: once it has written one chunk, it commits as soon as another writer of
this process waits for the write queue (`Store.writers_waiting`), and the works left form the
next group, behind that writer. The tick's batch of intents is that writer, and the tick
waited up to half a second behind outcome groups in a storm (docs/benchmarks.md).

A caller cancelled before its work started is dropped (as if cancelled before its own
`write()`); cancelled later, its work may still commit (as if cancelled after its commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

from tpucared.store.tx import Applied, Tx

T = TypeVar("T")

# Seconds a group takes more works for, once its transaction is open: it holds this process's
# write queue (the tick's own writes wait behind it), and each work is a few statements.
GROUP_S = 0.1
CHUNK = 32  # works per shared savepoint (`Tx.apply_each`): one refusal runs them all again


@dataclass
class _Work:
    run: Callable[[Tx], Awaitable[Any]]
    done: asyncio.Future[Any]


class WriteGroups:
    def __init__(
        self,
        write: Callable[[], AbstractAsyncContextManager[Tx]],
        waiting: Callable[[], int] = lambda: 0,
    ) -> None:
        self._write = write  # the Store's `write`
        self._waiting = waiting  # the Store's `writers_waiting`
        self._pending: list[_Work] = []
        self._flusher: asyncio.Task[None] | None = None
        self.groups = 0  # transactions committed or tried (for tests and the benchmarks)

    async def run(self, work: Callable[[Tx], Awaitable[T]]) -> T:
        """`work(tx)` in a savepoint of a transaction shared with other works; its result
        once that transaction has committed."""
        loop = asyncio.get_running_loop()
        item = _Work(work, loop.create_future())
        self._pending.append(item)
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush(), name="store write groups")
        result: T = await item.done
        return result

    async def close(self) -> None:
        """Stop the flusher (`Store.close`): what is pending fails as cancelled."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None and not flusher.done():
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        for item in self._pending:
            item.done.cancel()
        self._pending.clear()

    async def _flush(self) -> None:
        while self._pending:
            await self._commit()

    def _take(self, most: int) -> list[_Work]:
        """The next `most` pending works, but for callers cancelled before they started."""
        taken = [w for w in self._pending[:most] if not w.done.done()]
        del self._pending[:most]
        return taken

    async def _commit(self) -> None:
        self.groups += 1
        group: list[_Work] = []
        outcomes: list[tuple[_Work, Applied[Any]]] = []
        try:
            async with self._write() as tx:
                began = time.monotonic()  # once this process's turn to write has come
                while self._pending and time.monotonic() - began < GROUP_S:
                    if group and self._waiting():
                        break  # another writer (the tick's batch) waits: its turn first
                    part = self._take(CHUNK)
                    group += part
                    # An exception is its caller's to handle, not the group's.
                    results = await tx.apply_each([item.run for item in part])
                    outcomes += zip(part, results, strict=True)
        except BaseException as exc:
            for item in group or self._take(CHUNK):
                if item.done.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    item.done.cancel()
                else:
                    item.done.set_exception(exc)
            if not isinstance(exc, Exception):
                raise  # cancelled: the callers were told; the flusher stops
            return
        for item, result in outcomes:
            if item.done.done():
                continue  # its caller was cancelled meanwhile
            if result.error is None:
                item.done.set_result(result.value)
            else:
                item.done.set_exception(result.error)
