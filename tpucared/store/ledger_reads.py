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
the same "what matters since" read, each slot from its own mark); with `since` before that
midnight, the rows of [since, midnight) too (`head`, tiled up to `head_until`).
`inspect/ledger.py` tiles the head and the tail and adds the kept sums.

How the rows are found (issue 42: `--since 7d` at 10,000 slots x 30 days took 17 s): each
read from a time is driven by the slots (`ledger_kept` for the marked ones, `slots` for the
others), each slot's rows a range of an index on its time column (migration 0017), and the
newest row before it one correlated lookup per slot; never a scan of every row compared
with its slot's time. Each part is its own select of disjoint rows, merged here by id.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    exists,
    func,
    literal_column,
    or_,
    select,
    true,
)
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
) -> LedgerRecords:
    """The records of one slot, one fleet's or every slot's (in one transaction: `conn`);
    `slots`: only these of `fleet`. `kept`: use the kept days where whole ones fall after
    `since` (the module's docstring) and, with `sums`, read their sums; False: every row
    (the tests' full recompute)."""
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
    from_day = None if since is None else ceil_midnight(since)
    head_rows = None
    if kept:
        kept_until, kept_sums = await _kept(conn, scope, sums, from_day)
        if kept_until and since is not None and from_day is not None and since < from_day:
            head_rows = await _records(conn, scope, since, from_day, False, until=from_day)
    nodes, attempts, creates = await _records(conn, scope, since, from_day, bool(kept_until))
    # Each slot's first create: one seek of an index a slot (migration 0017), not a scan of
    # every node grouped.
    n = NodeRow.__table__
    earliest = (
        select(func.min(n.c.requested_at))
        .where(n.c.fleet == SlotRow.fleet, n.c.slot == SlotRow.slot)
        .scalar_subquery()
    )
    first_stmt = select(SlotRow.fleet, SlotRow.slot, earliest.label("first")).where(scope(SlotRow))
    first = {
        (r["fleet"], r["slot"]): r["first"]
        for r in await _rows(conn, first_stmt)
        if r["first"] is not None
    }
    # The head shares the fleets, slots and first creates (the tiling's start) read here.
    head = None if head_rows is None else LedgerRecords(fleets, slot_records, *head_rows, first)
    return LedgerRecords(
        fleets, slot_records, nodes, attempts, creates, first, kept_until, kept_sums, head,
        from_day if head is not None else None,
    )  # fmt: skip


_Grouped = tuple[
    dict[SlotKey, list[NodeTimes]],
    dict[SlotKey, list[WorkloadAttemptRecord]],
    dict[SlotKey, list[CreateAttemptRecord]],
]


async def _records(
    conn: AsyncConnection,
    scope: Callable[[Any], ColumnElement[bool]],
    since: datetime | None,
    from_day: datetime | None,
    marks: bool,
    *,
    until: datetime | None = None,
) -> _Grouped:
    """The nodes, attempts and create attempts of the slots in `scope` (per slot, oldest
    first): every row, or what matters from `since` on (from their marks for the slots
    marked after `from_day`: `marks`), begun before `until`."""
    if since is None and not marks:  # every row
        statements = [_statements(scope, until)]
    else:
        statements = [_from(d, until) for d in _drivers(scope, since, from_day, marks)]
    got: list[list[dict[str, Any]]] = [[], [], []]
    for stmts in statements:
        for rows, selects in zip(got, stmts, strict=True):
            for stmt in selects:
                rows.extend(await _rows(conn, stmt))
    node_rows, attempt_rows, create_rows = (sorted(rows, key=_id) for rows in got)
    nodes: dict[SlotKey, list[NodeTimes]] = defaultdict(list)
    for row in node_rows:
        key = (row.pop("fleet"), row.pop("slot"))
        nodes[key].append(NodeTimes(**row))
    attempts: dict[SlotKey, list[WorkloadAttemptRecord]] = defaultdict(list)
    for row in attempt_rows:
        attempts[(row["fleet"], row["slot"])].append(convert.workload_attempt(row))
    creates: dict[SlotKey, list[CreateAttemptRecord]] = defaultdict(list)
    for row in create_rows:
        creates[(row["fleet"], row["slot"])].append(convert.create_attempt(row))
    return dict(nodes), dict(attempts), dict(creates)


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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ceil_midnight(at: datetime) -> datetime:
    """`at` if a UTC midnight, else the next one."""
    day = midnight(at)
    return day if day == at else day + timedelta(days=1)


