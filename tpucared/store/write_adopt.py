"""`AdoptWrites`: many OpenSlot and Adopt actions in a few statements, for a fleet found again.

When the database is lost (or a fleet's nodes were made by hand) the first plan adopts every
node the lists show: 10,000 nodes are 10,000 OpenSlot and 10,000 Adopt actions. One at a
time, `open_slot` and `adopt` (write_base.py, write_nodes.py) cost ~19 statements per node,
each a round trip to SQLite's thread: ~15 ms a node, minutes for a large fleet. The methods
here write exactly the rows and events those write, in the same order, with one statement
per table for a whole run of actions (tests/store/test_store_adopt_many.py compares the two
databases row by row). The executor (runtime/nodes/executor.py) hands them its runs of
consecutive OpenSlot and Adopt actions inside one transaction.

What `adopt` would refuse is refused here too, action by action, and the others are still
written: a slot or a node name (zone, name) with a live incarnation, in the database or
earlier in the same run (`LiveIncarnationExists`), and a phase the lifecycle does not allow
(`IllegalTransition`). An Adopt whose phase is REQUESTED (a queued resource not yet
provisioned) takes `adopt` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, or_, select, text, tuple_

from tpucared.core.model.lifecycle import LIVE_PHASES, IllegalTransition, check_transition
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.vocab.actions import Adopt, OpenSlot
from tpucared.store.errors import LiveIncarnationExists
from tpucared.store.models import LIVE_NODE_SQL, NodeRow, SlotRow, WorkerRow
from tpucared.store.node_values import cloud_values, entering
from tpucared.store.write_base import WriterBase, event_row, new_run_id

# What a bulk method says of each action: None (written) or why it was refused.
Refusal = LiveIncarnationExists | IllegalTransition | None


class AdoptWrites(WriterBase):
    async def open_slots(self, actions: Sequence[OpenSlot], now: datetime) -> None:
        """`open_slot` for each action: the slots not yet recorded, with their events."""
        await self._open_missing([(a.fleet, a.slot, a.reason) for a in actions], now, [])
        # Opening a slot that exists is a no-op, never a refusal.

    async def adopt_many(self, actions: Sequence[Adopt], now: datetime) -> list[Refusal]:
        """`adopt` for each action (phase other than REQUESTED): the node recorded straight
        in its phase with its cloud facts and workers, its slot opened if needed, and the
        events `adopt` appends (slot.opened, node.requested, node.<phase>)."""
        if any(a.phase is NodePhase.REQUESTED for a in actions):
            raise ValueError("an adoption as REQUESTED records its cloud facts: use adopt()")
        refusals: list[Refusal] = []
        live_slots, live_names = await self._live(actions)
        for a in actions:
            try:
                check_transition(NodePhase.REQUESTED, a.phase)
            except IllegalTransition as exc:
                refusals.append(exc)
                continue
            if (a.fleet, a.slot, a.slice) in live_slots:
                what = f"live incarnation of {a.fleet}/{a.slot}"
                refusals.append(
                    LiveIncarnationExists(what, None, live_slots[(a.fleet, a.slot, a.slice)])
                )
            elif (a.zone, a.node_name) in live_names:
                what = f"live node {a.zone}/{a.node_name}"
                refusals.append(LiveIncarnationExists(what, None, "uq_nodes_live_name"))
            else:
                refusals.append(None)
                if a.phase in LIVE_PHASES:  # a later action of the run meets it
                    live_slots[(a.fleet, a.slot, a.slice)] = 0
                    live_names.add((a.zone, a.node_name))
        taken = [a for a, r in zip(actions, refusals, strict=True) if r is None]
        if not taken:
            return refusals
        events: list[dict[str, Any]] = []
        opened = await self._open_missing([(a.fleet, a.slot, a.reason) for a in taken], now, None)
        rows = [self._node_values(a, now) for a in taken]
        ids = (
            await self._conn.execute(
                insert(NodeRow).returning(NodeRow.id, sort_by_parameter_order=True), rows
            )
        ).scalars()
        workers: list[dict[str, Any]] = []
        for a, node_id in zip(taken, list(ids), strict=True):
            slot_event = opened.pop((a.fleet, a.slot), None)  # its first adoption opened it
            if slot_event is not None:
                events.append(slot_event)
            events += self._node_events(a, node_id, now)
            for ep in a.cloud.endpoints or ():
                workers.append(
                    {
                        "node_id": node_id,
                        "worker": ep.index,
                        "internal_ip": ep.internal_ip,
                        "external_ip": ep.external_ip,
                        "host_keys": [],
                    }
                )
        self._events_rows(events)
        if workers:
            await self._conn.execute(insert(WorkerRow), workers)
        return refusals

    async def _open_missing(
        self,
        wanted: Sequence[tuple[str, int, str]],
        now: datetime,
        events: list[dict[str, Any]] | None,
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """Insert the slots of `wanted` (fleet, slot, reason) not recorded yet. Their
        slot.opened events are appended to `events` and written at once, or, if `events` is
        None, returned by slot for the caller to write in its own order."""
        keys = list(dict.fromkeys((fleet, slot) for fleet, slot, _ in wanted))
        existing: set[tuple[str, int]] = set()
        for chunk in _chunks(keys, 400):  # SQLite's bound-parameter limit, two per key
            rows = await self._conn.execute(
                select(SlotRow.fleet, SlotRow.slot).where(
                    tuple_(SlotRow.fleet, SlotRow.slot).in_(chunk)
                )
            )
            existing.update((f, s) for f, s in rows)
        new: dict[tuple[str, int], dict[str, Any]] = {}
        for fleet, slot, reason in wanted:
            if (fleet, slot) in existing or (fleet, slot) in new:
                continue
            new[(fleet, slot)] = event_row(
                "slot.opened", reason or f"{fleet}/{slot} opened", now, fleet=fleet, slot=slot
            )
        if not new:
            return {}
        await self._conn.execute(
            insert(SlotRow),
            [
                {"fleet": f, "slot": s, "run_id": new_run_id(f, s), "created_at": now}
                for f, s in new
            ],
        )
        if events is None:
            return new
        events += new.values()
        self._events_rows(events)
        return {}

    async def _live(
        self, actions: Sequence[Adopt]
    ) -> tuple[dict[tuple[str, int, int], int], set[tuple[str, str]]]:
        """The live incarnations the actions could meet: by (fleet, slot, slice), and by
        (zone, node name)."""
        fleets = sorted({a.fleet for a in actions})
        names = sorted({a.node_name for a in actions})
        slots: dict[tuple[str, int, int], int] = {}
        zoned: set[tuple[str, str]] = set()
        for chunk in _chunks(names, 800):
            stmt = select(
                NodeRow.id,
                NodeRow.fleet,
                NodeRow.slot,
                NodeRow.slice,
                NodeRow.zone,
                NodeRow.node_name,
            )
            stmt = stmt.where(
                text(LIVE_NODE_SQL), or_(NodeRow.fleet.in_(fleets), NodeRow.node_name.in_(chunk))
            )
            for node_id, fleet, slot, index, zone, name in await self._conn.execute(stmt):
                slots.setdefault((fleet, slot, index), node_id)
                zoned.add((zone, name))
        return slots, zoned

    @staticmethod
    def _node_values(a: Adopt, now: datetime) -> dict[str, Any]:
        """The row `request_node` then `transition` leave: the same columns, every row the
        same keys (one INSERT for many rows)."""
        requested = IncarnationRecord(
            id=0,
            fleet=a.fleet,
            slot=a.slot,
            node_name=a.node_name,
            zone=a.zone,
            accelerator_type=a.accelerator_type,
            phase=NodePhase.REQUESTED,
            phase_since=now,
            requested_at=now,
        )
        values: dict[str, Any] = {c: None for c in _PHASE_COLUMNS}
        values.update(
            fleet=a.fleet,
            slot=a.slot,
            slice=a.slice,
            node_name=a.node_name,
            zone=a.zone,
            accelerator_type=a.accelerator_type,
            phase_since=now,
            requested_at=now,
            queued_resource=a.queued_resource,
            project=a.project,
            api=a.api,
            error=None,
            operation=None,
            end_reason=a.end_reason,
        )
        values.update(entering(requested, a.phase, now))
        values.update(cloud_values(a.cloud))
        return values

    @staticmethod
    def _node_events(a: Adopt, node_id: int, now: datetime) -> list[dict[str, Any]]:
        where: dict[str, Any] = {
            "fleet": a.fleet,
            "slot": a.slot,
            "node": a.node_name,
            "incarnation_id": node_id,
        }
        details: dict[str, Any] = {"from": NodePhase.REQUESTED.value, "to": a.phase.value}
        if a.end_reason is not None:
            details["end_reason"] = a.end_reason
        details["cloud"] = cloud_values(a.cloud)
        return [
            event_row(
                "node.requested",
                a.reason or f"{a.node_name}: adopting the node found in {a.zone}",
                now,
                details={
                    "to": NodePhase.REQUESTED.value,
                    "zone": a.zone,
                    "accelerator_type": a.accelerator_type,
                    "queued_resource": a.queued_resource,
                },
                **where,
            ),
            event_row(
                f"node.{a.phase.value}",
                a.reason or f"{a.node_name}: adopted as {a.phase.value}",
                now,
                details=details,
                **where,
            ),
        ]


# Phase columns a bulk row sets to None unless the phase entered stamps them, so that every
# row of the one INSERT has the same keys.
_PHASE_COLUMNS = ("creating_at", "ready_at", "dead_at", "deleting_at", "deleted_at", "failed_at")


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
