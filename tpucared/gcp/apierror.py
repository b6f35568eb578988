"""`ApiError`: a classified failure of one Google API call, one subclass per `ErrorKind`.

What every Google adapter of tpucared raises (and nothing else): the Cloud port's
`CloudError` with what Google's answer said. errors.py decides the kind (the one
classification, for the TPU API and Compute Engine alike) and re-exports these, so callers
import them from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from tpucared.core.model.specs import ErrorKind
from tpucared.ports.cloud import CloudError


class ApiError(CloudError):
    """A classified failure of one Google API call (or of the operation it started): the Cloud
    port's `CloudError` (tpucared/ports/cloud.py), with what Google's answer said.

    `kind` is what callers decide on. The rest is for logs and records: `http_status` (None
    for transport and operation errors), `status` (canonical name, e.g. RESOURCE_EXHAUSTED),
    `code` (google.rpc.Code number), `retry_after` (seconds the server asked us to wait),
    `method`/`url` of the request, `operation` (name, for operation errors), `details`
    (the envelope's details list) and `attempts` (requests made before giving up).

    Construct with `ApiError.of(kind, ...)` to get the subclass for the kind, so callers may
    `except NotFoundError`. A subclass can also be built directly: `NotFoundError("gone")`.
    """

    default_kind: ClassVar[ErrorKind | None] = None

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind | None = None,
        http_status: int | None = None,
        status: str | None = None,
        code: int | None = None,
        retry_after: float | None = None,
        method: str | None = None,
        url: str | None = None,
        operation: str | None = None,
        details: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        resolved = kind if kind is not None else self.default_kind
        if resolved is None:
            raise TypeError("ApiError needs a kind")
        if self.default_kind is not None and resolved is not self.default_kind:
            raise TypeError(f"{type(self).__name__} cannot carry kind {resolved}")
        super().__init__(message)
        self.kind: ErrorKind = resolved
        self.message = message
        self.http_status = http_status
        self.status = status
        self.code = code
        self.retry_after = retry_after
        self.method = method
        self.url = url
        self.operation = operation
        self.details: tuple[Mapping[str, Any], ...] = tuple(details)
        self.attempts = 1

    @staticmethod
    def of(kind: ErrorKind, message: str, **fields: Any) -> ApiError:
        """The error of the subclass that belongs to `kind`."""
        return _CLASSES[kind](message, kind=kind, **fields)

    def __str__(self) -> str:
        where = []
        if self.method or self.url:
            where.append(" ".join(p for p in (self.method, self.url) if p))
        if self.operation:
            where.append(f"operation {self.operation}")
        if self.http_status is not None:
            where.append(f"HTTP {self.http_status}")
        if self.status:
            where.append(self.status)
        suffix = f" ({', '.join(where)})" if where else ""
        return f"{self.kind.value}: {self.message}{suffix}"


class CapacityError(ApiError):
    default_kind = ErrorKind.CAPACITY


class QuotaError(ApiError):
    default_kind = ErrorKind.QUOTA


class RateLimitedError(ApiError):
    default_kind = ErrorKind.RATE_LIMITED


class PermissionDeniedError(ApiError):
    default_kind = ErrorKind.PERMISSION


class NotFoundError(ApiError):
    default_kind = ErrorKind.NOT_FOUND


class AlreadyExistsError(ApiError):
    default_kind = ErrorKind.ALREADY_EXISTS


class ConflictError(ApiError):
    default_kind = ErrorKind.CONFLICT


class InvalidRequestError(ApiError):
    default_kind = ErrorKind.INVALID


class TransientError(ApiError):
    default_kind = ErrorKind.TRANSIENT


class MalformedResponseError(ApiError):
    default_kind = ErrorKind.MALFORMED


class OperationTimeout(TransientError):
    """`wait_operation` gave up waiting; the operation may still finish. Poll it later."""


_CLASSES: dict[ErrorKind, type[ApiError]] = {
    ErrorKind.CAPACITY: CapacityError,
    ErrorKind.QUOTA: QuotaError,
    ErrorKind.RATE_LIMITED: RateLimitedError,
    ErrorKind.PERMISSION: PermissionDeniedError,
    ErrorKind.NOT_FOUND: NotFoundError,
    ErrorKind.ALREADY_EXISTS: AlreadyExistsError,
    ErrorKind.CONFLICT: ConflictError,
    ErrorKind.INVALID: InvalidRequestError,
    ErrorKind.TRANSIENT: TransientError,
    ErrorKind.MALFORMED: MalformedResponseError,
}
