"""Time for the emulator: an injectable clock plus the RFC 3339 / Duration text formats.

Everything in the emulator's state that depends on time (operations finishing, nodes becoming
READY, queued resources timing out) reads `Clock.now()`, never `time.time()` directly, so tests
can drive the state with a `ManualClock` and no real sleeping. Times are epoch seconds (float).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that only moves when told to: for deterministic tests of the state."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def rfc3339(ts: float) -> str:
    """google.protobuf.Timestamp JSON form: UTC with a trailing Z."""
    text = datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")
    return text.replace("+00:00", "Z")


def parse_rfc3339(text: str) -> float:
    """Parse a Timestamp as clients send it (Z or offset, up to nanoseconds)."""
    match = re.fullmatch(
        r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", text.strip()
    )
    if not match:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    base, frac, zone = match.groups()
    zone = "+00:00" if zone == "Z" else zone
    dt = datetime.fromisoformat(base + zone)
    return dt.timestamp() + (int(frac.ljust(9, "0")) / 1e9 if frac else 0.0)


def parse_duration(text: str) -> float:
    """google.protobuf.Duration JSON form: decimal seconds with an `s` suffix, e.g. "3.5s"."""
    match = re.fullmatch(r"(-?\d+(?:\.\d{1,9})?)s", text.strip())
    if not match:
        raise ValueError(f"not a Duration: {text!r}")
    return float(match.group(1))
