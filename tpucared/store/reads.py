"""Queries: everything the daemon and the CLI read from the store, inside one transaction.

A `Reader` wraps a connection that is already inside a transaction (`Store.read()` opens a
deferred read transaction, `Store.write()` an immediate write transaction whose `Tx` inherits
these methods), so several queries see one consistent state. Results are `core.model` records
or the read models of `tpucared.store.snapshot`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Executable, Select, func, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from tpucared.core.leadership.lease import Holder, Lease
from tpucared.core.model.lifecycle import LIVE_PHASES
from tpucared.core.model.records import (
    CreateAttemptRecord,
    EventRecord,
    FleetRecord,
    IncarnationRecord,
    SlotRecord,
    WorkerRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.workload.job_failures import JOB_FAILED, JOB_RECOVERED
from tpucared.store import convert, loss_counts, page_reads, statements
from tpucared.store.cache import RecordCache
from tpucared.store.changes import changed_snapshot, read_counts
from tpucared.store.ledger_reads import LedgerRecords, read_ledger
from tpucared.store.models import (
    LIVE_NODE_SQL,
    CreateAttemptRow,
    EventRow,
    FleetRow,
    LeaderLeaseRow,
    NodeRow,
    SlotRow,
    WorkerRow,
    WorkloadAttemptRow,
    ZoneHealthRow,
)
from tpucared.store.page_reads import PageRow, SlotFilter
from tpucared.store.snapshot import (
    FleetStatus,
    SliceStatus,
    SlotKey,
    SlotStatus,
    Snapshot,
    ZoneHealth,
    frozen_mapping,
)

# Written as the partial indexes' own WHERE text so SQLite can use them (it cannot prove that a
# bound-parameter IN list implies the index condition).
_LIVE = text(LIVE_NODE_SQL)

R = TypeVar("R")


def _newest_per_slot(model: type[WorkloadAttemptRow] | type[CreateAttemptRow]) -> Select[Any]:
    newest = select(func.max(model.id)).group_by(model.fleet, model.slot)
    return select(model.__table__).where(model.id.in_(newest))


class Reader:
    """Read queries on one transaction's connection. With a `RecordCache` (the Store's, for
    `Store.read()`), the snapshot's big reads reuse the records of unchanged rows."""

    def __init__(self, conn: AsyncConnection, cache: RecordCache | None = None) -> None:
        self._conn = conn
        self._cache = cache

    async def _before_event_read(self) -> None:
        """A write transaction inserts the events it appended first (write_base.py)."""

    async def _records(
        self,
        name: str,
        stmt: Select[Any],
        key: Sequence[str],
        build: Callable[[Mapping[str, Any]], R],
    ) -> list[R]:
        """`build` over the rows of `stmt`, through the record cache when there is one."""
        if self._cache is not None:
            cached = await self._cache.records(name, self._conn, stmt, key, build)
            if cached is not None:
                return cached
        return [build(r) for r in await self._rows(stmt)]

    async def _rows(
        self, stmt: Executable, params: Mapping[str, Any] | None = None
    ) -> Sequence[Mapping[str, Any]]:
        """The rows as plain dicts. SQLAlchemy's `RowMapping` answers `column in row` in
        Python (microseconds a call), and `convert` asks it for every field of every row:
        at 10,000 live incarnations a tick, that was most of the snapshot's cost."""
        result = await self._conn.execute(stmt, params)
        keys = tuple(result.keys())
        return [dict(zip(keys, row, strict=True)) for row in result.all()]

    # -- single records -----------------------------------------------------------------------

    async def fleet(self, name: str) -> FleetRecord | None:
        rows = await self._rows(select(FleetRow.__table__).where(FleetRow.name == name))
        return convert.fleet(rows[0]) if rows else None

    async def slot(self, fleet: str, slot: int) -> SlotRecord | None:
        rows = await self._rows(statements.SLOT, {"slot_fleet": fleet, "slot_index": slot})
        return convert.slot(rows[0]) if rows else None

    async def incarnation(self, incarnation_id: int) -> IncarnationRecord | None:
        rows = await self._rows(statements.INCARNATION, {"inc_id": incarnation_id})
        return convert.incarnation(rows[0]) if rows else None

    async def workload_attempt(self, attempt_id: int) -> WorkloadAttemptRecord | None:
        stmt = select(WorkloadAttemptRow.__table__).where(WorkloadAttemptRow.id == attempt_id)
        rows = await self._rows(stmt)
        return convert.workload_attempt(rows[0]) if rows else None

    # -- collections --------------------------------------------------------------------------

    async def fleets(self) -> list[FleetRecord]:
        rows = await self._rows(select(FleetRow.__table__).order_by(FleetRow.name))
        return [convert.fleet(r) for r in rows]

    async def zone_health(self) -> list[ZoneHealth]:
        """Every (project, zone) the daemon has listed, by project and zone. Empty on a
        database from before migration 0003 (a read-only `status` of an old file)."""
        stmt = select(ZoneHealthRow.__table__).order_by(ZoneHealthRow.project, ZoneHealthRow.zone)
        try:
            rows = await self._rows(stmt)
        except OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        return [_zone_health(r) for r in rows]

    async def leader_lease(self) -> Lease | None:
        """The leader lease (store/lease.py). None on a database from before migration 0005
        (a read-only `status` of an old file)."""
        try:
            return await read_lease(self._conn)
        except OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise

    async def slots(self, fleet: str | None = None) -> list[SlotRecord]:
        stmt = select(SlotRow.__table__).order_by(SlotRow.fleet, SlotRow.slot)
        if fleet is not None:
            stmt = stmt.where(SlotRow.fleet == fleet)
            return [convert.slot(r) for r in await self._rows(stmt)]
        return await self._records("slots", stmt, ("fleet", "slot"), convert.slot)

    async def incarnations(
        self,
        fleet: str | None = None,
        slot: int | None = None,
        *,
        live_only: bool = False,
        limit: int | None = None,
    ) -> list[IncarnationRecord]:
        """Newest first."""
        stmt = select(NodeRow.__table__).order_by(NodeRow.id.desc()).limit(limit)
        if fleet is not None:
            stmt = stmt.where(NodeRow.fleet == fleet)
        if slot is not None:
            stmt = stmt.where(NodeRow.slot == slot)
        if live_only:
            stmt = stmt.where(_LIVE)
            if fleet is None and slot is None and limit is None:  # the snapshot's read
                return await self._records("live nodes", stmt, ("id",), convert.incarnation)
        return [convert.incarnation(r) for r in await self._rows(stmt)]

    async def workers(
        self, incarnation_ids: Collection[int]
    ) -> dict[int, tuple[WorkerRecord, ...]]:
        if not incarnation_ids:
            return {}
        stmt = (
            select(WorkerRow.__table__)
            .where(WorkerRow.node_id.in_(list(incarnation_ids)))
            .order_by(WorkerRow.node_id, WorkerRow.worker)
        )
        grouped: dict[int, list[WorkerRecord]] = defaultdict(list)
        for row in await self._rows(stmt):
            grouped[row["node_id"]].append(convert.worker(row))
        return {node_id: tuple(ws) for node_id, ws in grouped.items()}

    async def live_workers(self) -> dict[int, tuple[WorkerRecord, ...]]:
        """The workers of every live incarnation. One subquery instead of `workers(ids)`:
        10,000 live incarnations would otherwise be 10,000 bound parameters, near SQLite's
        limit on variables and costly to build and bind every tick."""
        live_ids = select(NodeRow.id).where(_LIVE)
        stmt = (
            select(WorkerRow.__table__)
            .where(WorkerRow.node_id.in_(live_ids))
            .order_by(WorkerRow.node_id, WorkerRow.worker)
        )
        grouped: dict[int, list[WorkerRecord]] = defaultdict(list)
        key = ("node_id", "worker")
        for worker in await self._records("live workers", stmt, key, convert.worker):
            grouped[worker.incarnation_id].append(worker)
        return {node_id: tuple(ws) for node_id, ws in grouped.items()}

    async def workload_attempts(
        self, fleet: str | None = None, slot: int | None = None, *, limit: int | None = None
    ) -> list[WorkloadAttemptRecord]:
        """Newest first."""
        stmt = (
            select(WorkloadAttemptRow.__table__).order_by(WorkloadAttemptRow.id.desc()).limit(limit)
        )
        if fleet is not None:
            stmt = stmt.where(WorkloadAttemptRow.fleet == fleet)
        if slot is not None:
            stmt = stmt.where(WorkloadAttemptRow.slot == slot)
        return [convert.workload_attempt(r) for r in await self._rows(stmt)]

    async def create_attempts(
        self, fleet: str | None = None, *, since: datetime | None = None, limit: int | None = 100
    ) -> list[CreateAttemptRecord]:
        """Newest first."""
        stmt = select(CreateAttemptRow.__table__).order_by(CreateAttemptRow.id.desc()).limit(limit)
        if fleet is not None:
            stmt = stmt.where(CreateAttemptRow.fleet == fleet)
        if since is not None:
            stmt = stmt.where(CreateAttemptRow.started_at >= since)
        return [convert.create_attempt(r) for r in await self._rows(stmt)]

    async def ledger(
        self,
        fleet: str | None = None,
        slot: int | None = None,
        since: datetime | None = None,
        *,
        kept: bool = True,
        slots: Sequence[int] | None = None,
        sums: bool = True,
    ) -> LedgerRecords:
        """What `tpucared goodput` sums: the slots' records since `since`, or the kept days
        and the records after them (`kept`, `sums`; `slots`: these of `fleet`;
        ledger_reads.py)."""
        return await read_ledger(self._conn, fleet, slot, since, kept=kept, slots=slots, sums=sums)

    async def page_slot_keys(self, f: SlotFilter) -> list[tuple[str, int, int | None]]:
        """The page's slot table: every matching slot's key, in order (page_reads.py)."""
        return await page_reads.slot_keys(self._conn, f)

    async def page_slot_rows(self, keys: Sequence[tuple[str, int, int | None]]) -> list[PageRow]:
        return await page_reads.slot_rows(self._conn, keys)

    async def events(
        self,
        since_id: int | None = None,
        limit: int = 100,
        fleet: str | None = None,
        *,
        incarnation_id: int | None = None,
    ) -> list[EventRecord]:
        """Events in id order. With `since_id`, the first `limit` events after it (for
        `events --follow`: pass the last id seen); without, the newest `limit` events."""
        await self._before_event_read()
        stmt = select(EventRow.__table__)
        if fleet is not None:
            stmt = stmt.where(EventRow.fleet == fleet)
        if incarnation_id is not None:
            stmt = stmt.where(EventRow.node_id == incarnation_id)
        if since_id is not None:
            stmt = stmt.where(EventRow.id > since_id).order_by(EventRow.id).limit(limit)
            rows = await self._rows(stmt)
        else:
            rows = list(reversed(await self._rows(stmt.order_by(EventRow.id.desc()).limit(limit))))
        return [convert.event(r) for r in rows]

    async def job_failures(self) -> dict[SlotKey, EventRecord]:
        """Per slot whose workload jobs are failing (its newest `workload.job_failed` or
        `workload.job_recovered` event is a failure, core/workload/job_failures.py): that
        failure. One scan of the events; they are pruned after `daemon.events_retention`."""
        await self._before_event_read()
        kinds = (JOB_FAILED, JOB_RECOVERED)
        newest = (
            select(func.max(EventRow.id))
            .where(EventRow.kind.in_(kinds))
            .group_by(EventRow.fleet, EventRow.slot)
        )
        stmt = select(EventRow.__table__).where(
            EventRow.id.in_(newest), EventRow.kind == JOB_FAILED
        )
        events = [convert.event(r) for r in await self._rows(stmt)]
        return {(e.fleet, e.slot): e for e in events if e.fleet is not None and e.slot is not None}

    async def last_event_id(self) -> int:
        await self._before_event_read()
        value = (await self._conn.execute(select(func.max(EventRow.id)))).scalar()
        return int(value or 0)

    # -- assembled views ----------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        """The planner's input; see `Snapshot`. Six queries, whatever the fleet size; with
        the store's cache, two when nothing changed since the previous one (cache.py), and
        only the rows that changed when nothing was deleted (changes.py)."""
        counts = await read_counts(self._conn) if self._cache is not None else None
        if self._cache is None or counts is None:
            return await self._read_snapshot()
        kept: Snapshot | None = self._cache.snapshot_at(counts.counter)
        if kept is not None:
            last = await self.last_event_id()
            return kept if kept.last_event_id == last else replace(kept, last_event_id=last)
        snap = None
        kept_last = self._cache.kept_snapshot()
        base = None if kept_last is None else kept_last.base_at(counts.counter, counts.deletions)
        if kept_last is not None and base is not None:
            fleets = await self.fleets()
            snap = await changed_snapshot(
                base,
                kept_last.counter,
                self._rows,
                frozen_mapping({f.name: f for f in fleets}),
                await self.last_event_id(),
            )
            self._cache.snapshot_updates += snap is not None
        whole = snap is None
        if snap is None:
            snap = await self._read_snapshot()
        self._cache.keep_snapshot(counts.counter, snap, counts.deletions, whole=whole)
        return snap

    async def _read_snapshot(self) -> Snapshot:
        fleets = await self.fleets()
        slots = await self.slots()
        live = await self.incarnations(live_only=True)
        workers = await self.live_workers()
        attempts = await self._records(
            "last attempts",
            _newest_per_slot(WorkloadAttemptRow),
            ("id",),
            convert.workload_attempt,
        )
        creates = await self._records(
            "last creates", _newest_per_slot(CreateAttemptRow), ("id",), convert.create_attempt
        )
        return Snapshot(
            fleets=frozen_mapping({f.name: f for f in fleets}),
            slots=frozen_mapping({(s.fleet, s.index): s for s in slots}),
            nodes=frozen_mapping({n.key: n for n in live}),
            workers=frozen_mapping(workers),
            last_attempts=frozen_mapping({(a.fleet, a.slot): a for a in attempts}),
            last_creates=frozen_mapping({(c.fleet, c.slot): c for c in creates}),
            last_event_id=await self.last_event_id(),
        )

    async def status(self, fleet: str | None = None) -> list[FleetStatus]:
        """Fleets with, per slot, the current (else latest) incarnation, its workers and the
        last workload attempt: what `tpucared status` prints."""
        fleets = [f for f in await self.fleets() if fleet is None or f.name == fleet]
        slots = await self.slots(fleet)
        # The newest incarnation per slot and slice: the live one if any, since a slice's live
        # incarnation is always its newest (a new one can only be requested once the previous
        # is terminal).
        newest_ids = select(func.max(NodeRow.id)).group_by(
            NodeRow.fleet, NodeRow.slot, NodeRow.slice
        )
        node_stmt = select(NodeRow.__table__).where(NodeRow.id.in_(newest_ids))
        pieces: dict[SlotKey, dict[int, IncarnationRecord]] = {}
        for row in await self._rows(node_stmt):
            inc = convert.incarnation(row)
            pieces.setdefault((inc.fleet, inc.slot), {})[inc.slice] = inc
        counts = {f.name: _spec_slices(f) for f in fleets}
        nodes = {k: v.get(0) or next(iter(v.values())) for k, v in pieces.items()}
        ids = [n.id for by_slice in pieces.values() for n in by_slice.values()]
        workers = await self.workers(ids)
        attempts: dict[SlotKey, WorkloadAttemptRecord] = {}
        for row in await self._rows(_newest_per_slot(WorkloadAttemptRow)):
            att = convert.workload_attempt(row)
            attempts[(att.fleet, att.slot)] = att
        creates: dict[SlotKey, CreateAttemptRecord] = {}
        for row in await self._rows(_newest_per_slot(CreateAttemptRow)):
            create = convert.create_attempt(row)
            creates[(create.fleet, create.slot)] = create
        failing = [z for z in await self.zone_health() if z.failing]
        job_failures = await self.job_failures()
        losses = loss_counts.by_slot(
            await self._rows(loss_counts.NODE_LOSSES), await self._rows(loss_counts.CRASHES)
        )
        result = []
        for f in fleets:
            zones = _spec_zones(f) | {n.zone for (name, _), n in nodes.items() if name == f.name}
            count = counts[f.name]
            rows = []
            for s in slots:
                if s.fleet != f.name:
                    continue
                node = nodes.get((s.fleet, s.index))
                rows.append(
                    SlotStatus(
                        slot=s,
                        node=node,
                        workers=workers.get(node.id, ()) if node else (),
                        last_attempt=attempts.get((s.fleet, s.index)),
                        last_create=creates.get((s.fleet, s.index)),
                        job_failure=job_failures.get((s.fleet, s.index)),
                        slices=_slices(pieces.get((s.fleet, s.index), {}), count, workers),
                        losses=losses.get((s.fleet, s.index), {}),
                    )
                )
            mine = tuple(z for z in failing if z.zone in zones)
            result.append(FleetStatus(fleet=f, slots=tuple(rows), failing_zones=mine))
        return result


def _zone_health(row: Mapping[str, Any]) -> ZoneHealth:
    return ZoneHealth(
        project=row["project"],
        zone=row["zone"],
        failures=row["failures"],
        error_kind=row["error_kind"],
        error_message=row["error_message"],
        failing_since=row["failing_since"],
        last_ok_at=row["last_ok_at"],
        unreachable=bool(row["unreachable"]),
        next_list_at=row["next_list_at"],
    )


def _slices(
    pieces: Mapping[int, IncarnationRecord],
    count: int,
    workers: Mapping[int, tuple[WorkerRecord, ...]],
) -> tuple[SliceStatus, ...]:
    """A multislice slot's slices (those of the spec, and any other still live)."""
    shown = [(i, inc) for i, inc in sorted(pieces.items()) if i < count or inc.phase in LIVE_PHASES]
    if count <= 1 and all(i == 0 for i, _ in shown):
        return ()
    return tuple(SliceStatus(i, inc, workers.get(inc.id, ())) for i, inc in shown)


