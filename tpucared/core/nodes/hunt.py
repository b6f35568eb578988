"""One probe at a time per zone while several slots of a fleet hunt it for capacity (issue 44).

The slots sub-planner (core/nodes/slots.py `plan_creates`) asks `ZoneHunt.why_not` about each
create it is about to plan, after the slot's own backoff and the create rate let it through.
Without this rule every hunting slot kept its own capacity pace (core/nodes/create_backoff.py):
16 slots of one fleet meant 16 creates per 3.6-4 s, which `creates_per_minute` then cut into
bursts (all 16 in one tick, then nothing for most of a minute), so the fleet was both costlier
and later than a lone slot. The rules, per fleet and zone, for direct single-slice fleets:
- The zone is hunted when some slot of the fleet whose next create goes there has failed
  creates in a row (`create_failures` > 0) and is due within one capacity wait (a slot in a
  long backoff, a quota or a name held by someone else, hunts nothing: it keeps its own wait).
- While it is hunted, at most one create of the fleet is in flight there (the probe), and the
  next goes no sooner than the latest hunting slot's `next_create_at` (the last probe's pace):
  the fleet probes on the lone slot's cadence, whichever slot sends it. Lower slots first, as
  the sub-planner orders them.
- Capacity is seen back in the zone when, this tick, a hunting slot's create succeeds (its
  failures reset to 0) or a pending create's operation there ended without an error: then
  every waiting slot follows at once, within the create rate and the in-flight caps.
A lone slot is its own hunter: the rule never holds it beyond its own backoff. On the real
API a create that finds capacity ends its operation only once the node is up (minutes), so the
others follow that late; the runtime could tell sooner (an operation that outlived the zone's
failing ones, core/nodes/op_timing.py) but does not pass that to the planner yet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from tpucared.core.model.lifecycle import PENDING_PHASES
from tpucared.core.model.records import NodePhase, SlotRecord
from tpucared.core.model.specs import FleetSpec, Provisioning
from tpucared.core.view import View
from tpucared.core.vocab.snapshot import NodeKey


@dataclass
class _Zones:
    """One fleet's hunted zones: the pace of each (the next probe not before), the creates
    in flight there (and which slot sends one), and the zones where capacity was seen back."""

    pace: dict[str, datetime | None] = field(default_factory=dict)
    in_flight: Counter[str] = field(default_factory=Counter)
    prober: dict[str, int] = field(default_factory=dict)
    back: set[str] = field(default_factory=set)


class ZoneHunt:
    """One plan's probes: built once per plan, each fleet's zones worked out the first time a
    slot of it asks (a big fleet with no empty slot costs nothing)."""

    def __init__(
        self,
        view: View,
        claimed: Mapping[NodeKey, str],
        slots: Mapping[tuple[str, int], SlotRecord],
    ) -> None:
        self._view = view
        self._claimed = claimed
        self._slots = slots
        self._fleets: dict[str, _Zones] = {}

    def why_not(
        self, spec: FleetSpec, slot: SlotRecord, zone: str
    ) -> tuple[str | None, datetime | None]:
        """Why slot `slot` of `spec` must not create in `zone` now, and until when (None: when
        the probe in flight ends); (None, None) when it may."""
        if spec.slices > 1 or spec.provisioning is not Provisioning.DIRECT:
            return None, None
        zones = self._zones(spec)
        if zone in zones.back or zone not in zones.pace:
            return None, None
        where = f"{zone} is out of capacity for fleet {spec.name}"
        if zones.in_flight[zone]:
            who = zones.prober.get(zone)
            by = f" (slot {who})" if who is not None and who != slot.index else ""
            return f"{where}: one probe at a time{by}; following its first success", None
        pace = zones.pace[zone]
        if pace is not None and self._view.now < pace:
            until = pace.isoformat(timespec="seconds")
            return f"{where}: the next probe at {until}, on one slot's pace", pace
        return None, None

    def count(self, spec: FleetSpec, slot: SlotRecord, zone: str) -> None:
        """A create of `slot` in `zone` is planned: while the zone is hunted, it is the probe."""
        zones = self._fleets.get(spec.name)
        if zones is not None and zone in zones.pace and zone not in zones.back:
            zones.in_flight[zone] += 1
            zones.prober.setdefault(zone, slot.index)

    def _zones(self, spec: FleetSpec) -> _Zones:
        found = self._fleets.get(spec.name)
        if found is None:
            found = self._fleets[spec.name] = self._work_out(spec)
        return found

    def _work_out(self, spec: FleetSpec) -> _Zones:
        view = self._view
        out = _Zones()
        horizon = view.now + view.policy.capacity_backoff.cap
        first = spec.zones[0] if spec.zones else None
        for index in range(spec.size):
            before = view.slot(spec.name, index)
            slot = self._slots.get((spec.name, index)) or before
            if before.create_failures and not slot.create_failures and slot.next_zone:
                out.back.add(slot.next_zone)  # a hunting slot's create succeeded this tick
            if slot.done or not slot.create_failures:
                continue
            zone = slot.next_zone if slot.next_zone in spec.zones else first
            due = slot.next_create_at
            if zone is None or (due is not None and due > horizon):
                continue  # a long backoff: it hunts nothing
            pace = out.pace.get(zone)
            if zone not in out.pace or (due is not None and (pace is None or due > pace)):
                out.pace[zone] = due
        for inc in view.live:
            if inc.fleet != spec.name or inc.phase not in PENDING_PHASES:
                continue
            if self._claimed.get(inc.key) != inc.zone:
                continue  # it fails this tick: no longer in flight
            ended_well = (
                inc.phase is NodePhase.CREATING and inc.operation is None and inc.error is None
            )
            if ended_well:
                out.back.add(inc.zone)  # its operation ended without an error: capacity
            else:
                out.in_flight[inc.zone] += 1
                out.prober.setdefault(inc.zone, inc.slot)
        return out
