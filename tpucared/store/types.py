"""Column types that keep the database readable by people and portable across backends.

Each is a `TypeDecorator` over a generic SQL type (DATETIME, VARCHAR, TEXT), so the schema has
nothing SQLite-only and serves PostgreSQL with the same models:

- `UTCDateTime`: timezone-aware UTC datetimes in, timezone-aware UTC datetimes out. SQLite stores
  them as readable text (`2025-06-01 12:00:00.000000`, always UTC), which its date functions
  (`julianday`, `datetime`) understand; PostgreSQL as `timestamptz` (microseconds kept), so the
  same values come back from both.
- `StrEnumType`: a `StrEnum` stored as its value (`'ready'`, not `'READY'` or `3`). No CHECK
  constraint: adding an enum member must not require rebuilding a table.
- `JSONText`: a JSON document stored as TEXT with sorted keys (`json_extract` works on it).
- `MaintenanceText`: a core `MaintenanceWindow` as such a JSON document (migration 0011).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from sqlalchemy import DateTime, String, Text
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from tpucared.core.model.observed import MaintenanceWindow

E = TypeVar("E", bound=StrEnum)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware datetimes only; stored in UTC; returned with `tzinfo=UTC`."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            # A naive datetime is ambiguous; refusing it keeps every stored instant honest.
            raise ValueError(f"naive datetime {value!r}: tpucared stores aware UTC datetimes")
        utc = value.astimezone(UTC)
        # SQLite has no time zones: store the UTC wall clock, re-attach UTC on the way out.
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def result_processor(
        self, dialect: Dialect, coltype: object
    ) -> Callable[[Any], datetime | None]:
        """The driver's parser and `process_result_value` fused into one function, which keeps
        the inner type's processing as TypeDecorator's own version does. The snapshot reads a
        dozen datetime columns of every live incarnation each tick; the generic chain cost
        three Python calls a value, NULLs included."""
        parse = self.impl_instance.result_processor(dialect, coltype)

        def process(value: Any) -> datetime | None:
            if value is None:
                return None
            if parse is not None:
                value = parse(value)
            if value.tzinfo is None:
                return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
            return value.astimezone(UTC)  # type: ignore[no-any-return]

        return process


class StrEnumType(TypeDecorator[E], Generic[E]):
    """A `StrEnum` stored as its string value in a VARCHAR."""

    impl = String
    cache_ok = True

    def __init__(self, enum_cls: type[E], length: int = 32) -> None:
        super().__init__(length=length)
        self.enum_cls = enum_cls

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        # Validates plain strings too: an unknown value never reaches the database.
        return self.enum_cls(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        return None if value is None else self.enum_cls(value)

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], E | None]:
        """Stored value -> member by a dict lookup: `EnumClass(value)` goes through the enum
        machinery (two Python calls), once per row and column. Unknown values still raise
        the enum's ValueError."""
        members: Mapping[str, E] = {m.value: m for m in self.enum_cls}
        enum_cls = self.enum_cls

        def process(value: Any) -> E | None:
            if value is None:
                return None
            member = members.get(value)
            return member if member is not None else enum_cls(value)

        return process

    def copy(self, **kw: Any) -> StrEnumType[E]:
        return StrEnumType(self.enum_cls, self.length)

    @property
    def length(self) -> int:
        impl = self.impl_instance
        assert isinstance(impl, String)
        return impl.length or 32


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, MaintenanceWindow):  # in a node event's cloud facts
        return _window_json(value)
    return str(value)


def _window_json(w: MaintenanceWindow) -> dict[str, object]:
    return {
        "start": w.start.isoformat() if w.start else None,
        "end": w.end.isoformat() if w.end else None,
        "type": w.type,
        "status": w.status,
        "can_reschedule": w.can_reschedule,
    }


class JSONText(TypeDecorator[Any]):
    """Any JSON-serializable value, stored as compact TEXT with sorted keys."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_default)

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)


class MaintenanceText(TypeDecorator[MaintenanceWindow]):
    """A node's next maintenance window (`IncarnationRecord.maintenance`) as JSON TEXT."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: MaintenanceWindow | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return json.dumps(_window_json(value), sort_keys=True, separators=(",", ":"))

    def process_result_value(self, value: str | None, dialect: Dialect) -> MaintenanceWindow | None:
        if value is None:
            return None
        d = json.loads(value)

        def at(key: str) -> datetime | None:
            return datetime.fromisoformat(d[key]).astimezone(UTC) if d.get(key) else None

        return MaintenanceWindow(
            start=at("start"),
            end=at("end"),
            type=d.get("type"),
            status=d.get("status"),
            can_reschedule=d.get("can_reschedule"),
        )
