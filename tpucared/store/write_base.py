"""The shared half of a write transaction: events, fleets, slots and create attempts.

`WriterBase` extends `Reader` with the writes every other writer builds on; `Tx`
(`tpucared.store.tx`) assembles it with the node and workload writers. Rules all writers follow:

- Each method is one logical change; all of them inside one `Store.write()` block commit
  together (SQLite `BEGIN IMMEDIATE` ... `COMMIT`) or not at all, so a `kill -9` never leaves
  half a change, and an exception rolls the whole block back.
- State changes append their event row in the same transaction: state and event log agree.
- `now` is always passed in; the store never reads the clock.
- Optional update arguments default to `KEEP` (leave the column alone); `None` sets NULL.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from typing import Any, Final, Literal

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from tpucared.core.model.records import (
    CreateAttemptRecord,
    EventRecord,
    FleetRecord,
    IncarnationRecord,
    SlotRecord,
)
from tpucared.core.vocab.actions import SlotUpdate
from tpucared.store import convert, statements
from tpucared.store.cache import RecordCache
from tpucared.store.errors import NotFound
from tpucared.store.models import CreateAttemptRow, EventRow, FleetRow, SlotRow, ZoneHealthRow
from tpucared.store.reads import Reader
from tpucared.store.snapshot import ZoneHealth


class _Keep(Enum):
    KEEP = "keep"


KEEP: Final = _Keep.KEEP
Keep = Literal[_Keep.KEEP]


def given(**values: object) -> dict[str, object]:
    """The keyword arguments that are not `KEEP`: the columns to write."""
    return {k: v for k, v in values.items() if v is not KEEP}


def new_run_id(fleet: str, slot: int) -> str:
    """Readable and unique: `sweep-3-4f1c2a9b0d7e`. Made once per slot, never changed."""
    return f"{fleet}-{slot}-{uuid.uuid4().hex[:12]}"


def slot_update_details(su: SlotUpdate) -> dict[str, Any]:
    return {
        "create_failures": su.create_failures,
        "next_create_at": su.next_create_at,
        "next_zone": su.next_zone,
        "last_error": su.last_error,
        "add_preemptions": su.add_preemptions,
    }


def slot_update_params(su: SlotUpdate) -> dict[str, Any]:
    """`statements.SLOT_UPDATE`'s parameters for `su`."""
    return {
        "slot_fleet": su.fleet,
        "slot_index": su.slot,
        "v_create_failures": su.create_failures,
        "v_next_create_at": su.next_create_at,
        "v_next_zone": su.next_zone,
        "v_last_error": su.last_error,
        "v_add_preemptions": su.add_preemptions,
    }


