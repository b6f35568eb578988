"""Whether each (project, zone) can be listed, as pure rules over `ZoneHealth` records.

The reconciler hands every tick's observations to `next_zone_health` and writes the records
that changed (table `zone_health`) with the event to tell: the `UNREACHABLE_AFTER`th failed
list in a row tells `zone.unreachable` (once per outage), the first list that succeeds after
it `zone.reachable`. `unlistable_fleets` is what /healthz reports: fleets none of whose zones
can be listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import ZoneHealth
from tpucared.core.model.specs import FleetSpec

# Consecutive ticks whose list of a zone failed before `zone.unreachable` is told (and before
# /healthz counts the zone as down).
UNREACHABLE_AFTER = 3


def next_zone_health(
    before: ZoneHealth | None,
    obs: ZoneObservation,
    project: str,
    last_ok: datetime | None,
    threshold: int = UNREACHABLE_AFTER,
) -> tuple[ZoneHealth, tuple[str, str] | None]:
    """A zone's health after one list, and the event to tell (kind, message) if any. A zone
    that keeps listing fine keeps its record unchanged (no write)."""
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
    }
