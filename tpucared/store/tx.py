"""`Tx`: one write transaction with every read and write the store offers.

Handed out by `Store.write()`; valid only inside that `async with` block. The methods are
grouped by what they change: `write_base` (events, fleets, slots, create attempts),
`write_nodes` (incarnations and workers), `write_many` (a run of their compare-and-sets at
once), `write_adopt` (many slots and adoptions at once), `write_workloads` (workload
attempts), `write_maintenance` (what `on_maintenance` did about a window), `write_progress`
(what a workload told in its progress file), `lease` (the leader lease), `prune` (the
maintenance task's bounded deletes), `write_ledger` (its kept ledger days); the reads come
from `reads.Reader`. Here: the savepoints, and `apply_each`, many small writes each undone
alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from tpucared.store.engine import connection_lost
from tpucared.store.lease import LeaseWrites
from tpucared.store.prune import PruneWrites
from tpucared.store.write_adopt import AdoptWrites
from tpucared.store.write_ledger import LedgerWrites
from tpucared.store.write_maintenance import MaintenanceWrites
from tpucared.store.write_many import ManyNodeWrites
from tpucared.store.write_progress import ProgressWrites
from tpucared.store.write_workloads import WorkloadWrites

T = TypeVar("T")

Work = Callable[["Tx"], Awaitable[T]]


@dataclass(frozen=True)
class Applied(Generic[T]):
    """What one work of `Tx.apply_each` came to: its value, or the exception it raised."""

    value: T | None = None
    error: Exception | None = None


class Tx(
    ManyNodeWrites,
    AdoptWrites,
    WorkloadWrites,
    MaintenanceWrites,
    ProgressWrites,
    PruneWrites,
    LedgerWrites,
    LeaseWrites,
):
    """Everything in one `Store.write()` block commits together or not at all."""

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """A part of the transaction that is undone alone when its block raises (a SAVEPOINT):
        the rest of the transaction goes on and still commits together."""
        events, appended = self._events, len(self._events)
        try:
            async with self._conn.begin_nested():
                yield
        except BaseException:
            if self._events is events:
                del events[appended:]  # its events are undone with it
            else:
                # The buffer was inserted inside it (an event read, `append_event`): those
                # rows are undone with it, the ones appended before it among them, and those
                # must still be inserted.
                self._events = events[:appended]
            raise

    async def apply_each(
        self,
        works: Sequence[Work[T]],
        *,
        refusals: tuple[type[Exception], ...] = (Exception,),
        undone: Callable[[], None] | None = None,
    ) -> list[Applied[T]]:
        """Each work run with this transaction, in order, as if each had a savepoint of its
        own: one that raises one of `refusals` is undone alone (that exception is its
        result) and the others still commit. Any other exception is raised at once.

        Why not a savepoint each: a savepoint is two more statements, each a trip to the
        database's thread, and a preemption storm's tick applies hundreds of one-statement
        writes (docs/benchmarks.md). So they share one, and refusals are rare: when one
        refuses, the shared savepoint is undone, `undone()` is told (the caller forgets
        what it noted outside the transaction for the works that ran), and the works run
        again, each in a savepoint of its own. A work may therefore run twice; what it
        does outside the transaction must be undone by `undone`.
        """
        values: list[T] = []
        try:
            async with self.savepoint():
                for work in works:
                    values.append(await work(self))
        except refusals as exc:
            if connection_lost(exc):
                raise  # the transaction is gone, not one work: nothing to run again
            if undone is not None:
                undone()
            return [await self._apply_alone(work, refusals) for work in works]
        return [Applied(value) for value in values]

    async def _apply_alone(
        self, work: Work[T], refusals: tuple[type[Exception], ...]
    ) -> Applied[T]:
        try:
            async with self.savepoint():
                return Applied(await work(self))
        except refusals as exc:
            if connection_lost(exc):
                raise
            return Applied(error=exc)
