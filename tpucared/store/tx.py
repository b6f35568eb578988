"""`Tx`: one write transaction with every read and write the store offers.

Handed out by `Store.write()`; valid only inside that `async with` block. The methods are
grouped by what they change: `write_base` (events, fleets, slots, create attempts),
`write_nodes` (incarnations and workers), `write_adopt` (many slots and adoptions at once),
`write_workloads` (workload attempts), `lease` (the leader lease), `prune`
(the maintenance task's bounded deletes); the reads come from `reads.Reader`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tpucared.store.lease import LeaseWrites
from tpucared.store.prune import PruneWrites
from tpucared.store.write_adopt import AdoptWrites
from tpucared.store.write_nodes import NodeWrites
from tpucared.store.write_workloads import WorkloadWrites


class Tx(NodeWrites, AdoptWrites, WorkloadWrites, PruneWrites, LeaseWrites):
    """Everything in one `Store.write()` block commits together or not at all."""

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """A part of the transaction that is undone alone when its block raises (a SAVEPOINT):
        the rest of the transaction goes on and still commits together. The executor gives
        each action of a batch one, so a stale action never undoes the others."""
        appended = len(self._events)
        try:
            async with self._conn.begin_nested():
                yield
        except BaseException:
            del self._events[appended:]  # its events are undone with it
            raise