@dataclass(frozen=True)
class _Slots:
    """Slots read from a time on: a table of them (fleet, slot) and the time (a column of
    that table, or a constant)."""

    table: Any
    since: Any


def _drivers(
    scope: Callable[[Any], ColumnElement[bool]],
    since: datetime | None,
    from_day: datetime | None,
    marks: bool,
) -> list[_Slots]:
    """The slots with whole kept days after `since` (`marks`; from `from_day`), read from
    their mark, and the others, read from `since` (the epoch without one). Each a
    materialized CTE: computed first, then the outer loop of the reads (`_on`); inlined,
    SQLite carries a `fleet = 'f1'` over into the join and scans the fleet's rows once per
    slot (one fleet's `goodput` took 7 s)."""
    k, s = LedgerKeptRow.__table__, SlotRow.__table__
    after = [] if from_day is None else [k.c.kept_until > _at(from_day)]
    constant = _at(_EPOCH if since is None else since)
    if not marks:
        return [_Slots(_cte(select(s.c.fleet, s.c.slot).where(scope(SlotRow)), "d"), constant)]
    unmarked = ~exists().where(k.c.fleet == s.c.fleet, k.c.slot == s.c.slot, *after)
    marked = select(k.c.fleet, k.c.slot, k.c.kept_until).where(scope(LedgerKeptRow), *after)
    others = select(s.c.fleet, s.c.slot).where(scope(SlotRow), unmarked)
    table = _cte(marked, "marked")
    return [_Slots(table, table.c.kept_until), _Slots(_cte(others, "unmarked"), constant)]


def _cte(stmt: Select[Any], name: str) -> Any:
    return stmt.cte(name).prefix_with("MATERIALIZED")


def _at(at: datetime) -> Any:
    return bindparam(None, at, type_=UTCDateTime)


def _on(d: _Slots, table: Any) -> ColumnElement[bool]:
    """`table`'s rows of the slots in `d`. Each side of `d` inside an expression: SQLite has
    no statistics here (no ANALYZE) and otherwise scans the big table, looking up each row's
    slot in `d`; this way `d` is the outer loop and each slot's rows a range of an index
    (migration 0017)."""
    return and_(
        table.c.fleet == d.table.c.fleet.concat(literal_column("''")),
        table.c.slot == d.table.c.slot + literal_column("0"),
    )


# The second copies of tables a read joins to themselves, made once: a new alias of a wide
# table builds its column collection again (the metrics refresh reads slots one by one at
# every tick: that alone was ~15 ms a tick at 10,000 slots).
_ALIASES = {
    WorkloadAttemptRow.__table__: WorkloadAttemptRow.__table__.alias("attempts_before"),
    CreateAttemptRow.__table__: CreateAttemptRow.__table__.alias("creates_before"),
}
_RAN = WorkloadAttemptRow.__table__.alias("ran")


def _newest_before(d: _Slots, table: Any, column: str) -> Any:
    """Per slot of `d`, the id of its newest row of `table` whose `column` is before its
    time (correlated: one index range a slot)."""
    t = _ALIASES[table]
    return (
        select(func.max(t.c.id))
        .where(t.c.fleet == d.table.c.fleet, t.c.slot == d.table.c.slot, t.c[column] < d.since)
        .scalar_subquery()
    )


def _node_columns() -> list[Any]:
    # Only the columns the ledger reads (`NodeTimes`): a node row is wide, and its JSON and
    # datetime columns cost a conversion each, for 400,000 rows at 10,000 slots x 30 days.
    return [NodeRow.__table__.c[name] for name in ("fleet", "slot", *NODE_TIMES)]


