"""Google API errors as the emulator returns them (AIP-193), with the messages GCP really uses.

`ApiError` carries a canonical status; `envelope()` renders the HTTP JSON body
`{"error": {"code": <http>, "message", "status", "details"}}` and `status()` renders the
google.rpc.Status that a failed Operation carries (`{"code": <grpc>, "message", "details"}`).
The constructors below hold the exact wording seen in the wild (see field-notes.md), so clients
that classify errors by message or detail type are tested against the real strings.
"""

from __future__ import annotations

import secrets
from typing import Any

from tpucared_emulator.projects import project_number

# Canonical code name -> (google.rpc.Code number, HTTP status), per google/rpc/code.proto.
CODES: dict[str, tuple[int, int]] = {
    "CANCELLED": (1, 499),
    "UNKNOWN": (2, 500),
    "INVALID_ARGUMENT": (3, 400),
    "DEADLINE_EXCEEDED": (4, 504),
    "NOT_FOUND": (5, 404),
    "ALREADY_EXISTS": (6, 409),
    "PERMISSION_DENIED": (7, 403),
    "RESOURCE_EXHAUSTED": (8, 429),
    "FAILED_PRECONDITION": (9, 400),
    "ABORTED": (10, 409),
    "OUT_OF_RANGE": (11, 400),
    "UNIMPLEMENTED": (12, 501),
    "INTERNAL": (13, 500),
    "UNAVAILABLE": (14, 503),
    "DATA_LOSS": (15, 500),
    "UNAUTHENTICATED": (16, 401),
}

TYPE_PREFIX = "type.googleapis.com/"
BAD_REQUEST = "Cloud TPU received a bad request."


def eid() -> str:
    """The opaque error id GCP appends to many TPU messages."""
    return f"[EID: 0x{secrets.token_hex(8)}]"


class ApiError(Exception):
    def __init__(
        self,
        status: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if status not in CODES:
            raise ValueError(f"unknown canonical status {status!r}")
        super().__init__(message)
        self.status_name = status
        self.message = message
        self.details = details or []
        self.headers = headers or {}

    @property
    def code(self) -> int:
        """google.rpc.Code number."""
        return CODES[self.status_name][0]

    @property
    def http_status(self) -> int:
        return CODES[self.status_name][1]

    def envelope(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.http_status,
                "message": self.message,
                "status": self.status_name,
                "details": self.details,
            }
        }

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out


def _detail(type_name: str, **fields: Any) -> dict[str, Any]:
    return {"@type": TYPE_PREFIX + type_name, **fields}


def not_found(resource: str) -> ApiError:
    return ApiError(
        "NOT_FOUND",
        f"Resource '{resource}' was not found",
        [_detail("google.rpc.ResourceInfo", resourceName=resource)],
    )


def already_exists(resource: str) -> ApiError:
    return ApiError(
        "ALREADY_EXISTS",
        f"Resource '{resource}' already exists",
        [_detail("google.rpc.ResourceInfo", resourceName=resource)],
    )


def invalid_argument(message: str, field: str | None = None) -> ApiError:
    details = []
    if field is not None:
        violation = {"field": field, "description": message}
        details.append(_detail("google.rpc.BadRequest", fieldViolations=[violation]))
    return ApiError("INVALID_ARGUMENT", message, details)


def bad_request(message: str, *, with_eid: bool = True) -> ApiError:
    """The TPU service's own validation failures: `Cloud TPU received a bad request. ...`."""
    suffix = f" {eid()}" if with_eid else ""
    return ApiError("INVALID_ARGUMENT", f"{BAD_REQUEST} {message}{suffix}")


def failed_precondition(message: str) -> ApiError:
    return ApiError("FAILED_PRECONDITION", message)


def unknown_accelerator(accelerator_type: str, zone: str) -> ApiError:
    return bad_request(
        f"the accelerator {accelerator_type} was not found in zone {zone}", with_eid=False
    )


def bad_state(action: str, state: str) -> ApiError:
    return bad_request(f"{action} is not supported while in state {state}")


def location_not_found(zone: str) -> ApiError:
    return ApiError("PERMISSION_DENIED", f"Location {zone} is not found or access is unauthorized.")


def permission_denied(permission: str, resource: str) -> ApiError:
    return ApiError(
        "PERMISSION_DENIED",
        f"Permission '{permission}' denied on '{resource}'",
        [
            _detail(
                "google.rpc.ErrorInfo",
                reason="IAM_PERMISSION_DENIED",
                domain="tpu.googleapis.com",
                metadata={"permission": permission, "resource": resource},
            )
        ],
    )


def unable_to_queue() -> ApiError:
    """Another operation on the resource is in flight; the caller should retry."""
    return ApiError("ABORTED", "unable to queue the operation")


def quota_exhausted(region: str) -> ApiError:
    metric = "TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI"
    message = f"Quota '{metric}' exhausted. Limit 20800 in region {region}"
    violation = {"subject": f"project:emulated/region:{region}", "description": message}
    return ApiError(
        "RESOURCE_EXHAUSTED",
        message,
        [_detail("google.rpc.QuotaFailure", violations=[violation])],
    )


def rate_limited(retry_after_s: float | None) -> ApiError:
    details: list[dict[str, Any]] = [
        _detail(
            "google.rpc.ErrorInfo",
            reason="RATE_LIMIT_EXCEEDED",
            domain="googleapis.com",
            metadata={"service": "tpu.googleapis.com"},
        )
    ]
    headers: dict[str, str] = {}
    if retry_after_s is not None:
        details.append(_detail("google.rpc.RetryInfo", retryDelay=f"{retry_after_s:g}s"))
        headers["Retry-After"] = str(max(0, round(retry_after_s)))
    return ApiError(
        "RESOURCE_EXHAUSTED",
        "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' of service "
        "'tpu.googleapis.com'.",
        details,
        headers,
    )


def create_rate_exceeded(limit: int, project: str) -> ApiError:
    """Over the per-minute nodes.create quota (`create_requests_per_minute`), worded as
    reported (research section 9 row 26): 429 RESOURCE_EXHAUSTED."""
    details = [
        _detail(
            "google.rpc.ErrorInfo",
            reason="RATE_LIMIT_EXCEEDED",
            domain="googleapis.com",
            metadata={"service": "tpu.googleapis.com", "quota_limit_value": str(limit)},
        )
    ]
    return ApiError(
        "RESOURCE_EXHAUSTED",
        f"Quota exceeded for quota metric 'Create requests' and limit 'Maximum number of "
        f"CreateNode requests per minute' of service 'tpu.googleapis.com' for consumer "
        f"'project_number:{project_number(project)}'.",  # the number, as Google writes it
        details,
    )


def unavailable() -> ApiError:
    return ApiError("UNAVAILABLE", "The service is currently unavailable.")


def internal() -> ApiError:
    return ApiError("INTERNAL", "Internal error encountered.")


def deadline_exceeded() -> ApiError:
    return ApiError("DEADLINE_EXCEEDED", "The request deadline was exceeded.")


def no_capacity(zone: str) -> ApiError:
    """Create finished without a node: the zone has no free slice of this type."""
    return ApiError(
        "RESOURCE_EXHAUSTED",
        f'There is no more capacity in the zone "{zone}"; you can try in another zone where '
        "Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) "
        f"{eid()}",
    )


def insufficient_reserved_capacity() -> ApiError:
    return ApiError(
        "RESOURCE_EXHAUSTED",
        "Insufficient reserved capacity. Contact customer support to increase your "
        f"reservation. {eid()}",
    )