def event_row(
    kind: str,
    message: str,
    now: datetime,
    *,
    fleet: str | None = None,
    slot: int | None = None,
    node: str | None = None,
    incarnation_id: int | None = None,
    details: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One `events` row's values: what `append_event` inserts, and what the bulk writes
    (write_adopt.py) insert many of at once."""
    return {
        "at": now,
        "kind": kind,
        "message": message,
        "fleet": fleet,
        "slot": slot,
        "node": node,
        "node_id": incarnation_id,
        "details": dict(details or {}),
    }


class WriterBase(Reader):
    def __init__(self, conn: AsyncConnection, cache: RecordCache | None = None) -> None:
        super().__init__(conn, cache)
        # Events appended and not inserted yet: one INSERT of many rows when the transaction
        # commits (`Store.write`), or before anything reads events in it. A preemption storm
        # writes thousands of events a tick; one statement each cost half a millisecond of
        # the daemon's one core apiece (docs/benchmarks.md). Their ids keep the order in
        # which they were appended; a savepoint undone drops its own (`Tx.savepoint`).
        self._events: list[dict[str, Any]] = []

    # -- events -------------------------------------------------------------------------------

    async def append_event(
        self,
        kind: str,
        message: str,
        now: datetime,
        *,
        fleet: str | None = None,
        slot: int | None = None,
        node: str | None = None,
        incarnation_id: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> EventRecord:
        """Append one event now (e.g. kind="notice", details={"severity": ..., "key": ...})
        and return it as written; the store's own writes use `_event`, inserted in bulk."""
        await self.flush_events()
        row = event_row(
            kind,
            message,
            now,
            fleet=fleet,
            slot=slot,
            node=node,
            incarnation_id=incarnation_id,
            details=details,
        )
        stmt = insert(EventRow).values(row).returning(*EventRow.__table__.c)
        return convert.event((await self._conn.execute(stmt)).mappings().one())

    async def append_event_once(
        self, kind: str, message: str, now: datetime, *, incarnation_id: int, **where: Any
    ) -> EventRecord | None:
        """`append_event` (`where`: its fleet, slot, node, details), unless the incarnation
        already has an event of `kind` (None then): for what two paths may learn first, such
        as a node's preemption notice."""
        await self.flush_events()
        seen = select(EventRow.id).where(EventRow.node_id == incarnation_id, EventRow.kind == kind)
        if (await self._conn.execute(seen.limit(1))).first() is not None:
            return None
        return await self.append_event(kind, message, now, incarnation_id=incarnation_id, **where)

    def _event(self, kind: str, message: str, now: datetime, **where: Any) -> None:
        """Append one event (`event_row`'s fleet, slot, node, incarnation_id, details),
        inserted with the others at `flush_events`."""
        self._events.append(event_row(kind, message, now, **where))

    def _events_rows(self, rows: list[dict[str, Any]]) -> None:
        """Append many `event_row`s, in order (the bulk writes)."""
        self._events += rows

    async def flush_events(self) -> None:
        """Insert the events appended so far, in one statement."""
        if self._events:
            rows, self._events = self._events, []
            await self._conn.execute(insert(EventRow), rows)

    def _node_event(
        self, inc: IncarnationRecord, kind: str, message: str, now: datetime, **details: Any
    ) -> None:
        self._event(
            kind,
            message,
            now,
            fleet=inc.fleet,
            slot=inc.slot,
            node=inc.node_name,
            incarnation_id=inc.id,
            details=details,
        )

    async def _before_event_read(self) -> None:
        """Event reads in this transaction see the events appended so far."""
        await self.flush_events()

    # -- fleets -------------------------------------------------------------------------------

    async def record_fleet(
        self, name: str, spec_hash: str, spec_json: str, now: datetime, *, reason: str = ""
    ) -> FleetRecord:
        """Insert or update a fleet's spec (RecordFleet); `applied_at` moves only when the
        spec changed, `down` is kept."""
        current = await self.fleet(name)
        if current is None:
            await self._conn.execute(
                insert(FleetRow).values(
                    name=name, spec_hash=spec_hash, spec_json=spec_json, applied_at=now
                )
            )
        elif current.spec_hash != spec_hash or current.spec_json != spec_json:
            await self._conn.execute(
                update(FleetRow)
                .where(FleetRow.name == name)
                .values(spec_hash=spec_hash, spec_json=spec_json, applied_at=now)
            )
        else:
            return current
        self._event(
            "fleet.recorded",
            reason or f"fleet {name}: spec {spec_hash}",
            now,
            fleet=name,
            details={
                "spec_hash": spec_hash,
                "previous_spec_hash": current.spec_hash if current else None,
            },
        )
        return await self._require_fleet(name)

    async def set_fleet_down(
        self, name: str, down: bool, now: datetime, *, reason: str = ""
    ) -> FleetRecord:
        """`tpucared down` (keep no nodes for this fleet), or undo it."""
        before = await self._require_fleet(name)
        if before.down == down:
            return before
        await self._conn.execute(update(FleetRow).where(FleetRow.name == name).values(down=down))
        self._event(
            "fleet.down" if down else "fleet.up",
            reason or f"fleet {name}: {'down, deleting its nodes' if down else 'up again'}",
            now,
            fleet=name,
        )
        return await self._require_fleet(name)

    async def _require_fleet(self, name: str) -> FleetRecord:
        record = await self.fleet(name)
        if record is None:
            raise NotFound(f"fleet {name}")
        return record

    # -- slots --------------------------------------------------------------------------------

    async def open_slot(
        self, fleet: str, slot: int, now: datetime, *, reason: str = ""
    ) -> SlotRecord:
        """Create the slot (with its run_id, once) unless it exists (OpenSlot)."""
        existing = await self.slot(fleet, slot)
        if existing is not None:
            return existing
        await self._conn.execute(
            insert(SlotRow).values(
                fleet=fleet, slot=slot, run_id=new_run_id(fleet, slot), created_at=now
            )
        )
        self._event("slot.opened", reason or f"{fleet}/{slot} opened", now, fleet=fleet, slot=slot)
        return await self._require_slot(fleet, slot)

    async def ensure_slots(self, fleet: str, size: int, now: datetime) -> list[SlotRecord]:
        """`open_slot` for 0..size-1; returns every slot of the fleet (also any beyond)."""
        for index in range(size):
            await self.open_slot(fleet, index, now)
        return await self.slots(fleet)

    async def apply_slot_update(self, su: SlotUpdate) -> None:
        """The planner's slot bookkeeping (SlotUpdate): absolute create backoff fields, plus
        `add_preemptions` added to the counter. Normally passed to `transition`, which
        applies it in the same compare-and-set transaction. `NotFound` if there is no slot."""
        params = slot_update_params(su)
        if (await self._conn.execute(statements.SLOT_UPDATE, params)).rowcount != 1:
            raise NotFound(f"slot {su.fleet}/{su.slot}")

    async def update_slot(
        self,
        fleet: str,
        slot: int,
        now: datetime,
        *,
        done: bool | Keep = KEEP,
        last_error: str | Keep | None = KEEP,
        next_create_at: datetime | Keep | None = KEEP,
        next_zone: str | Keep | None = KEEP,
        held_since: datetime | Keep | None = KEEP,
        reason: str = "",
    ) -> SlotRecord:
        """Set some of a slot's fields. The counters change only with what they count."""
        before = await self._require_slot(fleet, slot)
        values = given(
            done=done,
            last_error=last_error,
            next_create_at=next_create_at,
            next_zone=next_zone,
            held_since=held_since,
        )
        if values:
            await self._conn.execute(
                update(SlotRow).where(SlotRow.fleet == fleet, SlotRow.slot == slot).values(values)
            )
        if done is not KEEP and done != before.done:
            self._event(
                "slot.done" if done else "slot.reopened",
                reason or f"{fleet}/{slot}: {'done, no node wanted' if done else 'wanted again'}",
                now,
                fleet=fleet,
                slot=slot,
            )
        return await self._require_slot(fleet, slot)

    async def _require_slot(self, fleet: str, slot: int) -> SlotRecord:
        record = await self.slot(fleet, slot)
        if record is None:
            raise NotFound(f"slot {fleet}/{slot}")
        return record

    # -- create attempts ----------------------------------------------------------------------

    async def record_create_attempt(self, attempt: CreateAttemptRecord) -> CreateAttemptRecord:
        """Log one create call once its fate is known (our only view of capacity). Backoff
        bookkeeping is the planner's, through `SlotUpdate`."""
        await self._conn.execute(
            insert(CreateAttemptRow).values(
                fleet=attempt.fleet,
                slot=attempt.slot,
                zone=attempt.zone,
                accelerator_type=attempt.accelerator_type,
                started_at=attempt.started_at,
                outcome=attempt.outcome,
                latency_s=attempt.latency_s,
                message=attempt.message,
                node_id=attempt.incarnation_id,
            )
        )
        return attempt

    # -- zone health --------------------------------------------------------------------------

    async def save_zone_health(self, health: ZoneHealth, now: datetime) -> None:
        """Record whether a (project, zone) could be listed (one row, replaced). The runtime
        calls it only when the row changes; the event that goes with it is the caller's."""
        values = {
            "failures": health.failures,
            "error_kind": health.error_kind,
            "error_message": health.error_message,
            "failing_since": health.failing_since,
            "last_ok_at": health.last_ok_at,
            "unreachable": health.unreachable,
            "next_list_at": health.next_list_at,
            "updated_at": now,
        }
        where = (ZoneHealthRow.project == health.project, ZoneHealthRow.zone == health.zone)
        result = await self._conn.execute(update(ZoneHealthRow).where(*where).values(**values))
        if result.rowcount == 0:
            await self._conn.execute(
                insert(ZoneHealthRow).values(project=health.project, zone=health.zone, **values)
            )
