"""Human durations: "30s", "10m", "1h30m" <-> timedelta.

The config file writes every duration this way (tpucared.config parses them with `parse`),
and the planner writes ages and timeouts into its reasons with `fmt`, so what a person reads
in a plan can be pasted back into the config.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX = timedelta(days=365)


def parse(text: str) -> timedelta:
    """Parse "500ms", "30s", "10m", "24h", "2d", "1h30m" (units may combine). ValueError if
    the text is anything else, including a bare number, or longer than a year."""
    stripped = text.strip()
    if not stripped or _PART.sub("", stripped):
        raise ValueError(f"not a duration: {text!r}")
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(stripped))
    if not math.isfinite(seconds) or seconds > MAX.total_seconds():
        raise ValueError(f"duration longer than a year: {text!r}")
    return timedelta(seconds=seconds)


def fmt(d: timedelta) -> str:
    """A short duration that `parse` reads back: 45s, 12m, 12m30s, 1h05m, 2d3h (whole seconds;
    below one second: milliseconds)."""
    if d < timedelta(0):
        return f"-{fmt(-d)}"
    if d < timedelta(seconds=1) and d:
        return f"{round(d.total_seconds() * 1000)}ms"
    total = int(d.total_seconds())
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{seconds:02d}s" if seconds else f"{minutes}m"
    return f"{seconds}s"
