"""A Compute Engine zonal `Operation` (compute v1) as a small value.

Every mutating call answers one (`status` PENDING / RUNNING / DONE); it is followed with
zoneOperations.get. A finished one failed when it carries `error.errors[{code, message}]`;
`httpErrorStatusCode` / `httpErrorMessage` say how (503 "SERVICE UNAVAILABLE" for a
stockout, 403 "FORBIDDEN" for quota). The classification is errors.py's
`classify_compute_operation`. Sources: docs/research/compute-engine.md §2.5.

`path` is where it lives (`projects/P/zones/Z/operations/O`): the name the Cloud port hands
out, because zoneOperations.get needs the project and the zone (names.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpucared.core.model.observed import RecordKind
from tpucared.gcp.compute import names
from tpucared.gcp.errors import ApiError, classify_compute_operation
from tpucared.gcp.fields import parse_time

# operationType -> the port's verb (OperationState.verb): what the runtime records.
_VERBS = {"insert": "create", "delete": "delete"}

PREEMPTED = "compute.instances.preempted"  # the system operation of a spot preemption
# The system operations of a VM stopped for host maintenance (docs/research/compute-engine.md
# §10 O13): the names Google's audit logs and tools read, both kinds taken.
HOST_MAINTENANCE = (
    "compute.instances.hostMaintenance",
    "compute.instances.terminateOnHostMaintenance",
)
# What each record's operationType says happened (core/model/observed.py RecordKind).
RECORD_KINDS: Mapping[str, RecordKind] = {
    PREEMPTED: RecordKind.PREEMPTED,
    **{t: RecordKind.HOST_MAINTENANCE for t in HOST_MAINTENANCE},
}
# One zoneOperations.list for all of them: the regex form of `filter` (RE2, whole field);
# AIP-160 `OR` would do too, but the regex form is one documented term.
RECORDS_FILTER = (
    'operationType eq "compute.instances.(preempted|hostMaintenance|terminateOnHostMaintenance)"'
)


@dataclass(frozen=True)
class Operation:
    name: str
    path: str  # projects/P/zones/Z/operations/O
    status: str = "PENDING"
    operation_type: str | None = None
    target_link: str | None = None
    target_id: str | None = None  # the id of the instance it acts on (uint64 as a string)
    error: Mapping[str, Any] | None = None  # {errors: [{code, message, errorDetails}]}
    http_error_status_code: object = None
    http_error_message: object = None
    insert_time: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    client_operation_id: str | None = None  # the insert's requestId, echoed
    user: str | None = None  # "system" for a preemption

    @classmethod
    def from_json(
        cls, data: Mapping[str, Any], project: str, zone: str, *, scope: str | None = None
    ) -> Operation:
        """An Operation answered for a request in (`project`, `zone`): its path is built
        from those, not from `selfLink` (Google writes its own host there); `scope`: the
        parent of a regional or global one (`projects/P/regions/R`, `projects/P/global`).
        ValueError for one without a name."""
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("operation without a name")
        error = data.get("error")
        if error is not None and not isinstance(error, Mapping):
            raise ValueError(f"operation {name}: error is not an object")
        return cls(
            name=name,
            path=(
                f"{scope}/operations/{name}"
                if scope is not None
                else names.operation_path(project, zone, name)
            ),
            status=_text(data, "status") or "PENDING",
            operation_type=_text(data, "operationType"),
            target_link=_text(data, "targetLink"),
            target_id=_id(data.get("targetId")),
            error=error if error and any(error.values()) else None,  # not `{errors: []}`
            http_error_status_code=data.get("httpErrorStatusCode"),
            http_error_message=data.get("httpErrorMessage"),
            insert_time=_text(data, "insertTime"),
            start_time=_text(data, "startTime"),
            end_time=_text(data, "endTime"),
            client_operation_id=_text(data, "clientOperationId"),
            user=_text(data, "user"),
        )

    @property
    def done(self) -> bool:
        return self.status == "DONE"

    @property
    def failed(self) -> bool:
        return self.done and self.error is not None

    @property
    def verb(self) -> str | None:
        return _VERBS.get(self.operation_type or "", self.operation_type)

    @property
    def target(self) -> str | None:
        """The short name of the resource it acts on (from `targetLink`)."""
        return names.short_name(self.target_link) if self.target_link else None

    @property
    def duration_s(self) -> float | None:
        """How long it ran by the API's clock (startTime, else insertTime, to endTime)."""
        start = parse_time(self.start_time or self.insert_time)
        end = parse_time(self.end_time)
        if start is None or end is None:
            return None
        seconds = (end - start).total_seconds()
        return seconds if seconds >= 0 else None

    def exception(self) -> ApiError | None:
        """The classified error of a finished, failed operation; None otherwise. An
        operation that carries errors before it is DONE (as some stockouts are answered)
        is judged when it is DONE: until then it is running."""
        if not self.failed or self.error is None:
            return None
        return classify_compute_operation(
            self.error,
            http_status=self.http_error_status_code,
            http_message=self.http_error_message,
            operation=self.path,
        )


def _id(value: object) -> str | None:
    """A uint64 id, which Google sends as a string (and a JSON number would be read as)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return value if isinstance(value, str) and value else None


def _text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) and value else None
