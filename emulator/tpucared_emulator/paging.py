"""List pagination (AIP-158): sorted name indexes and opaque page tokens.

A page token names the last item already returned, not an offset, so items created or deleted
between two page requests neither repeat nor shift others out of the listing. Each listed
collection keeps a `SortedNames` index, so one page costs O(log n + page size), not O(n):
the benchmark lists 10,000 nodes.
"""

from __future__ import annotations

import base64
import bisect
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tpucared_emulator.errors import ApiError, invalid_argument


@dataclass(frozen=True)
class Page:
    """One page of a list response: rendered items and the token of the next page, if any."""

    items: list[dict[str, Any]]
    next_page_token: str | None


class SortedNames:
    """A sorted set of names with cheap 'the next k after x' queries."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._names = sorted(set(names))

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        i = bisect.bisect_left(self._names, name)
        return i < len(self._names) and self._names[i] == name

    def add(self, name: str) -> None:
        i = bisect.bisect_left(self._names, name)
        if i == len(self._names) or self._names[i] != name:
            self._names.insert(i, name)

    def discard(self, name: str) -> None:
        i = bisect.bisect_left(self._names, name)
        if i < len(self._names) and self._names[i] == name:
            del self._names[i]

    def after(self, last: str | None, limit: int) -> tuple[list[str], bool]:
        """Up to `limit` names strictly after `last`, and whether more follow."""
        start = 0 if last is None else bisect.bisect_right(self._names, last)
        chunk = self._names[start : start + limit]
        return chunk, start + limit < len(self._names)


def page_size(raw: str | None, default: int, maximum: int) -> int:
    """pageSize as the API reads it: absent or 0 means the default, above the max is clamped,
    negative or non-numeric is INVALID_ARGUMENT."""
    if raw is None or raw == "":
        return default
    try:
        size = int(raw)
    except ValueError:
        raise invalid_argument(
            f"Invalid value at 'page_size' (TYPE_INT32), \"{raw}\"", field="page_size"
        ) from None
    if size < 0:
        raise invalid_argument("page_size must not be negative", field="page_size")
    return min(size or default, maximum)


def encode_token(scope: str, last: str) -> str:
    blob = json.dumps({"s": scope, "l": last}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(blob).decode().rstrip("=")


def decode_token(token: str | None, scope: str) -> str | None:
    """The last name of the previous page, or None for the first page. A token from another
    collection or a mangled one is INVALID_ARGUMENT, as in the real API."""
    if not token:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if data["s"] != scope or not isinstance(data["l"], str):
            raise ValueError("token of another collection")
        last: str = data["l"]
    except (ValueError, KeyError, TypeError):
        raise _bad_token() from None
    return last


def _bad_token() -> ApiError:
    return invalid_argument("The provided page token is invalid.", field="page_token")
