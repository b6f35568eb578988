"""Compute Engine v1 errors, as the emulator answers them: the HTTP envelope and operation errors.

The HTTP envelope of compute v1 differs from the TPU API's (errors.py): `{"error": {"code":
<http>, "message", "errors": [{"reason", "message", "domain"}]}}`, with camelCase reasons
(`notFound`, `alreadyExists`, `invalid`, `quotaExceeded`, `rateLimitExceeded`). `ComputeError`
is an `ApiError` whose `envelope()` renders it so, which lets the request pipeline
(middleware.py) treat both APIs alike. A failed operation carries UPPER_SNAKE codes instead
(`ZONE_RESOURCE_POOL_EXHAUSTED`, `QUOTA_EXCEEDED`): `OpError` is one, with the HTTP status the
operation reports in `httpErrorStatusCode` / `httpErrorMessage` (google-cloud-compute raises
only when both are set). Wording: docs/research/compute-engine.md sections 2.5, 3 and 3.6.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpucared_emulator.errors import ApiError
from tpucared_emulator.projects import project_number

# HTTP status -> the canonical status ApiError wants (only its HTTP status is ever shown).
_CANONICAL = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
HTTP_MESSAGES = {
    400: "BAD REQUEST",
    403: "FORBIDDEN",
    404: "NOT FOUND",
    409: "CONFLICT",
    412: "PRECONDITION FAILED",
    429: "TOO MANY REQUESTS",
    500: "INTERNAL SERVER ERROR",
    503: "SERVICE UNAVAILABLE",
    504: "GATEWAY TIMEOUT",
}
TROUBLESHOOTING = "https://cloud.google.com/compute/docs/resource-error"


class ComputeError(ApiError):
    """An HTTP error of the compute v1 API."""

    def __init__(
        self,
        http_status: int,
        reason: str,
        message: str,
        *,
        domain: str = "global",
        headers: dict[str, str] | None = None,
    ) -> None:
        canonical = _CANONICAL.get(http_status, "FAILED_PRECONDITION")
        super().__init__(canonical, message, headers=headers)
        self._http_status = http_status
        self.reason = reason
        self.domain = domain

    @property
    def http_status(self) -> int:
        return self._http_status

    def envelope(self) -> dict[str, Any]:
        detail = {"message": self.message, "domain": self.domain, "reason": self.reason}
        return {"error": {"code": self._http_status, "message": self.message, "errors": [detail]}}


@dataclass(frozen=True)
class OpError:
    """What a failed operation carries: `error.errors[]` and the HTTP status it reports."""

    code: str
    message: str
    http_status: int
    details: list[dict[str, Any]] = field(default_factory=list)

    def fields(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            entry["errorDetails"] = self.details
        return {
            "error": {"errors": [entry]},
            "httpErrorStatusCode": self.http_status,
            "httpErrorMessage": HTTP_MESSAGES.get(self.http_status, "ERROR"),
        }


_REASONS = {400: "invalidParameter", 403: "forbidden", 404: "notFound", 409: "conflict",
            429: "rateLimitExceeded", 500: "backendError", 503: "backendError"}  # fmt: skip


def in_compute_envelope(error: ApiError) -> ComputeError:
    """A TPU-style error of a module both APIs share (a bad `fields` or page token), as compute
    answers it."""
    status = error.http_status
    return ComputeError(status, _REASONS.get(status, "invalid"), error.message)


def not_found(resource: str) -> ComputeError:
    return ComputeError(404, "notFound", f"The resource '{resource}' was not found")


def already_exists(resource: str) -> ComputeError:
    return ComputeError(409, "alreadyExists", f"The resource '{resource}' already exists")


def invalid(field_name: str, value: object, why: str = "") -> ComputeError:
    message = f"Invalid value for field '{field_name}': '{value}'."
    return ComputeError(400, "invalid", f"{message} {why}".strip())


def required(field_name: str) -> ComputeError:
    return ComputeError(400, "required", f"Required field '{field_name}' not specified")


def bad_request(message: str) -> ComputeError:
    return ComputeError(400, "badRequest", message)


def not_ready(resource: str) -> ComputeError:
    message = f"The resource '{resource}' is not ready"
    return ComputeError(400, "resourceNotReady", message)


def vm_unavailable(machine_type: str, zone: str) -> str:
    """The human message of a stockout (research section 3.1, the doc's template)."""
    return (
        f"A {machine_type} VM instance is currently unavailable in the {zone} zone. Capacity "
        "changes frequently, so try your request in a different zone, with a different VM "
        "hardware configuration, or at a later time. For more options, see troubleshooting "
        "documentation."
    )


def stockout(
    code: str, project: str, zone: str, machine_type: str, zones_available: list[str]
) -> OpError:
    """A stockout, as the operation error (research sections 2.5 and 3.1): the plain code has
    the VM message; `_WITH_DETAILS` has the zone message (two spaces after "request.") and
    the VM message as its localizedMessage. Both carry errorDetails."""
    unavailable = vm_unavailable(machine_type, zone)
    details: list[dict[str, Any]] = [
        {
            "help": {
                "links": [{"description": "Troubleshooting documentation", "url": TROUBLESHOOTING}]
            }
        },
        {"localizedMessage": {"locale": "en-US", "message": unavailable}},
        {
            "errorInfo": {
                "reason": "resource_availability",
                "domain": "compute.googleapis.com",
                "metadatas": {
                    "vmType": machine_type,
                    "attachment": "",
                    "zone": zone,
                    "zonesAvailable": ",".join(zones_available),
                },
            }
        },
    ]
    message = unavailable
    if code.endswith("_WITH_DETAILS"):
        message = (
            f"The zone 'projects/{project}/zones/{zone}' does not have enough resources "
            "available to fulfill the request.  '(resource type:compute)'."
        )
    return OpError(code, message, 503, details)


def stockout_http(error: OpError) -> ComputeError:
    """The same stockout as a synchronous HTTP 503 (unconfirmed: research section 9, row 1)."""
    return ComputeError(503, error.code, error.message)


def quota_http(error: OpError) -> ComputeError:
    """A quota error as the insert's own HTTP 403 (research section 3.2: `quotaExceeded`,
    domain `usageLimits`)."""
    return ComputeError(403, "quotaExceeded", error.message, domain="usageLimits")


def aborted(message: str) -> OpError:
    """An operation cut short by what happened to its instance meanwhile (wording ours)."""
    return OpError("RESOURCE_OPERATION_ABORTED", message, 409)


def internal() -> OpError:
    return OpError(
        "INTERNAL_ERROR", "Internal error. Please try again or contact Google Support.", 500
    )


# -- Faults (faults.py decides; middleware.py asks here for a compute path's answer) ----------

_COLLECTIONS = {
    "instances": "instances",
    "operations": "zoneOperations",
    "machineTypes": "machineTypes",
    "instanceGroupManagers": "instanceGroupManagers",
    "instanceTemplates": "instanceTemplates",
    "resourcePolicies": "resourcePolicies",
}


def permission_for(method: str, path: str) -> str:
    """The IAM permission a compute request needs, e.g. `compute.instances.list`."""
    parts = [p for p in path.removeprefix("/compute/v1/").split("/") if p != "global"]
    collection = next(
        (_COLLECTIONS[p] for p in reversed(parts[0::2]) if p in _COLLECTIONS), "zones"
    )
    if parts[-1] in ("getGuestAttributes", "wait", "listManagedInstances", "resize"):
        action = {"getGuestAttributes": "getGuestAttributes", "resize": "update"}.get(
            parts[-1], "get"
        )
    elif len(parts) % 2 == 1:  # a collection: projects/p/zones/z/instances
        action = "create" if method == "POST" else "list"
    else:
        action = {"DELETE": "delete"}.get(method, "get")
    return f"compute.{collection}.{action}"


def compute_fault_error(fault: Any, method: str, path: str) -> ComputeError:
    """The answer a (non-drop, non-malformed) fault gives on a compute path (research §3.6,
    §7.1: quota and rate limits are 403 with camelCase reasons)."""
    resource = path.removeprefix("/compute/v1/")
    parts = resource.split("/")
    region = parts[3].rsplit("-", 1)[0] if len(parts) > 3 else "us-central1"
    kind = fault.kind
    if kind == "unavailable":
        return ComputeError(503, "backendError", "The service is currently unavailable.")
    if kind == "internal":
        return ComputeError(500, "backendError", "Internal Error")
    if kind == "deadline":
        return ComputeError(504, "backendError", "The request deadline was exceeded.")
    if kind == "quota":
        message = f"Quota 'TPUS_PER_TPU_FAMILY' exceeded.  Limit: 0.0 in region {region}."
        return ComputeError(403, "quotaExceeded", message, domain="usageLimits")
    if kind == "rate_limited":
        retry = fault.retry_after_s
        headers = {"Retry-After": str(max(0, round(retry)))} if retry is not None else None
        message = (
            "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of "
            f"service 'compute.googleapis.com' for consumer 'project_number:"
            f"{project_number(parts[1] if len(parts) > 1 else '')}'."
        )
        return ComputeError(
            403, "rateLimitExceeded", message, domain="usageLimits", headers=headers
        )
    if kind == "conflict":
        return not_ready("/".join(parts[:6]))
    if kind == "permission":
        message = f"Required '{permission_for(method, path)}' permission for '{resource}'"
        return ComputeError(403, "forbidden", message)
    raise ValueError(f"fault {kind!r} has no error response")
