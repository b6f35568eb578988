"""Scheduled host maintenance in the emulator: the window a control call announces, as both
APIs and the workers' metadata servers show it.

Where it sits: the control API (control.py for TPU API nodes, compute/control.py for Compute
Engine instances) reads the body of `:schedule-maintenance` with `parse_body` and sets a
`Window` on the node (`Node.maintenance`; an instance's on its `host`). The window reads the
state's clock whenever it is shown: PENDING before its start, ONGOING from its start, gone at
its end (issue 41 item 1). What the maintenance does to the node (the notice in
`instance/maintenance-event`, the termination, the return) is `MaintenanceRun`, driven by
timers: maintenance_tpu.py for TPU API nodes, compute/maintenance.py for instances (item 5).
Rendered with the names Google's schemas give the fields: the TPU API v2 discovery
document's `UpcomingMaintenance` (`Node.upcomingMaintenance`) and google.cloud.compute_v1
`UpcomingMaintenance` (`Instance.resourceStatus.upcomingMaintenance`): `type`,
`maintenanceStatus`, `windowStartTime`, `windowEndTime`, `latestWindowStartTime`,
`canReschedule`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from tpucared_emulator import errors
from tpucared_emulator.clock import Clock, rfc3339

TYPES: Final = ("SCHEDULED", "UNSCHEDULED")
# `instance/maintenance-event` (compute/docs/metadata/getting-live-migration-notice): NONE, or
# TERMINATE_ON_HOST_MAINTENANCE shortly before a VM that cannot live-migrate (every TPU VM:
# onHostMaintenance TERMINATE) is terminated; NONE again once the event is over.
EVENT_NONE: Final = "NONE"
EVENT_TERMINATE: Final = "TERMINATE_ON_HOST_MAINTENANCE"
# What `instance/upcoming-maintenance` says with no window: the body the TPU page shows
# (tpu/docs/view-maintenance-notifications, "If there are no maintenance notifications").
NONE_BODY: Final = '{ "error": "no notifications have been received yet, try again later" }'


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    type: str
    clock: Clock
    # Whether maintenance may be started early (performMaintenance) while PENDING; never while
    # ONGOING (tpu/docs/view-maintenance-notifications: FALSE "typically observed during the
    # period in which the VM is actively undergoing maintenance").
    can_reschedule: bool = False

    def status(self) -> str | None:
        """PENDING, ONGOING, or None once the window is over."""
        now = self.clock.now()
        if now >= self.end:
            return None
        return "ONGOING" if now >= self.start else "PENDING"

    def render(self) -> dict[str, Any] | None:
        """The API block, or None once over; `latestWindowStartTime` the start itself."""
        status = self.status()
        if status is None:
            return None
        return {
            "type": self.type,
            "maintenanceStatus": status,
            "windowStartTime": rfc3339(self.start),
            "windowEndTime": rfc3339(self.end),
            "latestWindowStartTime": rfc3339(self.start),
            "canReschedule": self.can_reschedule and status == "PENDING",
        }


def shown(window: Window | None) -> dict[str, Any] | None:
    return None if window is None else window.render()


def metadata_value(window: Window | None) -> str:
    """`instance/upcoming-maintenance`: the block as JSON, or the documented no-window body."""
    block = shown(window)
    return NONE_BODY if block is None else json.dumps(block, sort_keys=True)


def parse_body(body: dict[str, Any], clock: Clock, can_reschedule: bool = False) -> Window:
    """`{"start_in_seconds": S, "duration_seconds": D, "type": "SCHEDULED",
    "can_reschedule": B}` -> a Window (B defaults to `can_reschedule`, what the API allows
    for this node); 400 INVALID_ARGUMENT naming the field that is wrong."""
    numbers = {}
    for key in ("start_in_seconds", "duration_seconds"):
        value = body.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise errors.invalid_argument(f"{key} must be a number >= 0")
        numbers[key] = float(value)
    kind = body.get("type", "SCHEDULED")
    if kind not in TYPES:
        raise errors.invalid_argument(f"type must be one of {list(TYPES)}")
    allowed = body.get("can_reschedule", can_reschedule)
    if not isinstance(allowed, bool):
        raise errors.invalid_argument("can_reschedule must be true or false")
    start = clock.now() + numbers["start_in_seconds"]
    return Window(start, start + numbers["duration_seconds"], str(kind), clock, allowed)


class MaintenanceRun:
    """What one node (or instance) is going through, beside its announced `Window`: set on
    `Node.host_maintenance` the first time either is needed, and kept (`polled` outlives a
    window: Google warns only a VM that asked since the last event).

    `serial` names the current maintenance: timers carry it, and one scheduled for an older
    maintenance finds a newer serial and does nothing. `noticed`: the metadata key says
    TERMINATE_ON_HOST_MAINTENANCE (to the workers in `workers`, or all when None); `down`: the
    node is terminated for the maintenance and not back yet."""

    __slots__ = ("down", "duration", "noticed", "polled", "serial", "workers")

    def __init__(self) -> None:
        self.serial = 0
        self.duration = 0.0  # how long it stays down, in seconds
        self.noticed = False
        self.polled = False
        self.down = False
        self.workers: frozenset[int] | None = None

    def event_value(self, worker_index: int) -> str:
        """`instance/maintenance-event` as worker `worker_index` reads it."""
        if self.noticed and (self.workers is None or worker_index in self.workers):
            return EVENT_TERMINATE
        return EVENT_NONE


def early_start_allowed(generation: str, chips: int) -> bool:
    """Whether a TPU API node of this generation and size may start maintenance early
    (tpu/docs/manually-start-maintenance, "Limitations": any v4 or v5p; v5e or v6e with the
    2x4 topology (8 chips) or larger). Other generations are not listed: refused."""
    if generation in ("v4", "v5p"):
        return True
    return generation in ("v5litepod", "v6e") and chips >= 8
