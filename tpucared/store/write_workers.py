"""Writes to an incarnation's workers: their addresses and their pinned SSH host keys.

Where it sits: `NodeWrites` (store/write_nodes.py) extends this class; `transition` and
`record_cloud` call `set_workers` when the cloud facts carry endpoints, and the workload's
SSH runner pins each worker's host keys on its first connection (`pin_host_keys`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, insert, select, update

from tpucared.core.model.observed import WorkerEndpoint
from tpucared.core.model.records import WorkerRecord
from tpucared.store import convert
from tpucared.store.errors import NotFound, StaleWrite
from tpucared.store.models import WorkerRow
from tpucared.store.write_base import WriterBase


class WorkerWrites(WriterBase):
    async def set_workers(
        self, incarnation_id: int, endpoints: Sequence[WorkerEndpoint]
    ) -> tuple[WorkerRecord, ...]:
        """Make the incarnation's workers exactly `endpoints`. A worker keeps its pinned
        host keys while its internal address is unchanged; a moved worker is a different
        host, so its keys are dropped and pinned again on the next connection."""
        known = {w.index: w for w in (await self.workers([incarnation_id])).get(incarnation_id, ())}
        wanted = {ep.index: ep for ep in endpoints}
        gone = [i for i in known if i not in wanted]
        if gone:
            await self._conn.execute(
                delete(WorkerRow).where(
                    WorkerRow.node_id == incarnation_id, WorkerRow.worker.in_(gone)
                )
            )
        for index, ep in wanted.items():
            old = known.get(index)
            if old is None:
                await self._conn.execute(
                    insert(WorkerRow).values(
                        node_id=incarnation_id,
                        worker=index,
                        internal_ip=ep.internal_ip,
                        external_ip=ep.external_ip,
                        host_keys=[],
                    )
                )
            elif (old.internal_ip, old.external_ip) != (ep.internal_ip, ep.external_ip):
                keys = list(old.host_keys) if old.internal_ip == ep.internal_ip else []
                await self._conn.execute(
                    update(WorkerRow)
                    .where(WorkerRow.node_id == incarnation_id, WorkerRow.worker == index)
                    .values(internal_ip=ep.internal_ip, external_ip=ep.external_ip, host_keys=keys)
                )
        return (await self.workers([incarnation_id])).get(incarnation_id, ())

    async def pin_host_keys(
        self, incarnation_id: int, worker: int, host_keys: Sequence[str]
    ) -> WorkerRecord:
        """Pin a worker's SSH host keys (trust on first use, for this incarnation only).
        Pinning the same keys again is a no-op; different keys raise `StaleWrite`."""
        keys = sorted(set(host_keys))
        if not keys:
            raise ValueError("no host keys to pin")
        where = (WorkerRow.node_id == incarnation_id, WorkerRow.worker == worker)
        await self._conn.execute(
            update(WorkerRow).where(*where, WorkerRow.host_keys == []).values(host_keys=keys)
        )
        rows = await self._rows(select(WorkerRow.__table__).where(*where))
        if not rows:
            raise NotFound(f"worker {worker} of node incarnation {incarnation_id}")
        record = convert.worker(rows[0])
        if list(record.host_keys) != keys:
            raise StaleWrite(
                f"host keys of worker {worker} of node incarnation {incarnation_id}",
                keys,
                list(record.host_keys),
            )
        return record
