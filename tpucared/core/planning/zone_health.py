"""Whether each (project, zone) can be listed, as pure rules over `ZoneHealth` records.

The reconciler hands every tick's observations to `next_zone_health` and writes the records
that changed (table `zone_health`) with the event to tell: the `UNREACHABLE_AFTER`th failed
list in a row tells `zone.unreachable` (once per outage), the first list that succeeds after
it `zone.reachable`. `unlistable_fleets` is what /healthz reports: fleets none of whose zones
can be listed.

A failing zone is asked less often: after its n-th failed list in a row (an error, a malformed
answer, no answer within its deadline) it is listed next `list_backoff(n, poll)` seconds after
that list started, doubling from one poll interval to a cap, and a good list resets it. The
cap is `PROBE_CAP_S` (30 s, client-go's reflector's) once the zone has listed well since the
daemon started, so a zone that answers again is seen within 30 s however long it failed; it
is `LIST_BACKOFF_CAP_S` (5 min) for a zone that has not, whose list nothing bounds but the
client's 200 pages. What pays for the 30 s cap (`list_terms`): a failing zone's list is a
probe, its requests not retried (the next probe, one beat away, is the retry: an answer that
fails at the first page costs one request), and every list of a zone stops at `page_bound`
pages, ten times its last good list's and ten more, not at 200 (an API handing out endless
page tokens costs 20 requests a probe, not 200). Two requests a minute is the floor of a
30 s promise: more than the 5-minute cap cost for a failure of one request a list (no answer,
a refused permission) past its first minutes. `listed_now` says whether a tick lists it.
docs/daemon.md "API requests" has the figures, before and after, per kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import ZoneHealth
from tpucared.core.model.specs import FleetSpec

# Consecutive ticks whose list of a zone failed before `zone.unreachable` is told (and before
# /healthz counts the zone as down).
UNREACHABLE_AFTER = 3

# The longest a failing zone waits for its next list when its lists are bounded (it listed
# well since the start, `page_bound`): a zone that comes back is seen within this. client-go's
# reflector caps its list backoff at 30 s too.
PROBE_CAP_S = 30.0
# The same for a zone that has not listed well since the start: its list may take the client's
# 200 pages, so it is asked as seldom as before (and seen within this).
LIST_BACKOFF_CAP_S = 300.0
# A list of a zone stops after this many times its last good list's pages, plus PAGES_SLACK:
# a zone does not grow tenfold between two lists; an endless chain of page tokens does.
PAGES_TIMES = 10
PAGES_SLACK = 10


def list_backoff(failures: int, poll_interval: float, *, bounded: bool = False) -> float:
    """Seconds from a failed list's start to the zone's next list, after `failures` in a row:
    one poll after the first (the usual pace), then doubling, to the cap (`PROBE_CAP_S` when
    `bounded`: the zone's last good list is known, else `LIST_BACKOFF_CAP_S`)."""
    if failures <= 0:
        return 0.0
    cap = PROBE_CAP_S if bounded else LIST_BACKOFF_CAP_S
    doubled = poll_interval * 2.0 ** min(failures - 1, 30)
    return min(max(cap, poll_interval), doubled)


def page_bound(last_good_pages: int | None) -> int | None:
    """The most pages one list of a zone may take, from its last good list's (the longest of
    its lists, e.g. nodes and queued resources); None: not known, the client's own bound."""
    if last_good_pages is None:
        return None
    return PAGES_TIMES * max(1, last_good_pages) + PAGES_SLACK


def list_terms(health: ZoneHealth | None, last_good_pages: int | None) -> tuple[int | None, bool]:
    """How a tick lists a zone: (the most pages a list may take, whether its requests are
    retried). A failing zone's list is a probe: not retried, its next one is the retry."""
    failing = health is not None and health.failing
    return page_bound(last_good_pages), not failing


def listed_now(health: ZoneHealth | None, now: datetime, slack: timedelta) -> bool:
    """Whether a tick at `now` lists the zone: it lists fine, or its backoff is over. `slack`
    (a fraction of the poll) keeps the poll's own tick from missing the end by milliseconds."""
    if health is None or not health.failing or health.next_list_at is None:
        return True
    return now + slack >= health.next_list_at


def next_zone_health(
    before: ZoneHealth | None,
    obs: ZoneObservation,
    project: str,
    last_ok: datetime | None,
    threshold: int = UNREACHABLE_AFTER,
    *,
    poll_interval: float = 0.0,
    bounded: bool = False,
) -> tuple[ZoneHealth, tuple[str, str] | None]:
    """A zone's health after one list, and the event to tell (kind, message) if any. A zone
    that keeps listing fine keeps its record unchanged (no write). A failed list sets when
    the zone is listed next (`list_backoff` from `poll_interval` and `bounded`)."""
    prev = before or ZoneHealth(project=project, zone=obs.zone)
    if obs.ok:
        if before is not None and not before.failing:
            return before, None
        after = ZoneHealth(project=project, zone=obs.zone, last_ok_at=obs.observed_at)
        if prev.unreachable:
            since = when(prev.failing_since)
            return after, ("zone.reachable", f"{obs.zone}: listed again (failing since {since})")
        return after, None
    kind = obs.error
    after = replace(
        prev,
        failures=prev.failures + 1,
        error_kind=kind,
        error_message=obs.error_message,
        failing_since=prev.failing_since or obs.observed_at,
        last_ok_at=last_ok or prev.last_ok_at,
    )
    wait = timedelta(seconds=list_backoff(after.failures, poll_interval, bounded=bounded))
    after = replace(after, next_list_at=obs.observed_at + wait)
    if after.failures >= threshold and not prev.unreachable:
        after = replace(after, unreachable=True)
        message = (
            f"{obs.zone}: cannot list nodes ({after.failures} ticks in a row since "
            f"{when(after.failing_since)}): {after.error_text}"
        )
        return after, ("zone.unreachable", message)
    return after, None


def unlistable_fleets(
    specs: Iterable[FleetSpec], health: Mapping[tuple[str, str], ZoneHealth]
) -> list[tuple[str, tuple[ZoneHealth, ...]]]:
    """The fleets none of whose zones can be listed (each `unreachable`), with those zones.
    `health` is by (project, zone), the project as a FleetSpec names it."""
    found = []
    for spec in specs:
        zones = tuple(health.get((spec.project, z)) for z in spec.zones)
        if zones and all(z is not None and z.unreachable for z in zones):
            found.append((spec.name, tuple(z for z in zones if z is not None)))
    return found


def when(at: datetime | None) -> str:
    if at is None:
        return "-"
    return at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def health_details(h: ZoneHealth) -> dict[str, Any]:
    return {
        "project": h.project,
        "zone": h.zone,
        "failures": h.failures,
        "error_kind": None if h.error_kind is None else h.error_kind.value,
        "error_message": h.error_message,
        "failing_since": when(h.failing_since),
        "next_list_at": when(h.next_list_at),
    }
