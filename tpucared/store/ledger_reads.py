"""The ledger's read (issue 42): every slot's incarnations, attempts and create attempts since
a time, in one read transaction, for `tpucared goodput` (cli/goodput.py).

Portable SQLAlchemy Core (SQLite and PostgreSQL alike). With `since`, only the rows that
matter from `since` on are read, plus, per slot, the newest attempt and create attempt
before `since` and the node that attempt ran on: what was going on at `since` (a recovery
begun before it) is told by them. The slot's first create (`first_create`) is read whole, as
the ledger's start. Rows come back as `core.model` records and the ledger's `NodeTimes`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from tpucared.core.ledger.categories import NodeTimes
from tpucared.core.model.records import (
    CreateAttemptRecord,
    FleetRecord,
    SlotRecord,
    WorkloadAttemptRecord,
)
from tpucared.store import convert
from tpucared.store.models import CreateAttemptRow, FleetRow, NodeRow, SlotRow, WorkloadAttemptRow
from tpucared.store.snapshot import SlotKey

NODE_TIMES = tuple(f.name for f in fields(NodeTimes))


@dataclass(frozen=True)
class LedgerRecords:
    """What the ledger of the slots read needs, grouped by slot (oldest first)."""

    fleets: Mapping[str, FleetRecord]
    slots: Sequence[SlotRecord]
    nodes: Mapping[SlotKey, list[NodeTimes]] = field(default_factory=dict)
    attempts: Mapping[SlotKey, list[WorkloadAttemptRecord]] = field(default_factory=dict)
    creates: Mapping[SlotKey, list[CreateAttemptRecord]] = field(default_factory=dict)
    first_create: Mapping[SlotKey, datetime] = field(default_factory=dict)


async def read_ledger(
    conn: AsyncConnection,
    fleet: str | None = None,
    slot: int | None = None,
    since: datetime | None = None,
) -> LedgerRecords:
    """The records of one slot, one fleet's or every slot's (in one transaction: `conn`)."""

    def scope(model: Any) -> ColumnElement[bool]:
        clauses: list[ColumnElement[bool]] = []
        if fleet is not None:
            clauses.append(model.fleet == fleet)
        if slot is not None:
            clauses.append(model.slot == slot)
        return and_(true(), *clauses)

    fleet_stmt = select(FleetRow.__table__).order_by(FleetRow.name)
    if fleet is not None:
        fleet_stmt = fleet_stmt.where(FleetRow.name == fleet)
    fleets = {f.name: f for f in (convert.fleet(r) for r in await _rows(conn, fleet_stmt))}
    slot_stmt = (
        select(SlotRow.__table__).where(scope(SlotRow)).order_by(SlotRow.fleet, SlotRow.slot)
    )
    slots = [convert.slot(r) for r in await _rows(conn, slot_stmt)]
    nodes_stmt, attempts_stmt, creates_stmt = _statements(scope, since)
    nodes: dict[SlotKey, list[NodeTimes]] = defaultdict(list)
    for row in await _rows(conn, nodes_stmt.order_by(NodeRow.id)):
        key = (row.pop("fleet"), row.pop("slot"))
        nodes[key].append(NodeTimes(**row))
    attempts: dict[SlotKey, list[WorkloadAttemptRecord]] = defaultdict(list)
    for row in await _rows(conn, attempts_stmt.order_by(WorkloadAttemptRow.id)):
        attempts[(row["fleet"], row["slot"])].append(convert.workload_attempt(row))
    creates: dict[SlotKey, list[CreateAttemptRecord]] = defaultdict(list)
    for row in await _rows(conn, creates_stmt.order_by(CreateAttemptRow.id)):
        creates[(row["fleet"], row["slot"])].append(convert.create_attempt(row))
    first_stmt = (
        select(NodeRow.fleet, NodeRow.slot, func.min(NodeRow.requested_at).label("first"))
        .where(scope(NodeRow))
        .group_by(NodeRow.fleet, NodeRow.slot)
    )
    first = {(r["fleet"], r["slot"]): r["first"] for r in await _rows(conn, first_stmt)}
    return LedgerRecords(fleets, slots, dict(nodes), dict(attempts), dict(creates), first)


def _statements(
    scope: Callable[[Any], ColumnElement[bool]], since: datetime | None
) -> tuple[Select[Any], Select[Any], Select[Any]]:
    """The nodes', attempts' and create attempts' selects: all of them, or what matters
    since `since` (the module's docstring)."""
    # Only the columns the ledger reads (`NodeTimes`): a node row is wide, and its JSON and
    # datetime columns cost a conversion each, for 400,000 rows at 10,000 slots x 30 days.
    columns = [NodeRow.__table__.c[name] for name in ("fleet", "slot", *NODE_TIMES)]
    nodes = select(*columns).where(scope(NodeRow))
    attempts = select(WorkloadAttemptRow.__table__).where(scope(WorkloadAttemptRow))
    creates = select(CreateAttemptRow.__table__).where(scope(CreateAttemptRow))
    if since is None:
        return nodes, attempts, creates
    before = _newest_before(
        WorkloadAttemptRow, WorkloadAttemptRow.ended_at, since, scope(WorkloadAttemptRow)
    )
    attempts = attempts.where(
        or_(
            WorkloadAttemptRow.ended_at.is_(None),
            WorkloadAttemptRow.ended_at >= since,
            WorkloadAttemptRow.id.in_(before),
        )
    )
    creates_before = _newest_before(
        CreateAttemptRow, CreateAttemptRow.started_at, since, scope(CreateAttemptRow)
    )
    creates = creates.where(
        or_(CreateAttemptRow.started_at >= since, CreateAttemptRow.id.in_(creates_before))
    )
    gone = func.coalesce(NodeRow.deleted_at, NodeRow.failed_at)
    ran_on = select(WorkloadAttemptRow.node_id).where(WorkloadAttemptRow.id.in_(before))
    nodes = nodes.where(or_(gone.is_(None), gone >= since, NodeRow.id.in_(ran_on)))
    return nodes, attempts, creates


def _newest_before(
    model: Any, column: Any, since: datetime, scoped: ColumnElement[bool]
) -> Select[Any]:
    """Per slot, the id of the newest row whose `column` is before `since`."""
    return (
        select(func.max(model.id)).where(scoped, column < since).group_by(model.fleet, model.slot)
    )


async def _rows(conn: AsyncConnection, stmt: Any) -> list[dict[str, Any]]:
    result = await conn.execute(stmt)
    keys = tuple(result.keys())
    return [dict(zip(keys, row, strict=True)) for row in result.all()]
