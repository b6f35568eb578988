"""Reading one field of a listed Google resource: the shared, strict readers.

Both adapters (tpu/convert.py, compute/convert.py) read API JSON into core observations with
these. Tolerant of what an API leaves out (proto3 JSON omits defaults), strict about a field
with the wrong type: that raises `MalformedResource` (a ValueError), and the caller makes the
whole zone unknown for the tick, never empty, because a node read wrong could look like
"not ours" or "gone".
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


class MalformedResource(ValueError):
    """A listed resource whose fields do not have the documented types."""


def as_int(value: object) -> int | None:
    """An integer sent as a number or as digits (int64 fields are JSON strings); None else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def raw_excerpt(value: object, limit: int = 80) -> str:
    """What the API sent, short enough for a notice or a log line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_time(value: object) -> datetime | None:
    """RFC 3339 (with Z, offsets, up to nanoseconds) -> aware UTC datetime; None if absent."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)  # the APIs always send UTC
    return parsed.astimezone(UTC)


def str_map(value: object, what: str) -> dict[str, str]:
    """A map<string, string> field: absent is empty; anything else but strings is refused
    (labels sent as a list once made every node look unlabelled, so "not ours")."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise MalformedResource(f"{what}: not a map of strings: {raw_excerpt(value)}")
    return dict(value)


def optional_str(data: Mapping[str, Any], key: str, what: str) -> str | None:
    """A string field (an int64 sent as a number counts); absent or empty is None."""
    value = data.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise MalformedResource(f"{what}: {key} is not a string: {raw_excerpt(value)}")
    return str(value)
