"""Compute Engine's errors in the one classification (gcp/errors.py): its HTTP envelope
`{"error": {"code", "message", "errors": [{"reason", "message", "domain"}]}}` and its
operations' `error.errors[{code, message}]`, with the real texts of
docs/research/compute-engine.md §3."""

from __future__ import annotations

from typing import Any

import pytest

from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.errors import (
    COMPUTE_CODES,
    CapacityError,
    classify_compute_operation,
    classify_http,
)

K = ErrorKind

STOCKOUT_MSG = (
    "The zone 'projects/lab/zones/us-central1-c' does not have enough resources available to "
    "fulfill the request.  Try a different zone, or try again later."
)
UNAVAILABLE_MSG = (
    "A tpu7x-standard-4t VM instance is currently unavailable in the us-central1-c zone. "
    "Capacity changes frequently, so try your request in a different zone, with a different "
    "VM hardware configuration, or at a later time."
)


def envelope(code: int, message: str, reason: str, domain: str = "global") -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "errors": [{"reason": reason, "message": message, "domain": domain}],
        }
    }


@pytest.mark.parametrize(
    ("status", "message", "reason", "kind"),
    [
        (503, STOCKOUT_MSG, "ZONE_RESOURCE_POOL_EXHAUSTED", K.CAPACITY),
        (503, UNAVAILABLE_MSG, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", K.CAPACITY),
        (403, "Quota 'CPUS' exceeded.  Limit: 48.0 in region us-east1.", "quotaExceeded", K.QUOTA),
        (403, "Rate Limit Exceeded", "rateLimitExceeded", K.RATE_LIMITED),
        (403, "Too frequent operations", "RESOURCE_OPERATION_RATE_EXCEEDED", K.RATE_LIMITED),
        (
            409,
            "The resource 'projects/lab/zones/us-central1-c/instances/iron-0' already exists",
            "alreadyExists",
            K.ALREADY_EXISTS,
        ),
        (
            404,
            "The resource 'projects/lab/zones/us-central1-c/instances/iron-0' was not found",
            "notFound",
            K.NOT_FOUND,
        ),
        (400, "The resource is not ready", "resourceNotReady", K.CONFLICT),
        (403, "Required 'compute.instances.create' permission", "forbidden", K.PERMISSION),
        (400, "Invalid value for field 'resource.name'", "invalid", K.INVALID),
    ],
)
def test_http_errors_by_reason(status: int, message: str, reason: str, kind: ErrorKind) -> None:
    error = classify_http(status, envelope(status, message, reason))
    assert error.kind is kind, error
    assert error.http_status == status
    assert error.message == message
    assert {"reason": reason, "message": message, "domain": "global"} in error.details


def test_a_synchronous_stockout_is_a_capacity_error() -> None:
    error = classify_http(503, envelope(503, STOCKOUT_MSG, "ZONE_RESOURCE_POOL_EXHAUSTED"))
    assert isinstance(error, CapacityError)


def test_a_rate_limit_403_is_not_a_permission_problem() -> None:
    # Without the reason a 403 is PERMISSION; Compute Engine's rate quota answers 403 too.
    assert classify_http(403, envelope(403, "Forbidden", "forbidden")).kind is K.PERMISSION
    assert classify_http(403, envelope(403, "x", "rateLimitExceeded")).kind is K.RATE_LIMITED


def test_a_zone_that_is_not_found_is_not_an_instance_that_vanished() -> None:
    for path in ("projects/lab/zones/us-moon1-z", "projects/nope"):
        body = envelope(404, f"The resource '{path}' was not found", "notFound")
        assert classify_http(404, body).kind is K.PERMISSION


def test_every_code_has_both_spellings_or_is_one_only_google_uses() -> None:
    # Operation errors are UPPER_SNAKE, HTTP reasons camelCase: the table reads both.
    for code in ("QUOTA_EXCEEDED", "quotaExceeded", "notFound", "RESOURCE_NOT_FOUND"):
        assert code in COMPUTE_CODES


def stockout_operation(code: str) -> dict[str, Any]:
    return {
        "errors": [
            {
                "code": code,
                "message": STOCKOUT_MSG,
                "errorDetails": [
                    {
                        "errorInfo": {
                            "reason": "resource_availability",
                            "domain": "compute.googleapis.com",
                            "metadatas": {"zonesAvailable": ""},
                        }
                    }
                ],
            }
        ]
    }


@pytest.mark.parametrize(
    "code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"]
)
def test_a_stockout_operation_is_capacity(code: str) -> None:
    error = classify_compute_operation(
        stockout_operation(code),
        http_status=503,
        http_message="SERVICE UNAVAILABLE",
        operation="projects/lab/zones/us-central1-c/operations/op-1",
    )
    assert isinstance(error, CapacityError)
    assert error.status == code
    assert error.http_status == 503
    assert error.operation == "projects/lab/zones/us-central1-c/operations/op-1"
    assert error.message == STOCKOUT_MSG


@pytest.mark.parametrize(
    ("code", "message", "http", "kind"),
    [
        (
            "QUOTA_EXCEEDED",
            "Quota 'TPUS' exceeded.  Limit: 0.0 in region us-central1.",
            403,
            K.QUOTA,
        ),
        ("RESOURCE_OPERATION_RATE_EXCEEDED", "Too frequent operations", 403, K.RATE_LIMITED),
        (
            "RESOURCE_NOT_FOUND",
            "The resource 'projects/lab/global/images/x' was not found",
            404,
            K.NOT_FOUND,
        ),
        ("SOMETHING_NEW", "It broke", 503, K.TRANSIENT),
        ("SOMETHING_NEW", "Invalid value", 400, K.INVALID),
        ("SOMETHING_NEW", "No", 403, K.PERMISSION),
    ],
)
def test_operation_errors_by_code_then_by_http_status(
    code: str, message: str, http: int, kind: ErrorKind
) -> None:
    error = classify_compute_operation(
        {"errors": [{"code": code, "message": message}]}, http_status=http
    )
    assert error.kind is kind, error


def test_an_operation_error_without_codes_or_status_is_transient() -> None:
    error = classify_compute_operation({"errors": []}, http_status="oops")
    assert error.kind is K.TRANSIENT
    assert error.http_status is None
    # A status sent as digits is read.
    assert classify_compute_operation({}, http_status="403").kind is K.PERMISSION
