"""Scheduled host maintenance in the emulator: the window a control call announces, as both
APIs and the workers' metadata servers show it.

Where it sits: the control API (control.py for TPU API nodes, compute/control.py for Compute
Engine instances) reads the body of `:schedule-maintenance` with `parse_body` and sets a
`Window` on the node (`Node.maintenance`; an instance's on its `host`). The window reads the
state's clock whenever it is shown, so it needs no timers: PENDING before its start, ONGOING
from its start, gone at its end (issue 41 item 1; what maintenance does to the node comes
later). Rendered with the names Google's schemas give the fields: the TPU API v2 discovery
document's `UpcomingMaintenance` (`Node.upcomingMaintenance`) and google.cloud.compute_v1
`UpcomingMaintenance` (`Instance.resourceStatus.upcomingMaintenance`): `type`,
`maintenanceStatus`, `windowStartTime`, `windowEndTime`, `latestWindowStartTime`,
`canReschedule`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from tpucared.emulator import errors
from tpucared.emulator.clock import Clock, rfc3339

TYPES: Final = ("SCHEDULED", "UNSCHEDULED")
# What `instance/upcoming-maintenance` says with no window: the body the TPU page shows
# (tpu/docs/view-maintenance-notifications, "If there are no maintenance notifications").
NONE_BODY: Final = '{ "error": "no notifications have been received yet, try again later" }'


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    type: str
    clock: Clock

    def status(self) -> str | None:
        """PENDING, ONGOING, or None once the window is over."""
        now = self.clock.now()
        if now >= self.end:
            return None
        return "ONGOING" if now >= self.start else "PENDING"

    def render(self) -> dict[str, Any] | None:
        """The API block, or None once over. `canReschedule` false: the emulator has no
        performMaintenance yet (issue 41 item 5); `latestWindowStartTime` the start itself."""
        status = self.status()
        if status is None:
            return None
        return {
            "type": self.type,
            "maintenanceStatus": status,
            "windowStartTime": rfc3339(self.start),
            "windowEndTime": rfc3339(self.end),
            "latestWindowStartTime": rfc3339(self.start),
            "canReschedule": False,
        }


def shown(window: Window | None) -> dict[str, Any] | None:
    return None if window is None else window.render()


def metadata_value(window: Window | None) -> str:
    """`instance/upcoming-maintenance`: the block as JSON, or the documented no-window body."""
    block = shown(window)
    return NONE_BODY if block is None else json.dumps(block, sort_keys=True)


def parse_body(body: dict[str, Any], clock: Clock) -> Window:
    """`{"start_in_seconds": S, "duration_seconds": D, "type": "SCHEDULED"}` -> a Window;
    400 INVALID_ARGUMENT naming the field that is wrong."""
    numbers = {}
    for key in ("start_in_seconds", "duration_seconds"):
        value = body.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise errors.invalid_argument(f"{key} must be a number >= 0")
        numbers[key] = float(value)
    kind = body.get("type", "SCHEDULED")
    if kind not in TYPES:
        raise errors.invalid_argument(f"type must be one of {list(TYPES)}")
    start = clock.now() + numbers["start_in_seconds"]
    return Window(start, start + numbers["duration_seconds"], str(kind), clock)