def _statements(
    scope: Callable[[Any], ColumnElement[bool]], until: datetime | None
) -> list[list[Select[Any]]]:
    """Every row of the slots in `scope` (nodes, attempts, creates), begun before `until`."""
    nodes = select(*_node_columns()).where(scope(NodeRow))
    attempts = select(WorkloadAttemptRow.__table__).where(scope(WorkloadAttemptRow))
    creates = select(CreateAttemptRow.__table__).where(scope(CreateAttemptRow))
    if until is not None:
        nodes = nodes.where(NodeRow.requested_at < until)
        attempts = attempts.where(WorkloadAttemptRow.started_at < until)
        creates = creates.where(CreateAttemptRow.started_at < until)
    return [[nodes], [attempts], [creates]]


def _from(d: _Slots, until: datetime | None) -> list[list[Select[Any]]]:
    """What matters of the slots in `d` from their time on (the module's docstring), begun
    before `until`: [nodes, attempts, creates], each as selects of disjoint rows."""
    n, a, c = NodeRow.__table__, WorkloadAttemptRow.__table__, CreateAttemptRow.__table__
    ran = _RAN  # the newest attempt ended before, for the node it ran on

    def rows(table: Any, *where: Any, via: Any = None) -> Select[Any]:
        columns = _node_columns() if table is n else [table]
        joined = d.table.join(via, _on(d, via)).join(n, n.c.id == via.c.node_id) if (
            via is not None) else d.table.join(table, _on(d, table))  # fmt: skip
        begun = {n: n.c.requested_at, a: a.c.started_at, c: c.c.started_at}[table]
        late = [] if until is None else [begun < _at(until)]
        return select(*columns).select_from(joined).where(*where, *late)

    gone = func.coalesce(n.c.deleted_at, n.c.failed_at)
    return [
        [
            rows(n, or_(gone.is_(None), gone >= d.since)),
            rows(n, gone < d.since, ran.c.id == _newest_before(d, a, "ended_at"), via=ran),
        ],
        [
            rows(a, or_(a.c.ended_at.is_(None), a.c.ended_at >= d.since)),
            rows(a, a.c.id == _newest_before(d, a, "ended_at")),
        ],
        [
            rows(c, c.c.started_at >= d.since),
            rows(c, c.c.id == _newest_before(d, c, "started_at")),
        ],
    ]


def _id(row: Mapping[str, Any]) -> int:
    return int(row["id"])


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
        # The days from `from_day` of the slots marked after it, each slot's a range of the
        # primary key (`_on`), not the whole table's days compared with `from_day`.
        d, k = LedgerDayRow, _drivers(scope, None, from_day, True)[0]
        stmt = (
            select(d.fleet, d.slot, d.category, d.phase, d.cause,
                   func.sum(d.microseconds).label("us"), func.sum(d.steps).label("steps"))
            .select_from(k.table.join(d, _on(k, d.__table__)))
            .where(d.day >= from_day.date())
            .group_by(d.fleet, d.slot, d.category, d.phase, d.cause)
        )  # fmt: skip
    out: dict[SlotKey, dict[KeptKey, tuple[int, int]]] = defaultdict(dict)
    keys: dict[tuple[str, str, str], KeptKey] = {}  # a few distinct keys, 80,000 rows
    for r in await _rows(conn, stmt):
        names = (r["category"], r["phase"], r["cause"])
        key = keys.get(names)
        if key is None:
            key = keys[names] = (Category(names[0]), Phase(names[1]) if names[1] else None,
                                 LossCause(names[2]) if names[2] else None)  # fmt: skip
        out[(r["fleet"], r["slot"])][key] = (int(r["us"]), int(r["steps"] or 0))
    return until, dict(out)


async def _rows(conn: AsyncConnection, stmt: Any) -> list[dict[str, Any]]:
    result = await conn.execute(stmt)
    keys = tuple(result.keys())
    return [dict(zip(keys, row, strict=True)) for row in result.all()]
