"""The slots sub-planner: fleet and slot records, and which empty slots get a create.

Runs after the node and strays sub-planners, on the phases their actions leave behind, so
a node that is found gone this tick is recreated in the same plan. Rules:
- every configured fleet has a FleetRecord with its current spec hash, and every slot below
  its size a SlotRecord (RecordFleet / OpenSlot);
- a wanted slot (below size, fleet not down, workload not done) with no incarnation in a
  live phase and nothing adopted for it gets one CreateNode, unless: its backoff has not
  passed (`next_create_at`); the old node is still being deleted (its name is not free
  yet); the zone to try was not listed successfully this tick (no creates blind); the name
  is taken in every zone by something we must not touch; the create limits are reached
  (Policy.max_creates, max_creates_per_fleet in flight; Policy.creates_per_minute sent, per
  cloud API and project: core/nodes/create_rate.py); the zone is out of capacity for the
  fleet and another slot's probe is in flight there, or the probe's pace has not passed
  (core/nodes/hunt.py: one probe at a time per zone, the others follow its success); or
  a delete of the name it would create is still in flight (`delete_in_flight`). Each such case
  is a Hold, for people;
- zones are tried from the slot's `next_zone` (core/nodes/create_backoff.py rotates it on
  stockouts), skipping zones where the name is held by a resource we must not touch;
- lower slots first, fleets interleaved in config order, so every fleet gets its slot 0
  before any gets its slot 1.
Each slot has at most one node per slice: creates only go to slices without a live
incarnation. A direct multislice slot's slices are created one by one, each like a slot of its
own, but all in one zone: while a slice of the slot lives, a missing slice is created in that
slice's zone, never rotated away from it (core/nodes/multislice.py releases the slot's slices
after `multislice_hold`, and the next creates then start from the slot's `next_zone`). A queued
multislice slot is one queued resource: one create (slice 0's, with the slice count), whose
other nodes are adopted as they appear; it waits until every slice of its old one is gone,
since they share the queued resource's name.

`delete_in_flight` is the rule for the other half of "the name is not free yet": no create or
delete goes out under a name (a node's, or its queued resource's) while a delete call or
operation of another incarnation can still reach it. The runtime knows which are in flight
and passes them in (`DeletesInFlight`); the planner holds such creates and deletes
(planner.py), and the runtime's executor asks the same rule again right before each call.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from datetime import datetime
from types import MappingProxyType

from tpucared.core.model.records import SlotRecord
from tpucared.core.model.specs import (
    FLEET_LABEL,
    OWNER_LABEL,
    SLICE_LABEL,
    SLOT_LABEL,
    FleetSpec,
    Provisioning,
    location_name,
)
from tpucared.core.nodes.create_rate import NO_CREATES_SENT, CreateRate, CreatesSent
from tpucared.core.nodes.hunt import ZoneHunt
from tpucared.core.view import View
from tpucared.core.vocab.actions import (
    Action,
    CreateNode,
    DeleteNode,
    OpenSlot,
    RecordFleet,
    Transition,
)
from tpucared.core.vocab.plan import Hold
from tpucared.core.vocab.snapshot import NodeKey

# What a create or delete call reaches: (project, zone, its queued resource or else its node).
CallTarget = tuple[str, str, str]
# Call targets with a delete in flight (its call, retries included, or its operation), and
# the incarnations whose deletes those are.
DeletesInFlight = Mapping[CallTarget, frozenset[int]]
NO_DELETES: DeletesInFlight = MappingProxyType({})


def call_target(action: CreateNode | DeleteNode) -> CallTarget:
    return (action.project, action.zone, action.queued_resource or action.node_name)


def delete_in_flight(action: CreateNode | DeleteNode, deleting: DeletesInFlight) -> str | None:
    """Why `action` must wait, or None: a delete of the resource it would create or delete
    is in flight (by another incarnation). The slices of a queued multislice slot share their
    queued resource: a second slice's delete sent while the first's ran met 409 CONFLICT and
    retried after the slot's new queued resource, same name, was queued, and deleted it. And
    no create goes out under a name a delete may still reach: its retries outlive the list
    that shows the old resource gone."""
    target = call_target(action)
    mine = action.incarnation_id if isinstance(action, DeleteNode) else None
    if not deleting.get(target, frozenset()) - {mine}:
        return None
    project, zone, name = target
    where = location_name(project, zone)
    return f"a delete of {name} in {where} is still in flight; its name is not free yet"


def fleet_records(view: View) -> list[Action]:
    actions: list[Action] = []
    for spec in view.specs.values():
        digest = spec.spec_hash()
        rec = view.fleet_records.get(spec.name)
        if rec is None or rec.spec_hash != digest:
            why = "new fleet" if rec is None else f"spec changed (was {rec.spec_hash})"
            actions.append(
                RecordFleet(
                    fleet=spec.name, spec_hash=digest, spec_json=spec_json(spec), reason=why
                )
            )
        for index in range(spec.size):
            if (spec.name, index) not in view.slots:
                actions.append(OpenSlot(fleet=spec.name, slot=index, reason="new slot"))
    return actions


def updated_slots(view: View, actions: Iterable[Action]) -> dict[tuple[str, int], SlotRecord]:
    """The slot records as the SlotUpdates among `actions` leave them (only changed ones)."""
    out: dict[tuple[str, int], SlotRecord] = {}
    for a in actions:
        if isinstance(a, Transition) and a.slot_update is not None:
            u = a.slot_update
            key = (u.fleet, u.slot)
            slot = out.get(key) or view.slot(u.fleet, u.slot)
            out[key] = replace(
                slot,
                create_failures=u.create_failures,
                next_create_at=u.next_create_at,
                next_zone=u.next_zone,
                last_error=u.last_error,
                preemptions=slot.preemptions + u.add_preemptions,
            )
    return out


def plan_creates(
    view: View,
    claimed: Mapping[NodeKey, str],
    busy: Mapping[NodeKey, str],
    in_flight: Counter[str],
    slots: Mapping[tuple[str, int], SlotRecord],
    deleting: DeletesInFlight = NO_DELETES,
    sent: CreatesSent = NO_CREATES_SENT,
) -> tuple[list[Action], list[Hold]]:
    """`claimed`: slices with a serving incarnation (or an adopt) after this plan's actions,
    with its zone; `busy`: slices whose previous node is still DEAD/DELETING, with that phase;
    `in_flight`: creates in flight per fleet (counted towards the limits); `slots`: slot
    records this plan changes (a create failure found this tick moves the zone and sets the
    backoff); `deleting`: the deletes in flight (`delete_in_flight`); `sent`: when the
    creates of the last minute were sent (core/nodes/create_rate.py)."""
    actions: list[Action] = []
    holds: list[Hold] = []
    total = sum(in_flight.values())
    rate = CreateRate(view.policy.creates_per_minute, sent, view.now)
    probes = ZoneHunt(view, claimed, slots)
    wanted = sorted(
        (index, view.order(spec.name), spec)
        for spec in view.specs.values()
        for index in range(spec.size)
    )
    for index, _, spec in wanted:
        for piece in _slices_to_create(spec, index, claimed):
            key = (spec.name, index, piece)
            slot = slots.get(key[:2]) or view.slot(spec.name, index)
            name = spec.node_name(index, piece)
            if slot.done or view.unwanted(spec.name, index, piece) is not None:
                continue
            previous = _previous(spec, index, piece, busy)
            why_not, until = _why_not_now(view, spec, slot, previous, total, in_flight)
            if why_not is None:
                why_not, until = rate.why_not((spec.api, spec.project))
            zone, note = (None, "") if why_not else _pick_zone(view, spec, slot, name, claimed)
            if zone is not None:
                why_not, until = probes.why_not(spec, slot, zone)
                zone = None if why_not else zone
            if zone is None:
                holds.append(_hold(spec, index, name, why_not or note, until))
                continue
            create = _create(view, spec, slot, (index, piece), name, zone, note)
            waits = delete_in_flight(create, deleting) if deleting else None
            if waits is not None:
                holds.append(
                    Hold(fleet=spec.name, slot=index, node_name=name, reason=waits, on_delete=True)
                )
                continue
            # Counted while the call is in flight; a queued resource then waits uncounted.
            in_flight[spec.name] += 1
            total += 1
            rate.count((spec.api, spec.project))
            probes.count(spec, slot, zone)
            actions.append(create)
    return actions, holds


def _hold(spec: FleetSpec, index: int, name: str, why: str, until: datetime | None) -> Hold:
    return Hold(fleet=spec.name, slot=index, node_name=name, reason=why, until=until)


def _slices_to_create(spec: FleetSpec, index: int, claimed: Mapping[NodeKey, str]) -> list[int]:
    """The slices of slot `index` with nothing serving: slice 0 alone stands for a queued
    multislice slot (its queued resource brings every slice), and only when none serves."""
    if spec.slices == 1:  # nearly every slot of a big fleet: one lookup
        return [] if (spec.name, index, 0) in claimed else [0]
    pieces = [i for i in range(spec.slices) if (spec.name, index, i) not in claimed]
    if spec.provisioning is Provisioning.QUEUED:
        return [0] if len(pieces) == spec.slices else []
    return pieces


def _previous(spec: FleetSpec, index: int, piece: int, busy: Mapping[NodeKey, str]) -> str | None:
    """The phase of an old node still holding the name: the slice's own, or for a queued
    multislice slot any slice's (they share the queued resource's name)."""
    if spec.slices > 1 and spec.provisioning is Provisioning.QUEUED:
        phases = [busy[k] for i in range(spec.slices) if (k := (spec.name, index, i)) in busy]
        return phases[0] if phases else None
    return busy.get((spec.name, index, piece))


def _why_not_now(
    view: View,
    spec: FleetSpec,
    slot: SlotRecord,
    previous: str | None,
    total: int,
    in_flight: Counter[str],
) -> tuple[str | None, datetime | None]:
    """Why the slot gets no create this tick whatever the zones show, and until when (for a
    backoff): its previous node (in phase `previous`) still holds the name, its backoff, or
    the create limits. (None, None) when nothing of that stands in the way."""
    policy = view.policy
    if previous is not None:
        return f"the previous node is still {previous}; its name is not free yet", None
    if slot.next_create_at is not None and view.now < slot.next_create_at:
        until = slot.next_create_at
        err = f"; last error: {slot.last_error}" if slot.last_error else ""
        return (
            f"backoff until {until.isoformat(timespec='seconds')} after "
            f"{slot.create_failures} failed create(s){err}"
        ), until
    if total >= policy.max_creates:
        return f"create limit: {total} creates in flight (policy.max_creates)", None
    if in_flight[spec.name] >= policy.max_creates_per_fleet:
        return (
            f"create limit: {in_flight[spec.name]} creates in flight for {spec.name} "
            "(policy.max_creates_per_fleet)"
        ), None
    return None, None


def _create(
    view: View,
    spec: FleetSpec,
    slot: SlotRecord,
    where: tuple[int, int],
    name: str,
    zone: str,
    note: str,
) -> CreateNode:
    """The create of slot `where[0]`'s slice `where[1]`, node `name`, in `zone`; `note`: which
    zones were skipped, or why this zone."""
    index, piece = where
    queued = spec.provisioning is Provisioning.QUEUED
    attempt = slot.create_failures + 1
    what = "slot has no node" if not spec.multislice else f"slice {piece} has no node"
    if spec.multislice and queued:
        what = f"slot has none of its {spec.slices} slices"
    reason = what if attempt == 1 else f"retry after {slot.last_error}"
    if note:
        reason = f"{reason}; {note}"
    labels = {**spec.labels, FLEET_LABEL: spec.name, OWNER_LABEL: view.owner}
    if spec.multislice:
        labels[SLOT_LABEL] = str(index)
        if not queued:  # one node spec for all of a queued resource's nodes
            labels[SLICE_LABEL] = str(piece)
    return CreateNode(
        fleet=spec.name,
        slot=index,
        node_name=name,
        zone=zone,
        accelerator_type=spec.accelerator_type,
        extra=spec.extra,
        capacity=spec.capacity,
        provisioning=spec.provisioning,
        labels=labels,
        queued_resource=spec.slot_name(index) if queued else None,
        attempt=attempt,
        reason=reason,
        project=spec.project,
        slice=piece,
        slices=spec.slices if queued else 1,
        api=spec.api,
    )


def _pick_zone(
    view: View, spec: FleetSpec, slot: SlotRecord, name: str, claimed: Mapping[NodeKey, str]
) -> tuple[str | None, str]:
    """The zone to create in, and a note (why none, or which zones were skipped)."""
    zones = spec.zones
    queued = spec.provisioning is Provisioning.QUEUED
    if spec.multislice and not queued:
        siblings = {z for (f, i, _), z in claimed.items() if f == spec.name and i == slot.index}
        if siblings:
            # Slices talk over the data-centre network: one zone for the whole slot.
            zone = min(siblings)
            if not view.zone_known(spec.project, zone):
                return None, f"zone {zone} was not listed successfully this tick; {_BLIND}"
            if view.occupant(spec.project, zone, name) is not None:
                return None, f"the name {name} is taken in {zone}, the zone of the other slices"
            return zone, f"in {zone} with the slot's other slices"
    start = zones.index(slot.next_zone) if slot.next_zone in zones else 0
    # A multislice queued resource's own name is its slot's, not its first node's.
    queued_name = spec.slot_name(slot.index) if queued else name
    skipped: list[str] = []
    for k in range(len(zones)):
        zone = zones[(start + k) % len(zones)]
        if not view.zone_known(spec.project, zone, queued=queued):
            return None, f"zone {zone} was not listed successfully this tick; {_BLIND}"
        taken = [n for n in (name, queued_name) if view.occupant(spec.project, zone, n)]
        if not taken:
            note = f"skipped {', '.join(skipped)}: name taken there" if skipped else ""
            return zone, note
        skipped.append(zone)
    return None, f"the name {name} is taken in every zone ({', '.join(skipped)}); waiting"


_BLIND = "not creating blind"


def spec_json(spec: FleetSpec) -> str:
    """The spec as stored with the fleet (FleetSpec.spec_hash digests the same blob)."""
    return json.dumps(asdict(spec), sort_keys=True, default=str)
