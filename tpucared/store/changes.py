"""Incremental snapshots: the last snapshot brought up to date with the rows that changed.

Where it sits: `Reader.snapshot()` (reads.py), for the `Store`'s reads, which keep their last
snapshot in the `RecordCache` (cache.py) with the change counter and deletion count it was
read at. When the counter moved but no row was deleted since, only the rows stamped after
that counter are read (`version > since`, migration 0010) and laid over the kept snapshot:

- fleets: read whole (a handful of rows);
- slots: each changed row replaces its slot's record;
- nodes: each changed incarnation leaves the snapshot, and comes back if it is still live; its
  workers are read again (a worker's change touches its incarnation's version);
- the newest workload and create attempt of each slot: read again for the slots with an
  attempt that changed (the whole read's aggregate, over those slots only).

Why: in a preemption storm at 10,000 nodes something changes between any two reads, and the
whole read (every slot, live incarnation and worker, and two newest-per-slot aggregates) took
0.5-1 s of a storm tick on a 2-core machine: the driver's thread builds every row while the
event loop's thread is busy. A storm tick changes a few hundred rows.

The database may also go back: a server that lost its last commits (PostgreSQL with
`synchronous_commit = off`, stopped at once), a standby promoted behind its primary, a restored
backup. Rows it lost would keep their old versions and never be read again, so the kept
snapshot is forgotten whenever the Store finds the database gone (`StoreUnavailable`), and a
counter lower than the kept one's makes the read a whole one.

The result equals a whole read's, mapping for mapping (tests/store/test_store_changes.py
compares them after random writes, on SQLite and PostgreSQL), and keeps its orders: nodes
newest first, slots by fleet and index, workers by incarnation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeVar

from sqlalchemy import Select, func, select, tuple_
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from tpucared.core.model.lifecycle import LIVE_PHASES
from tpucared.core.model.records import FleetRecord, IncarnationRecord, WorkerRecord
from tpucared.store import convert
from tpucared.store.models import (
    ChangeCounterRow,
    CreateAttemptRow,
    NodeRow,
    SlotRow,
    WorkerRow,
    WorkloadAttemptRow,
)
from tpucared.store.snapshot import NodeKey, SlotKey, Snapshot, frozen_mapping

Rows = Callable[[Select[Any]], Awaitable[Sequence[Mapping[str, Any]]]]
T = TypeVar("T")

# More changed incarnations than this share of the kept ones: read everything instead (the
# record cache makes a whole read cheap for the rows that did not change).
WHOLE_READ_SHARE = 0.5


@dataclass(frozen=True)
class Counts:
    """The change counter's row: `deletions` is None on a database before migration 0010."""

    counter: int
    deletions: int | None


async def read_counts(conn: AsyncConnection) -> Counts | None:
    """The change counter and deletion count, or None on a database without a counter. An
    older SQLite file (a read-only `status`) may lack either; PostgreSQL databases are always
    migrated by the daemon that uses them."""
    try:
        both = select(ChangeCounterRow.counter, ChangeCounterRow.deletions)
        row = (await conn.execute(both.where(ChangeCounterRow.id == 1))).first()
        return None if row is None else Counts(int(row[0]), int(row[1]))
    except OperationalError:
        pass  # SQLite: no `deletions` column (or no counter at all), an older database
    try:
        one = select(ChangeCounterRow.counter).where(ChangeCounterRow.id == 1)
        value = (await conn.execute(one)).scalar()
    except OperationalError:
        return None
    return None if value is None else Counts(int(value), None)


