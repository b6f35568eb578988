"""What weeks of running may forget: old events, the health of zones no fleet lists anymore,
the SSH host-key pins of node incarnations that have ended.

Pure rules for the daemon's maintenance task (runtime/maintenance.py), which applies them to
the store in small batches off the tick. `daemon.events_retention` is at least a day (the
config refuses less), so an event-derived metric reading back to a recent loss still finds it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime, timedelta

from tpucared.core.model.lifecycle import LIVE_PHASES
from tpucared.core.model.records import NodePhase

# Phases whose incarnation is over: its workers will never be reached again, so their pinned
# host keys only hold a dead VM's identity.
ENDED_PHASES: frozenset[NodePhase] = frozenset(NodePhase) - LIVE_PHASES


def events_cutoff(now: datetime, retention_s: float | None) -> datetime | None:
    """Events before this instant may be pruned; None keeps every event ("never")."""
    return None if retention_s is None else now - timedelta(seconds=retention_s)


def stale_zones(
    recorded: Iterable[tuple[str, str]], listed: Collection[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The recorded (project, zone) healths no configured fleet lists anymore, sorted."""
    return sorted(set(recorded) - set(listed))
