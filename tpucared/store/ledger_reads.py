"""The ledger's read (issue 42): every slot's incarnations, attempts and create attempts since
a time, in one read transaction, for `tpucared goodput` (cli/goodput.py).

Portable SQLAlchemy Core (SQLite and PostgreSQL alike). With `since`, only the rows that
matter from `since` on are read, plus, per slot, the newest attempt and create attempt
before `since` and the node that attempt ran on: what was going on at `since` (a recovery
begun before it) is told by them. The slot's first create (`first_create`) is read whole, as
the ledger's start. Rows come back as `core.model` records and the ledger's `NodeTimes`.

Where whole closed days kept by the maintenance task (`ledger_days`, core/ledger/kept.py)
follow `since` (none: the whole history), a slot's kept days from `since`'s next midnight on
are read summed (`kept`), and its records only from where they end (`kept_until`, per slot:
the same "what matters since" read, each slot from its own time, a SQL expression of its
mark); with `since` before that midnight, the rows of [since, midnight) too (`head`, read
with `until`). `inspect/ledger.py` tiles the head and the tail and adds the kept sums.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, bindparam, func, or_, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from tpucared.core.ledger.categories import Category, NodeTimes, Phase
from tpucared.core.ledger.kept import KeptKey, KeptSums, midnight
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import (
    CreateAttemptRecord,
    FleetRecord,
    SlotRecord,
    WorkloadAttemptRecord,
)
from tpucared.store import convert
from tpucared.store.models import (
    CreateAttemptRow,
    FleetRow,
    LedgerDayRow,
    LedgerKeptRow,
    LedgerTotalRow,
    NodeRow,
    SlotRow,
    WorkloadAttemptRow,
)
from tpucared.store.snapshot import SlotKey
from tpucared.store.types import UTCDateTime

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
    # The kept days (whole-history reads only): up to when, per slot, and their sums.
    kept_until: Mapping[SlotKey, datetime] = field(default_factory=dict)
    kept: Mapping[SlotKey, KeptSums] = field(default_factory=dict)
    # With `since` and kept days after it: the rows of [since, the next midnight), tiled
    # up to `head_until` (that midnight) for the slots in `kept_until`.
    head: LedgerRecords | None = None
    head_until: datetime | None = None


async def read_ledger(
    conn: AsyncConnection,
    fleet: str | None = None,
    slot: int | None = None,
    since: datetime | None = None,
    *,
    kept: bool = True,
    slots: Sequence[int] | None = None,
    sums: bool = True,
    until: datetime | None = None,
) -> LedgerRecords:
    """The records of one slot, one fleet's or every slot's (in one transaction: `conn`);
    `slots`: only these of `fleet`. `kept`: use the kept days where whole ones fall after
    `since` (the module's docstring) and, with `sums`, read their sums; False: every row
    (the tests' full recompute). `until`: only rows begun before it (the head window)."""
    scope = _scope(fleet, slot, slots)
    fleet_stmt = select(FleetRow.__table__).order_by(FleetRow.name)
    if fleet is not None:
        fleet_stmt = fleet_stmt.where(FleetRow.name == fleet)
    fleets = {f.name: f for f in (convert.fleet(r) for r in await _rows(conn, fleet_stmt))}
    slot_stmt = (
        select(SlotRow.__table__).where(scope(SlotRow)).order_by(SlotRow.fleet, SlotRow.slot)
    )
    slot_records = [convert.slot(r) for r in await _rows(conn, slot_stmt)]
    kept_until: dict[SlotKey, datetime] = {}
    kept_sums: dict[SlotKey, KeptSums] = {}
    since_of: _Since | None = None if since is None else _constant(since)
    head = None
    from_day = None if since is None else ceil_midnight(since)
    if kept:
        kept_until, kept_sums = await _kept(conn, scope, sums, from_day)
        if kept_until:
            since_of = _kept_since(since, from_day)
            if since is not None and from_day is not None and since < from_day:
                head = await read_ledger(
                    conn, fleet, slot, since, kept=False, slots=slots, until=from_day
                )
    nodes_stmt, attempts_stmt, creates_stmt = _statements(scope, since_of, until)
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
    return LedgerRecords(
        fleets, slot_records, dict(nodes), dict(attempts), dict(creates), first, kept_until,
        kept_sums, head, from_day if head is not None else None,
    )  # fmt: skip


def _scope(
    fleet: str | None, slot: int | None, slots: Sequence[int] | None
) -> Callable[[Any], ColumnElement[bool]]:
    """The rows of the slots asked for, as a WHERE clause of a table with fleet and slot."""

    def scope(model: Any) -> ColumnElement[bool]:
        clauses: list[ColumnElement[bool]] = []
        if fleet is not None:
            clauses.append(model.fleet == fleet)
        if slot is not None:
            clauses.append(model.slot == slot)
        if slots is not None:
            clauses.append(model.slot.in_(list(slots)))
        return and_(true(), *clauses)

    return scope


# The time a row's slot is read from: a datetime, or a SQL expression of the row's table.
_Since = Callable[[Any], Any]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ceil_midnight(at: datetime) -> datetime:
    """`at` if a UTC midnight, else the next one."""
    day = midnight(at)
    return day if day == at else day + timedelta(days=1)


def _constant(since: datetime) -> _Since:
    return lambda _: since


def _kept_since(since: datetime | None, from_day: datetime | None) -> _Since:
    """Per row, its slot's `kept_until` where whole kept days follow `since` (from
    `from_day`), else `since` (the epoch without one)."""

    def since_of(model: Any) -> ColumnElement[datetime]:
        # One lookup of the slot's mark per row (its primary key), the condition inside.
        mark = LedgerKeptRow
        where = [mark.fleet == model.fleet, mark.slot == model.slot]
        if from_day is not None:
            where.append(mark.kept_until > bindparam(None, from_day, type_=UTCDateTime))
        until = select(mark.kept_until).where(*where).scalar_subquery()
        otherwise = _EPOCH if since is None else since
        return func.coalesce(until, bindparam(None, otherwise, type_=UTCDateTime))

    return since_of


async def _kept(
    conn: AsyncConnection,
    scope: Callable[[Any], ColumnElement[bool]],
    sums: bool,
    from_day: datetime | None,
) -> tuple[dict[SlotKey, datetime], dict[SlotKey, KeptSums]]:
    """Per slot with whole kept days from `from_day` (None: any), up to when they are kept,
    and (`sums`) their sums from `from_day` per (category, phase, cause)."""
    marks = select(LedgerKeptRow.__table__).where(scope(LedgerKeptRow))
    if from_day is not None:
        marks = marks.where(LedgerKeptRow.kept_until > from_day)
    until = {(r["fleet"], r["slot"]): r["kept_until"] for r in await _rows(conn, marks)}
    if not until or not sums:
        return until, {}
    stmt: Any
    if from_day is None:  # every kept day: their totals, kept beside them
        t = LedgerTotalRow
        stmt = select(t.fleet, t.slot, t.category, t.phase, t.cause,
                      t.microseconds.label("us"), t.steps).where(scope(t))  # fmt: skip
    else:
        d = LedgerDayRow
        stmt = (
            select(d.fleet, d.slot, d.category, d.phase, d.cause,
                   func.sum(d.microseconds).label("us"), func.sum(d.steps).label("steps"))
            .where(scope(d), d.day >= from_day.date())
            .group_by(d.fleet, d.slot, d.category, d.phase, d.cause)
        )  # fmt: skip
    out: dict[SlotKey, dict[KeptKey, tuple[int, int]]] = defaultdict(dict)
    for r in await _rows(conn, stmt):
        key = (Category(r["category"]), Phase(r["phase"]) if r["phase"] else None,
               LossCause(r["cause"]) if r["cause"] else None)  # fmt: skip
        out[(r["fleet"], r["slot"])][key] = (int(r["us"]), int(r["steps"] or 0))
    return until, dict(out)


def _statements(
    scope: Callable[[Any], ColumnElement[bool]], since_of: _Since | None, until: datetime | None
) -> tuple[Select[Any], Select[Any], Select[Any]]:
    """The nodes', attempts' and create attempts' selects: all of them, or what matters
    since `since_of(table)` (the module's docstring), begun before `until`."""
    # Only the columns the ledger reads (`NodeTimes`): a node row is wide, and its JSON and
    # datetime columns cost a conversion each, for 400,000 rows at 10,000 slots x 30 days.
    columns = [NodeRow.__table__.c[name] for name in ("fleet", "slot", *NODE_TIMES)]
    nodes = select(*columns).where(scope(NodeRow))
    attempts = select(WorkloadAttemptRow.__table__).where(scope(WorkloadAttemptRow))
    creates = select(CreateAttemptRow.__table__).where(scope(CreateAttemptRow))
    if until is not None:
        nodes = nodes.where(NodeRow.requested_at < until)
        attempts = attempts.where(WorkloadAttemptRow.started_at < until)
        creates = creates.where(CreateAttemptRow.started_at < until)
    if since_of is None:
        return nodes, attempts, creates
    before = _newest_before(
        WorkloadAttemptRow, WorkloadAttemptRow.ended_at, since_of, scope(WorkloadAttemptRow)
    )
    since = since_of(WorkloadAttemptRow)
    attempts = attempts.where(
        or_(
            WorkloadAttemptRow.ended_at.is_(None),
            WorkloadAttemptRow.ended_at >= since,
            WorkloadAttemptRow.id.in_(before),
        )
    )
    creates_before = _newest_before(
        CreateAttemptRow, CreateAttemptRow.started_at, since_of, scope(CreateAttemptRow)
    )
    creates = creates.where(
        or_(
            CreateAttemptRow.started_at >= since_of(CreateAttemptRow),
            CreateAttemptRow.id.in_(creates_before),
        )
    )
    gone = func.coalesce(NodeRow.deleted_at, NodeRow.failed_at)
    ran_on = select(WorkloadAttemptRow.node_id).where(WorkloadAttemptRow.id.in_(before))
    nodes = nodes.where(or_(gone.is_(None), gone >= since_of(NodeRow), NodeRow.id.in_(ran_on)))
    return nodes, attempts, creates


def _newest_before(
    model: Any, column: Any, since_of: _Since, scoped: ColumnElement[bool]
) -> Select[Any]:
    """Per slot, the id of the newest row whose `column` is before `since_of(model)`."""
    return (
        select(func.max(model.id))
        .where(scoped, column < since_of(model))
        .group_by(model.fleet, model.slot)
    )


async def _rows(conn: AsyncConnection, stmt: Any) -> list[dict[str, Any]]:
    result = await conn.execute(stmt)
    keys = tuple(result.keys())
    return [dict(zip(keys, row, strict=True)) for row in result.all()]
