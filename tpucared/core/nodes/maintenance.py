"""Host maintenance, seen: when a node's announced window (`ObservedNode.maintenance`, recorded
as `IncarnationRecord.maintenance`) is news worth an event, and how it reads.

Where it sits: the store's cloud-facts writes (store/write_nodes.py) ask `announced` whether a
recorded change of window is a `node.maintenance_scheduled` event; `status`, the events and the
webhook word a window with `describe`. Nothing here acts on a window (issue 41, items 2+).
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from tpucared.core.model.observed import MaintenanceWindow

SCHEDULED_EVENT: Final = "node.maintenance_scheduled"


def announced(before: MaintenanceWindow | None, after: MaintenanceWindow | None) -> bool:
    """A window appeared, or moved (start, end or type changed). Its status turning
    PENDING -> ONGOING, or the window ending, is not a new announcement."""
    if after is None:
        return False
    if before is None:
        return True
    return (before.start, before.end, before.type) != (after.start, after.end, after.type)


def _at(t: datetime | None) -> str:
    return "?" if t is None else t.strftime("%Y-%m-%d %H:%M:%SZ")


def describe(window: MaintenanceWindow) -> str:
    """One line: `SCHEDULED maintenance 2026-12-01 10:00:00Z - 2026-12-01 11:00:00Z (PENDING)`."""
    kind = window.type or "UNKNOWN_TYPE"
    status = f" ({window.status})" if window.status else ""
    return f"{kind} maintenance {_at(window.start)} - {_at(window.end)}{status}"


def details(window: MaintenanceWindow) -> dict[str, object]:
    """The event's details: start, end (ISO 8601 or None), type, status, can_reschedule."""
    return {
        "start": window.start.isoformat() if window.start else None,
        "end": window.end.isoformat() if window.end else None,
        "type": window.type,
        "status": window.status,
        "can_reschedule": window.can_reschedule,
    }
