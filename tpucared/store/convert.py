"""Rows to records: the only place that knows how table columns map onto `tpucared.core.model`.

Fields are copied by name, so a field added to a record later (with a default) is filled as soon
as a column of the same name exists. The few columns named for the `sqlite3` reader rather than
for the code are renamed here (`node_id` -> `incarnation_id`, `worker` -> `index`, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from tpucared.core.model.records import (
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


# record class -> (field, column) pairs, worked out once per class: the snapshot converts
# every live incarnation and slot each tick (10,000s of rows), and `dataclasses.fields` plus
# the renames per row cost more than the rest of the conversion.
_PLANS: dict[type[Any], tuple[tuple[str, str], ...]] = {}


def _plan(cls: type[Any]) -> tuple[tuple[str, str], ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        renames = _RENAMES.get(cls, {})
        plan = tuple((f.name, renames.get(f.name, f.name)) for f in dataclasses.fields(cls))
        _PLANS[cls] = plan
    return plan


def _build(cls: type[R], row: Mapping[Any, Any], **overrides: Any) -> R:
    values: dict[str, Any] = {}
    for name, column in _plan(cls):
        if name in overrides:
            values[name] = overrides[name]
        elif column in row:
            values[name] = row[column]
    return cls(**values)


def fleet(row: Mapping[Any, Any]) -> FleetRecord:
    return _build(FleetRecord, row)


def slot(row: Mapping[Any, Any]) -> SlotRecord:
    return _build(SlotRecord, row)


def incarnation(row: Mapping[Any, Any]) -> IncarnationRecord:
    return _build(IncarnationRecord, row)


def worker(row: Mapping[Any, Any]) -> WorkerRecord:
    return _build(WorkerRecord, row, host_keys=tuple(row["host_keys"] or ()))


def workload_attempt(row: Mapping[Any, Any]) -> WorkloadAttemptRecord:
    # JSON object keys are strings; the record maps worker index (int) -> exit code.
    codes = {int(k): v for k, v in (row["exit_codes"] or {}).items()}
    return _build(WorkloadAttemptRecord, row, exit_codes=codes)


def create_attempt(row: Mapping[Any, Any]) -> CreateAttemptRecord:
    return _build(CreateAttemptRecord, row)


def event(row: Mapping[Any, Any]) -> EventRecord:
    return _build(EventRecord, row, details=dict(row["details"] or {}))
