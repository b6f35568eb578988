"""Quiet ticks: when a tick may plan on the previous lists instead of listing again.

The reconciler (runtime/reconciler.py) asks before it observes. A tick is quiet when the loop
woke it only for something no list could show (runtime/loop.py: a create backoff's end, or
creates that failed for lack of capacity: no node comes of a failed create). Such a tick plans
on the previous lists when they covered the same zones, all succeeded, and are younger than
the poll interval; otherwise it lists. A create is idempotent (a node that exists anyway is
adopted), and the poll still lists every interval, so at worst a quiet tick sees news one
poll later than a listing one. In a capacity hunt it saves both lists of a cycle
(docs/benchmarks.md, "the hunting cycle trimmed").
"""

from __future__ import annotations

from collections.abc import Collection

from tpucared.core.model.observed import ZoneObservation


def may_plan_on_last_lists(
    *,
    quiet: bool,
    zones: object,
    last_zones: object | None,
    last_lists: Collection[ZoneObservation],
    age_s: float,
    within_s: float,
) -> bool:
    """True when a tick listing `zones` may plan on the lists of `last_zones` taken `age_s`
    seconds ago (`last_zones` None: nothing was listed yet). Zones are compared by equality:
    whatever value the caller uses to say which zones a tick lists."""
    if not quiet or last_zones is None:
        return False
    if last_zones != zones or age_s >= within_s:
        return False
    return all(o.ok for o in last_lists)
