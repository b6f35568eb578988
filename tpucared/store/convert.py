"""Rows to records: the only place that knows how table columns map onto `tpucared.core.model`.

Fields are copied by name, so a field added to a record later (with a default) is filled as soon
as a column of the same name exists. The few columns named for the `sqlite3` reader rather than
for the code are renamed here (`node_id` -> `incarnation_id`, `worker` -> `index`, ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from sqlalchemy.engine import RowMapping

from tpucared.core.model import (
    CreateAttemptRecord,
    EventRecord,
    FleetRecord,
    IncarnationRecord,
    SlotRecord,
    WorkerRecord,
    WorkloadAttemptRecord,
)

R = TypeVar("R")

# record field -> column, where they differ
_RENAMES: dict[type[Any], dict[str, str]] = {
    SlotRecord: {"index": "slot"},
    WorkerRecord: {"incarnation_id": "node_id", "index": "worker"},
    WorkloadAttemptRecord: {"incarnation_id": "node_id"},
    CreateAttemptRecord: {"incarnation_id": "node_id"},
}


def _build(cls: type[R], row: RowMapping, **overrides: Any) -> R:
    renames = _RENAMES.get(cls, {})
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        column = renames.get(f.name, f.name)
        if f.name in overrides:
            values[f.name] = overrides[f.name]
        elif column in row:
            values[f.name] = row[column]
    return cls(**values)


def fleet(row: RowMapping) -> FleetRecord:
    return _build(FleetRecord, row)


def slot(row: RowMapping) -> SlotRecord:
    return _build(SlotRecord, row)


def incarnation(row: RowMapping) -> IncarnationRecord:
    return _build(IncarnationRecord, row)


def worker(row: RowMapping) -> WorkerRecord:
    return _build(WorkerRecord, row, host_keys=tuple(row["host_keys"] or ()))


def workload_attempt(row: RowMapping) -> WorkloadAttemptRecord:
    # JSON object keys are strings; the record maps worker index (int) -> exit code.
    codes = {int(k): v for k, v in (row["exit_codes"] or {}).items()}
    return _build(WorkloadAttemptRecord, row, exit_codes=codes)


def create_attempt(row: RowMapping) -> CreateAttemptRecord:
    return _build(CreateAttemptRecord, row)


def event(row: RowMapping) -> EventRecord:
    return _build(EventRecord, row, details=dict(row["details"] or {}))
