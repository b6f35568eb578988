"""`RecordCache`: reuse the record of a row that has not changed since the last read.

Where it sits: the `Store` owns one and hands it to every `Reader` of `Store.read()`; the
snapshot's big reads (every slot, every live incarnation and its workers, the newest attempts
per slot) go through `RecordCache.records`. The daemon reads them twice a tick (the tick's
snapshot and the metrics refresh), and at 10,000 nodes turning rows into records cost most of
a second a read: SQLAlchemy runs a type processor per column (a dozen datetimes per
incarnation, parsed and made UTC-aware), then a frozen dataclass is built per row.

How: the statement runs as plain SQL on the same connection (`exec_driver_sql`), so rows come
back as the driver returns them, unprocessed. A row whose raw values equal those seen by the
previous read of the same query (keyed by its primary key) gets the record built then;
only new or changed rows are processed, with the very processors SQLAlchemy would have used.
Records are immutable, so sharing one between snapshots is safe, and raw equality implies an
equal record. What a query no longer returns is dropped at each read: the cache never holds
more than the last result of each query. Statements with bound parameters are not cached
(the snapshot's have none); they are run the normal way.

Above that, the whole snapshot: triggers bump `change_counter` (migration 0002) with every
write to the tables it is read from, whichever process writes, so a snapshot read at the same
counter value is the same snapshot, and is returned without reading anything else. Most ticks
of a fleet at steady state change nothing. When the counter moved, only the rows stamped since
are read and laid over the kept snapshot (store/changes.py), unless a row was deleted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncConnection

R = TypeVar("R")

# However little changes, a snapshot is read whole at least this often (seconds): a safety net
# under the rows-changed-since reads (store/changes.py) for a database that went back without
# the Store noticing (a quick restart that lost its last commits, hidden by the pool's
# pre-ping). It costs one whole read, which the row records above make cheap when little
# changed.
WHOLE_READ_EVERY_S = 300.0

Processor = Callable[[Any], Any] | None


@dataclass
class _Query:
    sql: str
    keys: tuple[str, ...]
    types: tuple[Any, ...]  # each column's type as the dialect implements it
    # Built at the first run, from the driver's column type codes (PostgreSQL's processors
    # depend on them, e.g. for FLOAT; SQLite's driver gives none).
    processors: tuple[Processor, ...] | None
    key_index: tuple[int, ...]  # the primary key's positions in a row
    entries: dict[Any, tuple[tuple[Any, ...], Any]]  # key -> (raw row, its record)


@dataclass(frozen=True)
class Kept:
    """The last snapshot kept, with the change counter and deletion count it was read at."""

    counter: int
    deletions: int | None  # None: a database before migration 0010
    snapshot: Any

    def base_at(self, counter: int, deletions: int | None) -> Any | None:
        """The snapshot, if the rows changed since it can be laid over it: nothing deleted
        since, and the counter ahead (one gone back means writes were lost)."""
        if deletions is None or deletions != self.deletions or counter <= self.counter:
            return None
        return self.snapshot


class RecordCache:
    def __init__(self) -> None:
        self._queries: dict[str, _Query] = {}
        self._snapshot: Kept | None = None  # see store/changes.py
        self._whole_at: float | None = None  # monotonic time of the last whole read kept
        self.hits = 0  # rows whose record was reused (for tests and curiosity)
        self.misses = 0
        self.snapshot_hits = 0
        self.snapshot_updates = 0  # snapshots read as the rows changed since the kept one

    def snapshot_at(self, counter: int) -> Any | None:
        """The snapshot kept at this change counter value, if any."""
        kept = self.kept_snapshot()
        if kept is not None and kept.counter == counter:
            self.snapshot_hits += 1
            return kept.snapshot
        return None

    def kept_snapshot(self) -> Kept | None:
        """The last snapshot kept; None when the next read must be a whole one
        (`WHOLE_READ_EVERY_S`, or `forget_snapshot`)."""
        if self._whole_at is None or time.monotonic() - self._whole_at > WHOLE_READ_EVERY_S:
            return None
        return self._snapshot

    def keep_snapshot(
        self, counter: int, snapshot: Any, deletions: int | None = None, *, whole: bool = True
    ) -> None:
        self._snapshot = Kept(counter, deletions, snapshot)
        if whole:
            self._whole_at = time.monotonic()

    def forget_snapshot(self) -> None:
        """The next snapshot is read whole (the Store calls it when the database went away:
        what comes back may have lost writes the kept snapshot shows)."""
        self._snapshot = None

    def _prepare(
        self, name: str, conn: AsyncConnection, stmt: Select[Any], key: Sequence[str]
    ) -> _Query | None:
        query = self._queries.get(name)
        if query is not None:
            return query
        dialect = conn.dialect
        compiled = stmt.compile(dialect=dialect)
        if compiled.params:
            return None
        columns = list(stmt.selected_columns)
        if any(c.key is None for c in columns):
            return None
        keys = tuple(str(c.key) for c in columns)
        query = _Query(
            sql=compiled.string,
            keys=keys,
            types=tuple(c.type.dialect_impl(dialect) for c in columns),
            processors=None,
            key_index=tuple(keys.index(k) for k in key),
            entries={},
        )
        self._queries[name] = query
        return query

    async def records(
        self,
        name: str,
        conn: AsyncConnection,
        stmt: Select[Any],
        key: Sequence[str],
        build: Callable[[Mapping[str, Any]], R],
    ) -> list[R] | None:
        """The records of `stmt` (rows in its order), each built by `build` from the row as
        a dict, or None if the statement cannot be cached. `name` identifies the query (one
        cache entry set per name), `key` the columns that identify a row."""
        query = self._prepare(name, conn, stmt, key)
        if query is None:
            return None
        result = await conn.exec_driver_sql(query.sql)
        if query.processors is None:
            description = result.cursor.description if result.cursor is not None else None
            coltypes = [d[1] for d in description] if description else [None] * len(query.keys)
            query.processors = tuple(
                t.result_processor(conn.dialect, coltype)
                for t, coltype in zip(query.types, coltypes, strict=True)
            )
        old, fresh = query.entries, {}
        out: list[R] = []
        keys, processors, key_index = query.keys, query.processors, query.key_index
        for row in result.all():
            raw = tuple(row)
            ident = raw[key_index[0]] if len(key_index) == 1 else tuple(raw[i] for i in key_index)
            seen = old.get(ident)
            if seen is not None and seen[0] == raw:
                record = seen[1]
                self.hits += 1
            else:
                values = {
                    k: (p(v) if p is not None and v is not None else v)
                    for k, p, v in zip(keys, processors, raw, strict=True)
                }
                record = build(values)
                self.misses += 1
            fresh[ident] = (raw, record)
            out.append(record)
        query.entries = fresh
        return out
