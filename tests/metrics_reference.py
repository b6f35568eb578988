"""The per-tick metrics refresh as it was before it became incremental (tpucared 1bf0e9a), kept as
the oracle of tests/runtime/telemetry/test_metrics_refresh.py: a full refresh that rewrites
every series of `set_nodes` through `prometheus_client` families every tick, fed by the goodput
tracker of the time (each interval's float seconds added to each slot's counters). Copied (less
the tracker's parse cache, which changes no figure), not imported, so that a change to the
daemon's code cannot change the reference with it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge

from tpucared.core.model.lifecycle import LIVE_PHASES
from tpucared.core.model.records import FleetRecord, NodePhase
from tpucared.runtime.telemetry.metrics import DaemonMetrics
from tpucared.store.snapshot import SlotKey, Snapshot

_LIVE_PHASES = sorted(p.value for p in LIVE_PHASES)


class FullRefresh:
    """A `DaemonMetrics` registry whose per-slot families are the three `prometheus_client`
    families of old (registered where `SlotSeries` is: last), refreshed the old way."""

    def __init__(self) -> None:
        self.metrics = DaemonMetrics()
        r: CollectorRegistry = self.metrics.registry
        r.unregister(self.metrics.slot_series)
        labels = ("fleet", "slot")
        self.goodput = Gauge(
            "tpucared_slot_goodput_ratio", "Productive / wall time", labels, registry=r
        )
        self.slot_wall = Counter(
            "tpucared_slot_wall_seconds", "Wall time accounted", labels, registry=r
        )
        self.slot_productive = Counter(
            "tpucared_slot_productive_seconds", "Productive time", labels, registry=r
        )
        self._goodput = OldGoodputTracker()
        self._slot_series: set[SlotKey] = set()

    def set_nodes(self, snapshot: Snapshot, now: datetime) -> None:
        m = self.metrics
        m.nodes.clear()
        m.slots.clear()
        m.running.clear()
        for fleet in snapshot.fleets.values():
            for phase in _LIVE_PHASES:
                m.nodes.labels(fleet.name, phase).set(0)
            wanted = [s for s in snapshot.slots_of(fleet.name) if not s.done and not fleet.down]
            m.slots.labels(fleet.name).set(len(wanted))
            m.running.labels(fleet.name).set(0)
        for (fleet_name, *_), node in snapshot.nodes.items():
            m.nodes.labels(fleet_name, node.phase.value).inc()
        for fleet_name, _ in snapshot.running:
            m.running.labels(fleet_name).inc()
        self._set_goodput(snapshot, now)

    def _set_goodput(self, snapshot: Snapshot, now: datetime) -> None:
        times = self._goodput.update(snapshot, now)
        for fleet, slot in self._slot_series - times.keys():
            for family in (self.goodput, self.slot_wall, self.slot_productive):
                family.remove(fleet, str(slot))
        for (fleet, slot), t in times.items():
            labels = (fleet, str(slot))
            self.slot_wall.labels(*labels).inc(t.wall_added)
            self.slot_productive.labels(*labels).inc(t.productive_added)
            self.goodput.labels(*labels).set(t.ratio)
        self._slot_series = set(times)


@dataclass(frozen=True)
class OldSlotTime:
    wall_s: float
    productive_s: float
    wall_added: float
    productive_added: float

    @property
    def ratio(self) -> float:
        return self.productive_s / self.wall_s if self.wall_s > 0 else 0.0


class OldGoodputTracker:
    def __init__(self) -> None:
        self._at: datetime | None = None
        self._productive_now: dict[SlotKey, bool] = {}
        self._totals: dict[SlotKey, tuple[float, float]] = {}

    def update(self, snapshot: Snapshot, now: datetime) -> dict[SlotKey, OldSlotTime]:
        elapsed = 0.0 if self._at is None else max(0.0, (now - self._at).total_seconds())
        self._at = now
        result: dict[SlotKey, OldSlotTime] = {}
        for key in snapshot.slots:
            wall, productive = self._totals.get(key, (0.0, 0.0))
            was = self._productive_now.get(key)
            wall_added = elapsed if was is not None else 0.0
            productive_added = elapsed if was else 0.0
            wall, productive = wall + wall_added, productive + productive_added
            self._totals[key] = (wall, productive)
            result[key] = OldSlotTime(wall, productive, wall_added, productive_added)
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
        if fleet is None or _has_workload(fleet):
            return False
        slices = _slices(fleet)  # a multislice slot: every slice READY
        return all(
            (node := snapshot.nodes.get((*key, i))) is not None and node.phase is NodePhase.READY
            for i in range(slices)
        )


def _has_workload(fleet: FleetRecord) -> bool:
    try:
        spec = json.loads(fleet.spec_json)
        return not isinstance(spec, dict) or spec.get("workload") is not None
    except ValueError:
        return True


def _slices(fleet: FleetRecord) -> int:
    try:
        spec = json.loads(fleet.spec_json)
    except ValueError:
        return 1
    return int(spec.get("slices", 1)) if isinstance(spec, dict) else 1


def _down(fleet: FleetRecord | None) -> bool:
    return fleet is None or fleet.down
