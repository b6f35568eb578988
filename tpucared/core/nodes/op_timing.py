"""When to poll an operation first: learnt from the zone's own recent operations.

A create that meets a stockout fails when its operation ends, after a time the API alone
decides (2 s in the emulator; unknown for the real one, and likely to differ by zone and
type). Polling on a fixed schedule from 0.5 s (0.5, 1.5, 3.5 s) costs three
`operations.get` for a 2 s failure and sees it 1.5 s late. While a zone keeps failing creates
of a type, the next one most likely takes as long as the last few did: the first poll goes
a hair after their median, so one poll usually finds it done, at once. A create that does
find capacity takes longer than a failing one (the node boots), so polling at the failures'
median never sees it late. Too few failures yet (or none recent): the fixed schedule.

Deletes the same way, from the zone's recent deletes (all of them: a delete has one outcome
worth waiting for): in a preemption storm, a fixed schedule cost three polls per delete.

The runtime (runtime/nodes/operations.py) keeps the recent failing-create and delete
durations per (zone, accelerator type) and asks `first_create_poll` for either.
"""

from __future__ import annotations

from collections.abc import Sequence

RECENT = 5  # failing creates remembered per (zone, accelerator type)
MIN_SAMPLES = 2  # before the median is trusted
MARGIN = 1.05  # a hair after the median: most failures have ended by then
MIN_MARGIN_S = 0.05


def first_create_poll(recent_failures: Sequence[float], default: float, longest: float) -> float:
    """Seconds from the create's call to its first poll: `default` without enough history,
    else the recent failures' median plus a margin, never below `default` nor above
    `longest` (a poll interval: the list would see the node anyway)."""
    if len(recent_failures) < MIN_SAMPLES:
        return default
    ordered = sorted(recent_failures)
    middle = len(ordered) // 2
    typical = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return min(max(default, max(typical * MARGIN, typical + MIN_MARGIN_S)), longest)
