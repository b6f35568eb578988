"""The long-running Operation returned by every mutating TPU call, as a small value.

There is no `operations.wait` in v2: the client polls `GET /v2/{name}` until `done`
(`TpuClient.wait_operation`). proto3 JSON omits `done: false`, so a missing `done` means
"still running".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tpucared.gcp.errors import ApiError, classify_operation_error


@dataclass(frozen=True)
class Operation:
    name: str
    done: bool = False
    error: Mapping[str, Any] | None = None  # google.rpc.Status when it failed
    response: Mapping[str, Any] | None = None  # e.g. the Node for a create
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Operation:
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("operation without a name")
        error = data.get("error")
        response = data.get("response")
        metadata = data.get("metadata")
        return cls(
            name=name,
            done=bool(data.get("done") or False),
            error=error if isinstance(error, Mapping) else None,
            response=response if isinstance(response, Mapping) else None,
            metadata=metadata if isinstance(metadata, Mapping) else {},
        )

    @property
    def target(self) -> str | None:
        """The resource the operation acts on (metadata.target), e.g. the node's name."""
        value = self.metadata.get("target")
        return value if isinstance(value, str) else None

    @property
    def verb(self) -> str | None:
        value = self.metadata.get("verb")
        return value if isinstance(value, str) else None

    @property
    def duration_s(self) -> float | None:
        """How long it ran, by the API's own metadata (createTime to endTime), or None."""
        start, end = self.metadata.get("createTime"), self.metadata.get("endTime")
        if not isinstance(start, str) or not isinstance(end, str):
            return None
        try:
            seconds = (_instant(end) - _instant(start)).total_seconds()
        except ValueError:
            return None
        return seconds if seconds >= 0 else None

    @property
    def failed(self) -> bool:
        return self.done and self.error is not None

    def exception(self) -> ApiError | None:
        """The classified error of a finished, failed operation; None otherwise."""
        if not self.failed or self.error is None:
            return None
        return classify_operation_error(self.error, operation=self.name)


def _instant(text: str) -> datetime:
    """An RFC 3339 timestamp, with up to nanoseconds (Python reads microseconds)."""
    head, dot, frac = text.rstrip("Z").partition(".")
    zone = "+00:00" if text.endswith("Z") else ""
    if dot and frac:
        digits = frac
        for sign in "+-":
            if sign in frac:
                digits, _, offset = frac.partition(sign)
                zone = sign + offset
        return datetime.fromisoformat(f"{head}.{digits[:6].ljust(6, '0')}{zone}")
    return datetime.fromisoformat(head + zone)