async def changed_snapshot(
    base: Snapshot,
    since: int,
    rows: Rows,
    fleets: Mapping[str, FleetRecord],
    last_event_id: int,
) -> Snapshot | None:
    """`base` (read at counter `since`) with every row stamped after it, or None when so much
    changed that a whole read is the better way. `fleets` and `last_event_id` are read whole
    by the caller; `rows(stmt)` runs a statement in the reader's transaction."""
    changed = await _changed_nodes(base, since, rows)
    if changed is None:
        return None
    nodes, workers = changed
    slots = dict(base.slots)
    for row in await rows(select(SlotRow.__table__).where(SlotRow.version > since)):
        slot = convert.slot(row)
        slots[(slot.fleet, slot.index)] = slot
    if len(slots) != len(base.slots):  # new slots: in their place (a replaced one keeps it)
        slots = dict(sorted(slots.items()))

    attempts = _newest(
        base.last_attempts,
        await rows(_newest_of_changed(WorkloadAttemptRow, since)),
        convert.workload_attempt,
    )
    creates = _newest(
        base.last_creates,
        await rows(_newest_of_changed(CreateAttemptRow, since)),
        convert.create_attempt,
    )
    return Snapshot(
        fleets=fleets,
        slots=frozen_mapping(slots),
        nodes=frozen_mapping(
            {n.key: n for n in sorted(nodes.values(), key=attrgetter("id"), reverse=True)}
        ),
        workers=frozen_mapping(dict(sorted(workers.items()))),
        last_attempts=attempts,
        last_creates=creates,
        last_event_id=last_event_id,
    )


async def _changed_nodes(
    base: Snapshot, since: int, rows: Rows
) -> tuple[dict[NodeKey, IncarnationRecord], dict[int, tuple[WorkerRecord, ...]]] | None:
    """The live incarnations and their workers, with every incarnation stamped after `since`
    taken out and put back if still live, its workers read again; None: too many changed."""
    node_rows = await rows(select(NodeRow.__table__).where(NodeRow.version > since))
    if len(node_rows) > max(64, WHOLE_READ_SHARE * len(base.nodes)):
        return None
    nodes: dict[NodeKey, IncarnationRecord] = dict(base.nodes)
    key_of = {n.id: k for k, n in base.nodes.items()}
    workers: dict[int, tuple[WorkerRecord, ...]] = dict(base.workers)
    touched: list[int] = []
    for row in node_rows:
        inc = convert.incarnation(row)
        old = key_of.get(inc.id)
        if old is not None and nodes.get(old) is not None and nodes[old].id == inc.id:
            del nodes[old]
        workers.pop(inc.id, None)
        if inc.phase in LIVE_PHASES:
            nodes[inc.key] = inc
            touched.append(inc.id)
    if touched:
        stmt = (
            select(WorkerRow.__table__)
            .join(NodeRow, NodeRow.id == WorkerRow.node_id)
            .where(NodeRow.version > since, NodeRow.phase.in_(list(LIVE_PHASES)))
            .order_by(WorkerRow.node_id, WorkerRow.worker)
        )
        fresh: dict[int, list[WorkerRecord]] = {}
        for row in await rows(stmt):
            fresh.setdefault(row["node_id"], []).append(convert.worker(row))
        workers.update((node_id, tuple(ws)) for node_id, ws in fresh.items())
    return nodes, workers


def _newest_of_changed(
    model: type[WorkloadAttemptRow] | type[CreateAttemptRow], since: int
) -> Select[Any]:
    """The newest attempt of each slot that has an attempt stamped after `since`: the same
    aggregate as the whole read's, over those slots only (their index serves it)."""
    changed = select(model.fleet, model.slot).where(model.version > since)
    newest = (
        select(func.max(model.id))
        .where(tuple_(model.fleet, model.slot).in_(changed))
        .group_by(model.fleet, model.slot)
    )
    return select(model.__table__).where(model.id.in_(newest)).order_by(model.id)


def _newest(
    base: Mapping[SlotKey, T],
    newest_of_changed: Sequence[Mapping[str, Any]],
    build: Callable[[Mapping[str, Any]], T],
) -> Mapping[SlotKey, T]:
    """Each slot's newest attempt: the kept ones, but for the slots whose attempts changed."""
    if not newest_of_changed:
        return base
    newest = dict(base)
    for row in newest_of_changed:
        newest[(row["fleet"], row["slot"])] = build(row)
    return frozen_mapping(newest)
