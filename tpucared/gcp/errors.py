"""Every failure of a Google API (the TPU API, Compute Engine), classified into an
`ErrorKind`, in this one module.

The clients raise nothing but `ApiError` (or a subclass per kind, apierror.py); the planner
decides on `error.kind` alone. Four entry points feed one decision function, `_decide`:

- `classify_http`: a non-2xx response (Google error envelope, AIP-193, or Compute Engine's
  `{"error": {"code", "message", "errors": [{"reason", "message", "domain"}]}}`).
- `classify_operation_error`: the `error` Status of a finished long-running Operation.
- `classify_compute_operation`: the `error.errors[{code, message}]` of a finished Compute
  Engine Operation, with its `httpErrorStatusCode`.
- `classify_transport` / `classify_refresh_error` / `malformed_response`: no usable answer.

Decisions, in precedence order (see `_decide`; the field notes hold the real message texts):

1. A capacity message wins over any code: "There is no more capacity in the zone ...",
   "Insufficient reserved capacity ..." (seen with code 8 and 9) -> CAPACITY.
2. "Location Z is not found or access is unauthorized" (TPU API), "The resource
   'projects/P/zones/Z' was not found" (Compute Engine) -> PERMISSION, never NOT_FOUND: a
   NOT_FOUND for a node means "it vanished" to the planner, and a wrong or forbidden zone
   must not look like that.
2b. A Compute Engine error code or reason we know (`COMPUTE_CODES`; operation errors spell
   them UPPER_SNAKE, HTTP errors camelCase; docs/research/compute-engine.md §3 holds the
   sources): ZONE_RESOURCE_POOL_EXHAUSTED(_WITH_DETAILS) -> CAPACITY, QUOTA_EXCEEDED /
   quotaExceeded -> QUOTA, RESOURCE_OPERATION_RATE_EXCEEDED / rateLimitExceeded ->
   RATE_LIMITED (a 403, which would otherwise read as PERMISSION), alreadyExists ->
   ALREADY_EXISTS, notFound -> NOT_FOUND, a resource not ready or in use -> CONFLICT.
3. RESOURCE_EXHAUSTED: an ErrorInfo reason RATE_LIMIT_EXCEEDED or a per-minute/per-second
   limit -> RATE_LIMITED (API request rate quotas are worded "Quota exceeded ... per
   minute"); a google.rpc.QuotaFailure detail or a "Quota ... exhausted/exceeded" message ->
   QUOTA; otherwise a 429 response -> RATE_LIMITED and a failed operation (code 8) ->
   CAPACITY, because an asynchronous create that ran out of resources is a stockout.
4. "unable to queue the operation" -> CONFLICT (another operation on the node is in flight).
5. Otherwise by canonical status: INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE,
   UNIMPLEMENTED -> INVALID; NOT_FOUND; ALREADY_EXISTS; ABORTED -> CONFLICT;
   PERMISSION_DENIED, UNAUTHENTICATED -> PERMISSION (the client refreshes the token once
   before surfacing a 401); CANCELLED, UNKNOWN, DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE,
   DATA_LOSS -> TRANSIENT.

Only a Google error envelope is trusted to say NOT_FOUND, ALREADY_EXISTS or INVALID: those
drive irreversible decisions (forget a node, adopt a node). An HTML 404 from a proxy or a
load balancer says nothing about our node, so an error response without an envelope is
TRANSIENT unless its HTTP status is 401/403 (PERMISSION) or 429 (RATE_LIMITED). Timeouts,
connection resets, dropped connections and unparseable 2xx bodies are TRANSIENT too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import aiohttp
import google.auth.exceptions

from tpucared.core.model.retry import retry_after_seconds
from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.apierror import (
    AlreadyExistsError,
    ApiError,
    CapacityError,
    ConflictError,
    InvalidRequestError,
    MalformedResponseError,
    NotFoundError,
    OperationTimeout,
    PermissionDeniedError,
    QuotaError,
    RateLimitedError,
    TransientError,
)

__all__ = [
    "AlreadyExistsError",
    "ApiError",
    "CapacityError",
    "ConflictError",
    "InvalidRequestError",
    "MalformedResponseError",
    "NotFoundError",
    "OperationTimeout",
    "PermissionDeniedError",
    "QuotaError",
    "RateLimitedError",
    "TransientError",
    "classify_compute_operation",
    "classify_http",
    "classify_operation_error",
    "classify_refresh_error",
    "classify_transport",
    "malformed_response",
    "parse_retry_after",
]

# google.rpc.Code by number (the order is the numbering).
GRPC_CODES: tuple[str, ...] = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)

# Canonical status of an HTTP status when the body does not name one (AIP-193 mapping).
_HTTP_STATUS: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

# Status -> kind when no message or detail says more (rule 5 of the module docstring).
_STATUS_KIND: dict[str, ErrorKind] = {
    "OK": ErrorKind.TRANSIENT,  # an error that claims OK is nonsense; try again
    "CANCELLED": ErrorKind.TRANSIENT,
    "UNKNOWN": ErrorKind.TRANSIENT,
    "INVALID_ARGUMENT": ErrorKind.INVALID,
    "DEADLINE_EXCEEDED": ErrorKind.TRANSIENT,
    "NOT_FOUND": ErrorKind.NOT_FOUND,
    "ALREADY_EXISTS": ErrorKind.ALREADY_EXISTS,
    "PERMISSION_DENIED": ErrorKind.PERMISSION,
    "FAILED_PRECONDITION": ErrorKind.INVALID,  # e.g. "update is not supported while PREEMPTED"
    "ABORTED": ErrorKind.CONFLICT,
    "OUT_OF_RANGE": ErrorKind.INVALID,
    "UNIMPLEMENTED": ErrorKind.INVALID,  # permanent: retrying will not implement it
    "INTERNAL": ErrorKind.TRANSIENT,
    "UNAVAILABLE": ErrorKind.TRANSIENT,
    "DATA_LOSS": ErrorKind.TRANSIENT,
    "UNAUTHENTICATED": ErrorKind.PERMISSION,
}

_CAPACITY_RE = re.compile(
    r"no more capacity|insufficient (?:reserved )?capacity|does not have enough resources"
    r"|resource[ _]pool[ _]exhausted",
    re.IGNORECASE,
)
_LOCATION_RE = re.compile(
    r"location \S+ is not found or access is unauthorized"
    r"|the resource 'projects/[^/']+(?:/(?:zones|regions)/[^/']+)?' was not found",
    re.IGNORECASE,
)
_RATE_RE = re.compile(r"\bper (?:user )?(?:minute|second|100 seconds)\b", re.IGNORECASE)
_QUOTA_RE = re.compile(r"\bquota\b.*\b(?:exhausted|exceeded)\b", re.IGNORECASE | re.DOTALL)
_CONFLICT_RE = re.compile(r"unable to queue the operation", re.IGNORECASE)
_ALREADY_RE = re.compile(r"already exists", re.IGNORECASE)

_QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"

K = ErrorKind
# Compute Engine's error codes (operation errors) and reasons (HTTP errors), rule 2b.
COMPUTE_CODES: dict[str, ErrorKind] = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": K.CAPACITY,
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": K.CAPACITY,
    "REGION_RESOURCE_POOL_EXHAUSTED": K.CAPACITY,
    "RESOURCE_POOL_EXHAUSTED": K.CAPACITY,
    "insufficientCapacity": K.CAPACITY,
    "QUOTA_EXCEEDED": K.QUOTA,
    "quotaExceeded": K.QUOTA,
    "RESOURCE_OPERATION_RATE_EXCEEDED": K.RATE_LIMITED,
    "rateLimitExceeded": K.RATE_LIMITED,
    "userRateLimitExceeded": K.RATE_LIMITED,
    "RESOURCE_ALREADY_EXISTS": K.ALREADY_EXISTS,
    "alreadyExists": K.ALREADY_EXISTS,
    "RESOURCE_NOT_FOUND": K.NOT_FOUND,
    "notFound": K.NOT_FOUND,
    "RESOURCE_NOT_READY": K.CONFLICT,  # e.g. still STOPPING: another operation in flight
    "resourceNotReady": K.CONFLICT,
    "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE": K.CONFLICT,
    "resourceInUseByAnotherResource": K.CONFLICT,
}

# Error bodies can be whole HTML pages; keep enough to recognise one in a log line.
_SNIPPET = 300


# ---------------------------------------------------------------------------------------------
# The decision.


def _detail_types(details: Sequence[Mapping[str, Any]]) -> set[str]:
    return {str(d.get("@type", "")) for d in details}


def _error_info_reasons(details: Sequence[Mapping[str, Any]]) -> set[str]:
    return {str(d.get("reason", "")) for d in details if d.get("@type") == _ERROR_INFO}


def _decide(
    status: str,
    message: str,
    details: Sequence[Mapping[str, Any]],
    *,
    from_operation: bool,
    codes: Sequence[str] = (),
) -> ErrorKind:
    """`codes`: Compute Engine's error codes or reasons, first one first."""
    if _CAPACITY_RE.search(message):
        return ErrorKind.CAPACITY
    if _LOCATION_RE.search(message):
        return ErrorKind.PERMISSION
    for code in codes:
        if code in COMPUTE_CODES:
            return COMPUTE_CODES[code]
    if status == "RESOURCE_EXHAUSTED":
        if "RATE_LIMIT_EXCEEDED" in _error_info_reasons(details) or _RATE_RE.search(message):
            return ErrorKind.RATE_LIMITED
        if _QUOTA_FAILURE in _detail_types(details) or _QUOTA_RE.search(message):
            return ErrorKind.QUOTA
        return ErrorKind.CAPACITY if from_operation else ErrorKind.RATE_LIMITED
    if _CONFLICT_RE.search(message):
        return ErrorKind.CONFLICT
    return _STATUS_KIND.get(status, ErrorKind.TRANSIENT)


