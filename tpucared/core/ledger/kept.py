"""A slot's closed days: which days of its ledger can no longer change, and their sums.

The maintenance task (runtime/ledger_days.py) keeps each slot's closed days in the store
(`ledger_days`), so `tpucared goodput` sums those and tiles only the open tail (the ledger of
the whole history was a minute at 10,000 slots x 30 days; docs/benchmarks.md).

Which days are final. A midnight passing closes nothing by itself: the tiling
(tiling.py) reads the slot's records as they are now, and later records reclassify seconds
already past. The records that can still change, and what they reach back to:
- an attempt still running: its loss would turn the time since its last checkpoint (or its
  start, before a first step is told) into wasted progress, its first step told later turns
  its start into PROGRAM_STARTUP: it reaches back to the attempt's start;
- an attempt (ended or not) on a node whose loss is not recorded yet (no `dead_at`, not
  gone): that loss would make its end a loss's, and its end's checkpoint wasted progress:
  back to the attempt's start;
- the slot becoming done, or its fleet going down (or back up): turns the bring-up time after
  its latest disruption into idle (tiling.py applies `done` from the latest disruption on),
  and, after a failure, holds it from the latest attempt's end: back to the latest disruption
  (an attempt's end or a node's loss), or the slot's first create when it has none;
- a hold (`held_since`): lifting it reclassifies the held time: back to `held_since`;
- a loss recorded late, or at the cloud's own time of it: back by the time it takes the
  daemon to notice, bounded here by `GRACE`.
So a slot's days are final up to `final_until`: the UTC midnight at or before the earliest of
`now - GRACE` and the instants above. Everything before it is fixed by records that no longer
change; everything after is tiled on each read. Not covered: a fleet whose stored spec gains
or loses its workload (productive then means a READY node instead of a running attempt): the
kept days keep the classification of when they were kept.

What is kept per day: seconds in integer microseconds per (category, sub-phase, loss cause),
so sums are exact (cost.py `summarize` sums microseconds too: kept days plus the tail equal a
full recompute to the last bit), and the steps lost of each wasted-progress interval on the
day it begins (an interval crossing a kept boundary is counted once, on its first day; the
tail's clip at the boundary drops its steps: `tiling.clipped(keep_steps=False)`). Pure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, timedelta

from tpucared.core.ledger.categories import Category, Interval, Phase, SlotHistory
from tpucared.core.model.causes import LossCause

GRACE = timedelta(hours=1)
DAY = timedelta(days=1)
_US = timedelta(microseconds=1)

# What one slot's kept days sum to: (category, phase, cause) -> (microseconds, steps lost).
KeptKey = tuple[Category, Phase | None, LossCause | None]
KeptSums = Mapping[KeptKey, tuple[int, int]]
DayKey = tuple[date, Category, Phase | None, LossCause | None]


def midnight(at: datetime) -> datetime:
    """The UTC midnight at or before `at`."""
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def microseconds(start: datetime, end: datetime) -> int:
    return (end - start) // _US


def final_until(history: SlotHistory, now: datetime, grace: timedelta = GRACE) -> datetime:
    """The midnight before which the slot's ledger can no longer change (module docstring)."""
    limit = now - grace
    alive = {n.id for n in history.nodes if n.dead_at is None and n.gone_at is None}
    latest: datetime | None = None
    for attempt in history.attempts:
        if attempt.ended_at is None or attempt.incarnation_id in alive:
            limit = min(limit, attempt.started_at)
        if attempt.ended_at is not None:
            latest = attempt.ended_at if latest is None else max(latest, attempt.ended_at)
    for node in history.nodes:
        lost = node.lost_at
        if lost is not None:
            latest = lost if latest is None else max(latest, lost)
    if latest is None:
        latest = history.first
    if latest is not None:
        limit = min(limit, latest)
    if history.held_since is not None:
        limit = min(limit, history.held_since)
    return midnight(limit)


def day_sums(
    intervals: Iterable[Interval], start: datetime, end: datetime
) -> dict[DayKey, list[int]]:
    """The intervals' part in [start, end), cut at UTC midnights and summed per day, category,
    phase and cause: [microseconds, steps lost]. An interval's steps go to the day it begins
    on, when it begins in [start, end)."""
    out: dict[DayKey, list[int]] = defaultdict(lambda: [0, 0])
    for i in intervals:
        lo, hi = max(i.start, start), min(i.end, end)
        if i.steps and start <= i.start < end:
            out[(midnight(i.start).date(), i.category, i.phase, i.cause)][1] += i.steps
        while lo < hi:
            cut = min(midnight(lo) + DAY, hi)
            out[(midnight(lo).date(), i.category, i.phase, i.cause)][0] += microseconds(lo, cut)
            lo = cut
    return dict(out)


def totals(days: Iterable[tuple[DayKey, int, int]]) -> dict[KeptKey, tuple[int, int]]:
    """Kept days summed per (category, phase, cause): what `summarize` adds to the tail."""
    out: dict[KeptKey, list[int]] = defaultdict(lambda: [0, 0])
    for (_, category, phase, cause), us, steps in days:
        acc = out[(category, phase, cause)]
        acc[0] += us
        acc[1] += steps
    return {k: (v[0], v[1]) for k, v in out.items()}
