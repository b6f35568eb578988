"""The page's slot table (runtime/page/): the slots matching a filter, in order, a page at a time,
read with SQL filters so that 10,000 slots answer in milliseconds.

Two reads. `slot_keys` returns the ordered keys of every matching slot (fleet, slot, the newest
incarnation's id): one row per slot, filtered and sorted by SQL on the slots table and each
slot's newest incarnation (a correlated `MAX(id)` over `ix_nodes_fleet_slot_id`). The caller
may filter those keys further (the ledger's "lost today", which SQL cannot know) and cuts its
page; `slot_rows` then reads only that page's slots, incarnations and newest attempts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, func, literal, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from tpucared.core.model.records import IncarnationRecord, SlotRecord, WorkloadAttemptRecord
from tpucared.store import convert
from tpucared.store.models import NodeRow, SlotRow, WorkloadAttemptRow

SlotKey = tuple[str, int]

# What a slot without any incarnation shows as its state (and filters by).
NO_NODE = "none"
# The columns the table sorts by; the slot key always breaks ties.
SORTS = ("slot", "state", "zone", "node", "uptime")


@dataclass(frozen=True)
class SlotFilter:
    fleet: str | None = None
    state: str | None = None  # a NodePhase value, or NO_NODE
    zone: str | None = None
    sort: str = "slot"
    descending: bool = False


@dataclass(frozen=True)
class PageRow:
    slot: SlotRecord
    node: IncarnationRecord | None
    attempt: WorkloadAttemptRecord | None


def _newest_node_id() -> Any:
    inner = NodeRow.__table__.alias("newest")
    return (
        select(func.max(inner.c.id))
        .where(inner.c.fleet == SlotRow.fleet, inner.c.slot == SlotRow.slot)
        .scalar_subquery()
    )


async def slot_keys(conn: AsyncConnection, f: SlotFilter) -> list[tuple[str, int, int | None]]:
    """(fleet, slot, newest incarnation id) of every slot matching `f`, in `f`'s order."""
    node = NodeRow.__table__.alias("node")
    stmt = select(SlotRow.fleet, SlotRow.slot, node.c.id).select_from(
        SlotRow.__table__.outerjoin(node, node.c.id == _newest_node_id())
    )
    where: list[ColumnElement[bool]] = []
    if f.fleet is not None:
        where.append(SlotRow.fleet == f.fleet)
    if f.zone is not None:
        where.append(node.c.zone == f.zone)
    if f.state == NO_NODE:
        where.append(node.c.id.is_(None))
    elif f.state is not None:
        where.append(node.c.phase == f.state)
    if where:
        stmt = stmt.where(and_(*where))
    column: Any = {
        "slot": literal(0),
        "state": node.c.phase,
        "zone": node.c.zone,
        "node": node.c.node_name,
        "uptime": node.c.ready_at,
    }.get(f.sort, literal(0))
    # Uptime descending is the oldest ready_at first.
    down = f.descending != (f.sort == "uptime")
    # Slots without a node (NULLs) last either way, on SQLite as on PostgreSQL.
    order: list[Any] = [(column.desc() if down else column.asc()).nulls_last()]
    if f.descending:
        order += [SlotRow.fleet.desc(), SlotRow.slot.desc()]
    else:
        order += [SlotRow.fleet.asc(), SlotRow.slot.asc()]
    result = await conn.execute(stmt.order_by(*order))
    return [(row[0], row[1], row[2]) for row in result.all()]


async def slot_rows(
    conn: AsyncConnection, keys: Sequence[tuple[str, int, int | None]]
) -> list[PageRow]:
    """The slots, newest incarnations and newest workload attempts of `keys` (one page)."""
    if not keys:
        return []
    pairs = [(k[0], k[1]) for k in keys]
    slots = {
        (r["fleet"], r["slot"]): convert.slot(r)
        for r in await _rows(
            conn, select(SlotRow.__table__).where(tuple_(SlotRow.fleet, SlotRow.slot).in_(pairs))
        )
    }
    ids = [k[2] for k in keys if k[2] is not None]
    nodes: dict[int, IncarnationRecord] = {}
    if ids:
        for r in await _rows(conn, select(NodeRow.__table__).where(NodeRow.id.in_(ids))):
            nodes[r["id"]] = convert.incarnation(r)
    by_fleet: dict[str, list[int]] = defaultdict(list)
    for fleet, slot in pairs:
        by_fleet[fleet].append(slot)
    attempts: dict[SlotKey, WorkloadAttemptRecord] = {}
    for fleet, indexes in by_fleet.items():
        newest = (
            select(func.max(WorkloadAttemptRow.id))
            .where(WorkloadAttemptRow.fleet == fleet, WorkloadAttemptRow.slot.in_(indexes))
            .group_by(WorkloadAttemptRow.slot)
        )
        stmt = select(WorkloadAttemptRow.__table__).where(WorkloadAttemptRow.id.in_(newest))
        for r in await _rows(conn, stmt):
            attempts[(r["fleet"], r["slot"])] = convert.workload_attempt(r)
    out = []
    for fleet, slot, node_id in keys:
        record = slots.get((fleet, slot))
        if record is None:  # removed between the two reads of one request: skip it
            continue
        node = nodes.get(node_id) if node_id is not None else None
        out.append(PageRow(record, node, attempts.get((fleet, slot))))
    return out


async def _rows(conn: AsyncConnection, stmt: Any) -> list[Mapping[str, Any]]:
    result = await conn.execute(stmt)
    keys = tuple(result.keys())
    return [dict(zip(keys, row, strict=True)) for row in result.all()]