def _dict_list(value: object) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [d for d in value if isinstance(d, Mapping)]


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _SNIPPET else flat[:_SNIPPET] + "..."


def _parse_body(body: object) -> object:
    if isinstance(body, bytes | bytearray):
        body = bytes(body).decode("utf-8", errors="replace")
    if isinstance(body, str):
        try:
            return json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: JSON nested past reason
            return body
    return body


def _envelope(parsed: object) -> Mapping[str, Any] | None:
    """The `error` object of a Google error envelope, or None if `parsed` is not one."""
    if isinstance(parsed, list) and len(parsed) == 1:
        parsed = parsed[0]  # some front ends wrap the envelope in a one-element list
    if isinstance(parsed, Mapping):
        error = parsed.get("error")
        if isinstance(error, Mapping):
            return error
    return None


def _duration_seconds(value: object) -> float | None:
    """A google.protobuf.Duration in JSON form ("1.5s") or as {seconds, nanos}."""
    try:
        if isinstance(value, str) and value.endswith("s"):
            return max(0.0, float(value[:-1]))
        if isinstance(value, Mapping):
            return max(0.0, float(value.get("seconds", 0)) + float(value.get("nanos", 0)) / 1e9)
    except ValueError:
        return None
    return None


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Retry-After as seconds (core/model/retry.py reads it), against the clock by default."""
    return retry_after_seconds(value, now or datetime.now(UTC))


def _retry_delay(
    headers: Mapping[str, str] | None,
    details: Sequence[Mapping[str, Any]],
    now: datetime | None,
) -> float | None:
    header = None
    if headers is not None:
        # aiohttp's CIMultiDict is case-insensitive; a plain dict from a test may not be.
        header = headers.get("Retry-After") or headers.get("retry-after")
    delay = parse_retry_after(header, now=now)
    if delay is not None:
        return delay
    for d in details:
        if d.get("@type") == _RETRY_INFO:
            return _duration_seconds(d.get("retryDelay"))
    return None


def _reasons(
    errors: Sequence[Mapping[str, Any]], details: Sequence[Mapping[str, Any]]
) -> list[str]:
    """An envelope's reasons: Compute Engine's `errors[].reason`, then ErrorInfo's."""
    codes = [str(e.get("reason")) for e in errors if e.get("reason")]
    return codes + sorted(_error_info_reasons(details))


