"""`PruneWrites`: the deletes of the maintenance task (runtime/maintenance.py), each bounded.

Every method removes at most `limit` rows, so a backlog (a year of events on the first run
with retention) is worked off in many short transactions: the SQLite write lock is never held
long enough to stall a tick. The rules (what is old, which zones are stale, which phases have
ended) are core's (core/model/retention.py); this module only runs the statements.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime

from sqlalchemy import delete, select, tuple_, update

from tpucared.core.model.records import NodePhase
from tpucared.store.models import EventRow, NodeRow, WorkerRow, ZoneHealthRow
from tpucared.store.write_base import WriterBase


class PruneWrites(WriterBase):
    async def prune_events(self, before: datetime, limit: int) -> int:
        """Delete up to `limit` of the oldest events older than `before`; the count deleted.
        Ids are never reused (AUTOINCREMENT), so `events --follow` is not confused."""
        oldest = select(EventRow.id).where(EventRow.at < before).order_by(EventRow.id).limit(limit)
        result = await self._conn.execute(delete(EventRow).where(EventRow.id.in_(oldest)))
        return int(result.rowcount or 0)

    async def zone_health_keys(self) -> list[tuple[str, str]]:
        rows = await self._conn.execute(select(ZoneHealthRow.project, ZoneHealthRow.zone))
        return [(str(p), str(z)) for p, z in rows]

    async def forget_zone_health(self, zones: Iterable[tuple[str, str]]) -> int:
        keys = list(zones)
        if not keys:
            return 0
        stmt = delete(ZoneHealthRow).where(
            tuple_(ZoneHealthRow.project, ZoneHealthRow.zone).in_(keys)
        )
        return int((await self._conn.execute(stmt)).rowcount or 0)

    async def clear_pins(self, ended: Collection[NodePhase], limit: int) -> int:
        """Clear the pinned host keys of up to `limit` workers of incarnations in an `ended`
        phase. The worker rows (addresses) stay: the history queries read them."""
        pinned = (
            select(WorkerRow.node_id, WorkerRow.worker)
            .join(NodeRow, NodeRow.id == WorkerRow.node_id)
            .where(NodeRow.phase.in_(list(ended)), WorkerRow.host_keys != [])
            .limit(limit)
        )
        stmt = (
            update(WorkerRow)
            .where(tuple_(WorkerRow.node_id, WorkerRow.worker).in_(pinned))
            .values(host_keys=[])
        )
        return int((await self._conn.execute(stmt)).rowcount or 0)
