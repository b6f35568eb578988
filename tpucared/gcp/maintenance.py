"""Upcoming host maintenance as both Google APIs list it, read into core `MaintenanceWindow`.

Where it sits: the TPU API adapter (gcp/tpu/convert.py, `Node.upcomingMaintenance`) and the
Compute Engine one (gcp/compute/convert.py, `Instance.resourceStatus.upcomingMaintenance`) call
`window` on the listed block. Both APIs name the fields alike (TPU API v2 discovery document,
schema `UpcomingMaintenance`; google.cloud.compute_v1 `UpcomingMaintenance`): `type`,
`maintenanceStatus`, `windowStartTime`, `windowEndTime`, `canReschedule` (and
`latestWindowStartTime`, not kept). A block of the wrong shape is MalformedResource, which makes
the zone's list MALFORMED as any other bad field does.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from tpucared.core.model.observed import MaintenanceWindow
from tpucared.gcp.fields import MalformedResource, parse_time, raw_excerpt


def _time(block: Mapping[str, object], key: str, what: str) -> datetime | None:
    value = block.get(key)
    if value is None:
        return None
    parsed = parse_time(value)
    if parsed is None:
        raise MalformedResource(f"{what}: upcomingMaintenance.{key}: {raw_excerpt(value)}")
    return parsed


def _str(block: Mapping[str, object], key: str, what: str) -> str | None:
    value = block.get(key)
    if value is None or isinstance(value, str):
        return value or None
    raise MalformedResource(f"{what}: upcomingMaintenance.{key}: {raw_excerpt(value)}")


def window(value: object, what: str) -> MaintenanceWindow | None:
    """The announced window, or None when there is none (the block absent or empty)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise MalformedResource(
            f"{what}: upcomingMaintenance is not an object: {raw_excerpt(value)}"
        )
    if not value:
        return None
    can = value.get("canReschedule")
    if can is not None and not isinstance(can, bool):
        raise MalformedResource(f"{what}: upcomingMaintenance.canReschedule: {raw_excerpt(can)}")
    return MaintenanceWindow(
        start=_time(value, "windowStartTime", what),
        end=_time(value, "windowEndTime", what),
        type=_str(value, "type", what),
        status=_str(value, "maintenanceStatus", what),
        can_reschedule=can,
    )


def earliest(windows: list[MaintenanceWindow | None]) -> MaintenanceWindow | None:
    """A multi-host slice's window: its members' earliest (the first to disturb the slice);
    a window without a start counts after those with one."""
    known = [w for w in windows if w is not None]
    if not known:
        return None
    return min(known, key=lambda w: (w.start is None, w.start or datetime.min))
