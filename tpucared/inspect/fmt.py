"""Text helpers for the CLI's human output: times, durations, truncation, tables.

Humans read these; scripts use the `--json` output instead, so the formats here may change.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

NONE = "-"  # an empty cell: easier to scan (and to `awk`) than a blank


def iso(at: datetime | None) -> str | None:
    """A timestamp for JSON: ISO 8601 in UTC with a `Z`, or None."""
    if at is None:
        return None
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def clock_time(at: datetime) -> str:
    """A timestamp for a human: `2025-06-01 12:00:05Z` (UTC, to the second)."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def duration(span: timedelta) -> str:
    """`45s`, `12m05s`, `3h07m`, `2d04h`: two units at most, enough to compare at a glance."""
    seconds = max(0, int(span.total_seconds()))
    minutes, s = divmod(seconds, 60)
    hours, m = divmod(minutes, 60)
    days, h = divmod(hours, 24)
    if days:
        return f"{days}d{h:02d}h"
    if hours:
        return f"{hours}h{m:02d}m"
    if minutes:
        return f"{minutes}m{s:02d}s"
    return f"{s}s"


def one_line(text: str) -> str:
    """Cloud error messages can span lines; a table row or an event line must not."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def truncate(text: str | None, width: int) -> str:
    if not text:
        return NONE
    flat = one_line(text)
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns separated by two spaces, without trailing blanks."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in (headers, *rows)
    ]
