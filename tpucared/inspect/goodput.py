"""Goodput per slot: the share of wall time the slot was doing useful work.

Productive time is time with a workload attempt running on the slot; for a fleet without a
workload (nodes kept for people to use), time with a READY node. The tracker samples the
store's snapshot once per tick and credits the time since the previous sample according to
the state seen at the previous sample, so its resolution is one tick. It counts from the
daemon's start; the database view `v_slot_goodput` (docs/inspecting.md) has the lifetime
figure. Slots that are done, and fleets that are down, stop accumulating: they want no node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from tpucared.core.model.records import FleetRecord, NodePhase
from tpucared.store.snapshot import SlotKey, Snapshot


@dataclass(frozen=True)
class SlotTime:
    wall_s: float  # seconds accounted since the daemon started
    productive_s: float
    wall_added: float  # by the last update
    productive_added: float

    @property
    def ratio(self) -> float:
        return self.productive_s / self.wall_s if self.wall_s > 0 else 0.0


class GoodputTracker:
    def __init__(self) -> None:
        self._at: datetime | None = None
        self._productive_now: dict[SlotKey, bool] = {}  # counted slots, state at last sample
        self._totals: dict[SlotKey, tuple[float, float]] = {}
        self._has_workload: dict[tuple[str, str], bool] = {}  # (fleet, spec_hash) -> parsed

    def update(self, snapshot: Snapshot, now: datetime) -> dict[SlotKey, SlotTime]:
        """Credit the time since the last update; return every slot of the snapshot."""
        elapsed = 0.0 if self._at is None else max(0.0, (now - self._at).total_seconds())
        self._at = now
        result: dict[SlotKey, SlotTime] = {}
        for key in snapshot.slots:
            wall, productive = self._totals.get(key, (0.0, 0.0))
            was = self._productive_now.get(key)  # None: not counted at the last sample
            wall_added = elapsed if was is not None else 0.0
            productive_added = elapsed if was else 0.0
            wall, productive = wall + wall_added, productive + productive_added
            self._totals[key] = (wall, productive)
            result[key] = SlotTime(wall, productive, wall_added, productive_added)
        # Forget slots that left the database, so long runs do not accumulate them.
        self._totals = {k: v for k, v in self._totals.items() if k in snapshot.slots}
        self._productive_now = {
            key: self._productive(snapshot, key)
            for key, slot in snapshot.slots.items()
            if not slot.done and not _down(snapshot.fleets.get(key[0]))
        }
        return result

    def _productive(self, snapshot: Snapshot, key: SlotKey) -> bool:
        if key in snapshot.running:
            return True
        fleet = snapshot.fleets.get(key[0])
        if fleet is None or self._fleet_has_workload(fleet):
            return False
        node = snapshot.nodes.get(key)
        return node is not None and node.phase is NodePhase.READY

    def _fleet_has_workload(self, fleet: FleetRecord) -> bool:
        cache_key = (fleet.name, fleet.spec_hash)
        if cache_key not in self._has_workload:
            try:
                spec = json.loads(fleet.spec_json)
                # spec_json is the FleetSpec as a dict (core.slots.spec_json).
                has = not isinstance(spec, dict) or spec.get("workload") is not None
            except ValueError:
                has = True  # unknown: do not call an idle node productive
            self._has_workload[cache_key] = has
        return self._has_workload[cache_key]


def _down(fleet: FleetRecord | None) -> bool:
    return fleet is None or fleet.down
