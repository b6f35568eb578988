"""The classification table: real error bodies (field notes) -> ErrorKind, and the fields kept."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import aiohttp
import google.auth.exceptions
import pytest

from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.errors import (
    AlreadyExistsError,
    ApiError,
    CapacityError,
    NotFoundError,
    OperationTimeout,
    QuotaError,
    TransientError,
    classify_http,
    classify_operation_error,
    classify_refresh_error,
    classify_transport,
    malformed_response,
    parse_retry_after,
)

K = ErrorKind

CAPACITY_MSG = (
    'There is no more capacity in the zone "us-central1-b"; you can try in another zone where '
    "Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x1a2b]"
)
CAPACITY_QUEUE_MSG = (
    'There is no more capacity in the zone "us-central2-b"; you can queue your request to get '
    "capacity when available (see https://cloud.google.com/tpu/docs/queued-resources) "
    "[EID: 0x3c4d]"
)
RESERVED_MSG = (
    "Insufficient reserved capacity. Contact customer support to increase your reservation. "
    "[EID: 0x5e6f]"
)
QUOTA_MSG = (
    "Quota 'TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI' exhausted. "
    "Limit 20800 in region us-central2"
)
QUOTA_FAILURE = {
    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
    "violations": [
        {
            "subject": "project:my-project",
            "description": "TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI",
        }
    ],
}
RATE_MSG = (
    "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute' of "
    "service 'tpu.googleapis.com' for consumer 'project_number:123'."
)
RATE_INFO = {
    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
    "reason": "RATE_LIMIT_EXCEEDED",
    "domain": "googleapis.com",
}
BAD_STATE_MSG = (
    "Cloud TPU received a bad request. update is not supported while in state PREEMPTED "
    "[EID: 0x7a8b]"
)
BAD_TYPE_MSG = (
    "Cloud TPU received a bad request. the accelerator v4-128 was not found in zone us-central2-b"
)
NODE = "projects/p/locations/us-central2-b/nodes/sweep-0"


def envelope(code: int, status: str | None, message: str, *details: Any) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if status is not None:
        error["status"] = status
    if details:
        error["details"] = list(details)
    return {"error": error}


HTTP_CASES = [
    pytest.param(404, envelope(404, "NOT_FOUND", f"Resource '{NODE}' was not found"),
                 K.NOT_FOUND, id="404-not-found"),
    pytest.param(409, envelope(409, "ALREADY_EXISTS", f"Resource '{NODE}' already exists"),
                 K.ALREADY_EXISTS, id="409-already-exists"),
    pytest.param(409, envelope(409, "ABORTED", "unable to queue the operation"),
                 K.CONFLICT, id="409-aborted-unable-to-queue"),
    pytest.param(409, envelope(409, None, "unable to queue the operation"),
                 K.CONFLICT, id="409-no-status-unable-to-queue"),
    pytest.param(409, envelope(409, None, "node sweep-0 already exists"),
                 K.ALREADY_EXISTS, id="409-no-status-already-exists"),
    pytest.param(429, envelope(429, "RESOURCE_EXHAUSTED", QUOTA_MSG, QUOTA_FAILURE),
                 K.QUOTA, id="429-quota-failure-detail"),
    pytest.param(429, envelope(429, "RESOURCE_EXHAUSTED", QUOTA_MSG),
                 K.QUOTA, id="429-quota-message-only"),
    pytest.param(429, envelope(429, "RESOURCE_EXHAUSTED", "quota check", QUOTA_FAILURE),
                 K.QUOTA, id="429-quota-detail-only"),
    pytest.param(429, envelope(429, "RESOURCE_EXHAUSTED", RATE_MSG, RATE_INFO),
                 K.RATE_LIMITED, id="429-api-rate-quota-per-minute"),
    pytest.param(429, envelope(429, "RESOURCE_EXHAUSTED",
                               "Resource has been exhausted (e.g. check quota)."),
                 K.RATE_LIMITED, id="429-generic-exhausted"),
    pytest.param(429, envelope(429, None, "Too many requests"),
                 K.RATE_LIMITED, id="429-no-status"),
    pytest.param(403, envelope(403, "PERMISSION_DENIED",
                               f"Permission 'tpu.nodes.list' denied on '{NODE}'"),
                 K.PERMISSION, id="403-permission"),
    pytest.param(403, envelope(403, "PERMISSION_DENIED",
                               "Location us-east1-d is not found or access is unauthorized."),
                 K.PERMISSION, id="403-location-unauthorized"),
    pytest.param(404, envelope(404, "NOT_FOUND",
                               "Location us-east1-d is not found or access is unauthorized."),
                 K.PERMISSION, id="404-location-is-not-a-vanished-node"),
    pytest.param(401, envelope(401, "UNAUTHENTICATED",
                               "Request had invalid authentication credentials."),
                 K.PERMISSION, id="401-unauthenticated"),
    pytest.param(400, envelope(400, "INVALID_ARGUMENT", BAD_TYPE_MSG),
                 K.INVALID, id="400-unknown-accelerator"),
    pytest.param(400, envelope(400, "FAILED_PRECONDITION", BAD_STATE_MSG),
                 K.INVALID, id="400-failed-precondition"),
    pytest.param(400, envelope(400, "FAILED_PRECONDITION", RESERVED_MSG),
                 K.CAPACITY, id="400-reserved-capacity-message-wins"),
    pytest.param(500, envelope(500, "INTERNAL", "Internal error encountered."),
                 K.TRANSIENT, id="500-internal"),
    pytest.param(503, envelope(503, "UNAVAILABLE", "The service is currently unavailable."),
                 K.TRANSIENT, id="503-unavailable"),
    pytest.param(504, envelope(504, "DEADLINE_EXCEEDED", "Deadline exceeded"),
                 K.TRANSIENT, id="504-deadline"),
    pytest.param(501, envelope(501, "UNIMPLEMENTED", "Method not implemented"),
                 K.INVALID, id="501-unimplemented-is-permanent"),
    pytest.param(502, "<html><body><h1>502 Bad Gateway</h1></body></html>",
                 K.TRANSIENT, id="502-html"),
    pytest.param(404, "<!DOCTYPE html><title>Error 404 (Not Found)!!1</title>",
                 K.TRANSIENT, id="404-html-is-not-the-api"),
    pytest.param(409, "conflict", K.TRANSIENT, id="409-text-is-not-the-api"),
    pytest.param(429, "<html>Too Many Requests</html>", K.RATE_LIMITED, id="429-html"),
    pytest.param(401, {"error": "invalid_token", "error_description": "Invalid Credentials"},
                 K.PERMISSION, id="401-oauth-style"),
    pytest.param(403, "", K.PERMISSION, id="403-empty"),
    pytest.param(418, envelope(418, None, "teapot"), K.INVALID, id="418-unknown-4xx"),
    pytest.param(599, envelope(599, None, "odd"), K.TRANSIENT, id="599-unknown-5xx"),
    pytest.param(404, [envelope(404, "NOT_FOUND", "gone")], K.NOT_FOUND, id="list-wrapped"),
]  # fmt: skip


@pytest.mark.parametrize(("http_status", "body", "kind"), HTTP_CASES)
@pytest.mark.parametrize("encoding", ["text", "bytes", "parsed"])
def test_http_classification(http_status: int, body: Any, kind: ErrorKind, encoding: str) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    raw: object = {"text": text, "bytes": text.encode(), "parsed": body}[encoding]
    error = classify_http(http_status, raw, {}, method="GET", url="http://x/v2/" + NODE)
    assert error.kind is kind
    assert isinstance(error, ApiError)
    assert error.http_status == http_status
    assert error.method == "GET"
    assert error.message


OP_CASES = [
    pytest.param(8, CAPACITY_MSG, (), K.CAPACITY, id="8-no-more-capacity"),
    pytest.param(8, CAPACITY_QUEUE_MSG, (), K.CAPACITY, id="8-no-more-capacity-queue-variant"),
    pytest.param(8, RESERVED_MSG, (), K.CAPACITY, id="8-insufficient-reserved"),
    pytest.param(9, RESERVED_MSG, (), K.CAPACITY, id="9-insufficient-reserved"),
    pytest.param(8, QUOTA_MSG, (), K.QUOTA, id="8-quota-message"),
    pytest.param(8, "exhausted", (QUOTA_FAILURE,), K.QUOTA, id="8-quota-detail"),
    pytest.param(8, "Resource exhausted.", (), K.CAPACITY, id="8-plain-is-stockout"),
    pytest.param(3, BAD_STATE_MSG, (), K.INVALID, id="3-bad-state"),
    pytest.param(3, BAD_TYPE_MSG, (), K.INVALID, id="3-unknown-accelerator"),
    pytest.param(9, "precondition", (), K.INVALID, id="9-failed-precondition"),
    pytest.param(5, f"Resource '{NODE}' was not found", (), K.NOT_FOUND, id="5-not-found"),
    pytest.param(6, "already exists", (), K.ALREADY_EXISTS, id="6-already-exists"),
    pytest.param(7, "denied", (), K.PERMISSION, id="7-permission"),
    pytest.param(16, "unauthenticated", (), K.PERMISSION, id="16-unauthenticated"),
    pytest.param(10, "aborted", (), K.CONFLICT, id="10-aborted"),
    pytest.param(1, "cancelled", (), K.TRANSIENT, id="1-cancelled"),
    pytest.param(2, "unknown", (), K.TRANSIENT, id="2-unknown"),
    pytest.param(4, "deadline", (), K.TRANSIENT, id="4-deadline"),
    pytest.param(13, "internal error", (), K.TRANSIENT, id="13-internal"),
    pytest.param(14, "unavailable", (), K.TRANSIENT, id="14-unavailable"),
    pytest.param(12, "unimplemented", (), K.INVALID, id="12-unimplemented"),
    pytest.param(11, "out of range", (), K.INVALID, id="11-out-of-range"),
    pytest.param(99, "from the future", (), K.TRANSIENT, id="99-unknown-code"),
    pytest.param(None, "no code", (), K.TRANSIENT, id="missing-code"),
    pytest.param("8", CAPACITY_MSG, (), K.CAPACITY, id="code-as-string"),
    pytest.param("NOT_FOUND", "gone", (), K.NOT_FOUND, id="code-by-name"),
]  # fmt: skip


@pytest.mark.parametrize(("code", "message", "details", "kind"), OP_CASES)
def test_operation_error_classification(
    code: object, message: str, details: tuple[Any, ...], kind: ErrorKind
) -> None:
    error_json: dict[str, Any] = {"message": message, "details": list(details)}
    if code is not None:
        error_json["code"] = code
    error = classify_operation_error(error_json, operation="projects/p/operations/op-1")
    assert error.kind is kind
    assert error.operation == "projects/p/operations/op-1"
    assert error.http_status is None
    assert error.message == message


def test_capacity_error_keeps_message_code_and_subclass() -> None:
    error = classify_operation_error({"code": 8, "message": CAPACITY_MSG}, operation="op-9")
    assert isinstance(error, CapacityError)
    assert error.code == 8
    assert error.status == "RESOURCE_EXHAUSTED"
    assert "us-central1-b" in str(error)
    assert "op-9" in str(error)


def test_http_error_fields_and_subclasses() -> None:
    body = envelope(429, "RESOURCE_EXHAUSTED", QUOTA_MSG, QUOTA_FAILURE)
    error = classify_http(429, json.dumps(body), {"Retry-After": "12"}, method="POST", url="u")
    assert isinstance(error, QuotaError)
    assert error.status == "RESOURCE_EXHAUSTED"
    assert error.code == 8
    assert error.retry_after == 12.0
    assert error.details == (QUOTA_FAILURE,)
    assert str(error).startswith("quota: Quota 'TPUV4s")
    assert "POST u" in str(error)
    assert "HTTP 429" in str(error)
    assert isinstance(classify_http(404, envelope(404, "NOT_FOUND", "x")), NotFoundError)
    assert isinstance(classify_http(409, envelope(409, "ALREADY_EXISTS", "x")), AlreadyExistsError)


def test_error_body_snippet_is_bounded() -> None:
    error = classify_http(502, "<html>" + "x" * 10_000 + "</html>")
    assert error.kind is K.TRANSIENT
    assert len(error.message) < 400


@pytest.mark.parametrize(
    ("headers", "details", "expected"),
    [
        ({"Retry-After": "7"}, (), 7.0),
        ({"retry-after": "0.5"}, (), 0.5),
        ({"Retry-After": "soon"}, (), None),
        ({}, ({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2.5s"},), 2.5),
        (
            {"Retry-After": "3"},
            ({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "9s"},),
            3.0,
        ),
        ({}, (), None),
    ],
)
def test_retry_after_sources(
    headers: dict[str, str], details: tuple[Any, ...], expected: float | None
) -> None:
    body = envelope(429, "RESOURCE_EXHAUSTED", "slow down", *details)
    assert classify_http(429, body, headers).retry_after == expected


def test_retry_after_http_date() -> None:
    now = datetime(2025, 4, 10, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(later, now=now) == 30.0
    earlier = format_datetime(now - timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(earlier, now=now) == 0.0
    assert parse_retry_after("-5") == 0.0
    assert parse_retry_after(None) is None


def test_transport_errors_are_transient_except_bad_urls() -> None:
    for exc in (
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientConnectionError("reset"),
        aiohttp.ClientPayloadError("truncated"),
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError(),
    ):
        error = classify_transport(exc, method="GET", url="http://x")
        assert isinstance(error, TransientError), exc
        assert error.http_status is None
    assert classify_transport(aiohttp.InvalidURL("::"), method="GET", url="::").kind is K.INVALID
    assert "timed out" in classify_transport(TimeoutError(), method="GET", url="u").message


def test_malformed_response_is_classified_malformed() -> None:
    error = malformed_response(200, "<html>oops", method="GET", url="u")
    assert error.kind is K.MALFORMED
    assert "oops" in error.message


def test_refresh_errors() -> None:
    refresh_error: Any = google.auth.exceptions.RefreshError  # untyped in google-auth
    transport_error: Any = google.auth.exceptions.TransportError
    permanent = refresh_error("invalid_grant: Invalid JWT Signature.")
    assert classify_refresh_error(permanent).kind is K.PERMISSION
    retryable = refresh_error("server_error", retryable=True)
    assert classify_refresh_error(retryable).kind is K.TRANSIENT
    network = transport_error("connection refused")
    assert classify_refresh_error(network).kind is K.TRANSIENT


def test_subclasses_fix_their_kind() -> None:
    assert NotFoundError("gone").kind is K.NOT_FOUND
    assert OperationTimeout("slow", operation="op").kind is K.TRANSIENT
    assert isinstance(ApiError.of(K.CAPACITY, "none left"), CapacityError)
    with pytest.raises(TypeError):
        NotFoundError("x", kind=K.QUOTA)
    with pytest.raises(TypeError):
        ApiError("no kind")