def _foreign_message(parsed: object) -> str:
    """What an error answer that is not the API's says (an OAuth error, a proxy's page)."""
    if isinstance(parsed, Mapping) and "error_description" in parsed:
        return f"{parsed.get('error')}: {parsed.get('error_description')}"
    if isinstance(parsed, str):
        return _snippet(parsed)
    return _snippet(json.dumps(parsed)) if parsed is not None else ""


def classify_http(
    http_status: int,
    body: object,
    headers: Mapping[str, str] | None = None,
    *,
    method: str | None = None,
    url: str | None = None,
    now: datetime | None = None,
) -> ApiError:
    """The ApiError for a non-2xx response. `body` may be raw text/bytes or parsed JSON."""
    parsed = _parse_body(body)
    envelope = _envelope(parsed)
    if envelope is None:
        # Not the API talking (a proxy, a load balancer, an OAuth error): trust only the
        # statuses that mean the same whoever says them.
        message = _foreign_message(parsed) or f"HTTP {http_status}"
        if http_status in (401, 403):
            kind = ErrorKind.PERMISSION
        elif http_status == 429:
            kind = ErrorKind.RATE_LIMITED
        else:
            kind = ErrorKind.TRANSIENT
        return ApiError.of(
            kind,
            message,
            http_status=http_status,
            status=_HTTP_STATUS.get(http_status),
            retry_after=_retry_delay(headers, (), now),
            method=method,
            url=url,
        )

    details = _dict_list(envelope.get("details"))
    errors = _dict_list(envelope.get("errors"))  # Compute Engine's [{reason, message, domain}]
    codes = _reasons(errors, details)
    message = str(envelope.get("message") or f"HTTP {http_status}")
    status = envelope.get("status")
    if not isinstance(status, str) or not status:
        status = _HTTP_STATUS.get(
            http_status, "INTERNAL" if http_status >= 500 else "INVALID_ARGUMENT"
        )
        if http_status == 409 and _ALREADY_RE.search(message):
            status = "ALREADY_EXISTS"  # a 409 without a status: the message must decide
    kind = _decide(status, message, details, from_operation=False, codes=codes)
    return ApiError.of(
        kind,
        message,
        http_status=http_status,
        status=status,
        code=GRPC_CODES.index(status) if status in GRPC_CODES else None,
        retry_after=_retry_delay(headers, details, now),
        method=method,
        url=url,
        details=[*details, *errors],
    )