def _spec_slices(fleet: FleetRecord) -> int:
    """Slices per slot in the fleet's applied spec (1 for specs from before multislice)."""
    try:
        count = json.loads(fleet.spec_json).get("slices", 1)
    except (ValueError, AttributeError):
        return 1
    return count if isinstance(count, int) and count >= 1 else 1


def _spec_zones(fleet: FleetRecord) -> set[str]:
    """The zones of the fleet's applied spec (`spec_json`); none if it cannot be read."""
    try:
        zones = json.loads(fleet.spec_json).get("zones", [])
    except (ValueError, AttributeError):
        return set()
    return {z for z in zones if isinstance(z, str)} if isinstance(zones, list) else set()


async def read_lease(conn: AsyncConnection, *, for_share: bool = False) -> Lease:
    """The lease row. `for_share` (PostgreSQL's FOR SHARE; nothing on SQLite, whose write
    transactions already exclude each other): a take or renew by another transaction waits
    until this one ends, so a fenced write cannot commit beside a steal."""
    stmt = select(LeaderLeaseRow.__table__).where(LeaderLeaseRow.id == 1)
    if for_share:
        stmt = stmt.with_for_update(read=True)
    return lease_record((await conn.execute(stmt)).mappings().one())


def lease_record(row: Mapping[Any, Any]) -> Lease:
    """A `leader_lease` row as the core's record."""
    holder = None
    if row["holder_instance"] is not None:
        holder = Holder(row["holder_host"] or "", row["holder_pid"] or 0, row["holder_instance"])
    return Lease(
        epoch=int(row["epoch"]),
        holder=holder,
        acquired_at=row["acquired_at"],
        renewed_at=row["renewed_at"],
        expires_at=row["expires_at"],
    )
