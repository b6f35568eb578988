"""Writes of what a fleet's `on_maintenance` did about a node's announced window.

The workload runner's maintenance steps (runtime/workload/maintenance.py) record here, before
the remote step they stand for, so a crash in between neither repeats it nor forgets it:
`handle_window` marks the window (by its start) as handled and, when a run got the stop signal,
when; `note_early_start` marks that the cloud was asked to start it now. Each is a
compare-and-set on the node still READY (`StaleWrite` otherwise: the node moved on since the
plan) and appends its event. The planner reads them back on `IncarnationRecord`
(core/workload/maintenance.py).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import update

from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.store import convert
from tpucared.store.errors import NotFound, StaleWrite
from tpucared.store.models import NodeRow
from tpucared.store.write_base import WriterBase


class MaintenanceWrites(WriterBase):
    async def handle_window(
        self,
        incarnation_id: int,
        window_start: datetime,
        now: datetime,
        *,
        signalled: bool,
        message: str,
        **details: object,
    ) -> IncarnationRecord:
        """The window starting at `window_start` handled now; `signalled`: a run got the stop
        signal for it (the judge then reads its end as the maintenance's)."""
        # A new window: the early start asked for an earlier one is not this one's.
        values: dict[str, object] = {
            "maintenance_handled_for": window_start,
            "maintenance_started_at": None,
        }
        if signalled:
            values["maintenance_checkpoint_at"] = now
        inc = await self._ready_update(incarnation_id, values)
        self._node_event(inc, "maintenance.checkpoint", message, now,
                         window_start=window_start.isoformat(), signalled=signalled,
                         **details)  # fmt: skip
        return inc

    async def note_early_start(
        self, incarnation_id: int, now: datetime, *, kind: str, message: str, **details: object
    ) -> IncarnationRecord:
        """The cloud asked (or about to be asked) to start the window now: asked once."""
        inc = await self._ready_update(incarnation_id, {"maintenance_started_at": now})
        self._node_event(inc, kind, message, now, **details)
        return inc

    async def _ready_update(
        self, incarnation_id: int, values: dict[str, object]
    ) -> IncarnationRecord:
        stmt = (
            update(NodeRow)
            .where(NodeRow.id == incarnation_id, NodeRow.phase == NodePhase.READY)
            .values(values)
            .returning(*NodeRow.__table__.c)
        )
        row = (await self._conn.execute(stmt)).mappings().one_or_none()
        if row is None:
            current = await self.incarnation(incarnation_id)
            if current is None:
                raise NotFound(f"node incarnation {incarnation_id}")
            raise StaleWrite(f"phase of node incarnation {incarnation_id}", NodePhase.READY,
                             current.phase)  # fmt: skip
        return convert.incarnation(row)