def classify_operation_error(error: Mapping[str, Any], *, operation: str | None = None) -> ApiError:
    """The ApiError for the `error` Status of a finished Operation (`{code, message, details}`)."""
    raw_code = error.get("code")
    code: int | None
    try:
        code = int(raw_code) if raw_code is not None else None
    except (TypeError, ValueError):
        code = None
    if code is not None and 0 <= code < len(GRPC_CODES):
        status = GRPC_CODES[code]
    elif isinstance(raw_code, str) and raw_code in GRPC_CODES:
        status, code = raw_code, GRPC_CODES.index(raw_code)  # a code sent by name
    else:
        status = "UNKNOWN"
    details = _dict_list(error.get("details"))
    message = str(error.get("message") or f"operation failed with code {raw_code}")
    kind = _decide(status, message, details, from_operation=True)
    return ApiError.of(
        kind,
        message,
        status=status,
        code=code,
        retry_after=_retry_delay(None, details, None),
        operation=operation,
        details=details,
    )


def _http_number(value: object) -> int | None:
    """An HTTP status as an operation carries it (int32: a number, or digits in a string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def classify_compute_operation(
    error: Mapping[str, Any],
    *,
    http_status: object = None,
    http_message: object = None,
    operation: str | None = None,
) -> ApiError:
    """The ApiError of a finished, failed Compute Engine Operation: its `error`
    (`{errors: [{code, message, errorDetails}]}`) and `httpErrorStatusCode` /
    `httpErrorMessage` (e.g. 503 "SERVICE UNAVAILABLE" for a stockout). The codes decide
    (rule 2b); without a known one, the HTTP status does, as for a failed TPU operation."""
    errors = _dict_list(error.get("errors"))
    codes = [str(e.get("code")) for e in errors if e.get("code")]
    texts = [str(e.get("message")) for e in errors if e.get("message")]
    message = "; ".join(texts) or str(http_message or "") or f"operation failed: {codes}"
    number = _http_number(http_status)
    status = _HTTP_STATUS.get(number, "UNKNOWN") if number is not None else "UNKNOWN"
    kind = _decide(status, message, (), from_operation=True, codes=codes)
    return ApiError.of(
        kind,
        message,
        http_status=number,
        status=codes[0] if codes else status,
        operation=operation,
        details=errors,
    )


def classify_transport(exc: BaseException, *, method: str, url: str) -> ApiError:
    """No response at all: a timeout, a refused/reset/dropped connection, a bad URL."""
    if isinstance(exc, aiohttp.InvalidURL):
        # A configuration error (the endpoint), not something that heals by itself.
        return ApiError.of(ErrorKind.INVALID, f"invalid URL: {exc}", method=method, url=url)
    if isinstance(exc, TimeoutError):
        message = "request timed out"
    else:
        message = f"{type(exc).__name__}: {exc}".rstrip(": ")
    return ApiError.of(ErrorKind.TRANSIENT, message, method=method, url=url)


def malformed_response(
    http_status: int, text: str, *, method: str, url: str, why: str = "not a JSON object"
) -> ApiError:
    """A 2xx (or a redirect) whose body we cannot use: a broken proxy, a truncated answer, an
    error envelope sent with 200, JSON nested past reason. Classified MALFORMED, carrying an
    excerpt of what came back; the client retries it a few times like a transient error."""
    return ApiError.of(
        ErrorKind.MALFORMED,
        f"malformed response ({why}): {_snippet(text)!r}",
        http_status=http_status,
        method=method,
        url=url,
    )


def classify_refresh_error(exc: Exception) -> ApiError:
    """A failed OAuth token refresh. google-auth marks the transient ones `retryable`."""
    if isinstance(exc, google.auth.exceptions.TransportError):
        kind = ErrorKind.TRANSIENT
    elif isinstance(exc, google.auth.exceptions.RefreshError):
        kind = ErrorKind.TRANSIENT if getattr(exc, "retryable", False) else ErrorKind.PERMISSION
    else:
        kind = ErrorKind.PERMISSION
    return ApiError.of(kind, f"token refresh failed: {_snippet(str(exc))}")
