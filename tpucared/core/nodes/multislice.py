"""Multislice slots at the node level: N slices that only serve together.

A fleet with `slices = N` (N > 1) gives each slot N nodes, one per slice, which the workload
uses as one job (core/workload/gang.py). The node sub-planners treat each slice like a slot of
its own (core/nodes/slots.py creates a missing slice in the zone of the others); the rules here
run after them, in `plan_view` (core/planning/planner.py), on the phases their actions leave:

  hold      a direct multislice slot with a READY slice and a slice that is not READY keeps
            its READY slices while the missing one is hunted: `HoldSlices(since=now)` when
            that starts, `HoldSlices(None)` when every slice is READY again or none is;
  release   held for the fleet's `multislice_hold`: its READY slices are deleted (a planned
            delete, no preemption), since idle slices bill and hold quota; the slot then
            starts over from its `next_zone`, which is how it moves to another zone;
  once      one loss of the slot counts one preemption, however many of its slices go at
            once (a queued resource loses them all) and whatever goes while it is already
            broken: a slot's SlotUpdates keep `add_preemptions` only on the first, and only
            when every slice was serving before this plan.

A queued multislice slot is never held: its queued resource gives all slices or none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from tpucared.core.model.lifecycle import SERVING_PHASES
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import FleetSpec, Provisioning
from tpucared.core.view import View
from tpucared.core.vocab.actions import Action, DeleteNode, HoldSlices, Transition
from tpucared.core.vocab.plan import Hold

P = NodePhase
RELEASED = "released: multislice hold"


def plan_holds(view: View, phases: Mapping[int, NodePhase]) -> tuple[list[Action], list[Hold]]:
    """Hold, clear or release each direct multislice slot (the rules above); `phases`: each
    live incarnation's phase once this plan's node actions are applied."""
    actions: list[Action] = []
    holds: list[Hold] = []
    by_slot = _slices_by_slot(view)
    for spec in view.specs.values():
        if not spec.multislice or spec.provisioning is Provisioning.QUEUED:
            continue
        for index in range(spec.size):
            ready = [i for i in by_slot.get((spec.name, index), ()) if phases.get(i.id) is P.READY]
            acts, hold = _slot_hold(view, spec, index, ready)
            actions += acts
            if hold is not None:
                holds.append(hold)
    return actions, holds


def _slot_hold(
    view: View, spec: FleetSpec, index: int, ready: list[IncarnationRecord]
) -> tuple[list[Action], Hold | None]:
    slot = view.slots.get((spec.name, index))
    if slot is None:
        return [], None
    held = 0 < len(ready) < spec.slices and view.unwanted(spec.name, index) is None
    if not held:
        if slot.held_since is None:
            return [], None
        why = "every slice is READY" if len(ready) == spec.slices else "no slice is READY"
        return [_hold_action(spec, index, None, f"no longer held: {why}")], None
    since = slot.held_since or view.now
    limit = timedelta(seconds=spec.multislice_hold)
    waiting = sorted(set(range(spec.slices)) - {i.slice for i in ready})
    which = ", ".join(str(i) for i in waiting)
    if view.now - since >= limit:
        why = (
            f"held {len(ready)} READY slice(s) for {limit} (multislice_hold) while slice(s) "
            f"{which} could not be had: released, the slot starts over"
        )
        deletes: list[Action] = [_release(inc, why) for inc in ready]
        return [*deletes, _hold_action(spec, index, None, why)], None
    until = since + limit
    hold = Hold(
        fleet=spec.name,
        slot=index,
        node_name=spec.slot_name(index),
        reason=f"keeping {len(ready)} of {spec.slices} slices READY while slice(s) {which} "
        f"are missing; released at {until.isoformat(timespec='seconds')} (multislice_hold)",
        until=until,
    )
    if slot.held_since is not None:
        return [], hold
    why = f"slice(s) {which} missing while {len(ready)} are READY"
    return [_hold_action(spec, index, view.now, why)], hold


def _hold_action(spec: FleetSpec, index: int, since: datetime | None, why: str) -> HoldSlices:
    return HoldSlices(fleet=spec.name, slot=index, since=since, reason=why)


def _release(inc: IncarnationRecord, why: str) -> DeleteNode:
    return DeleteNode.of(inc, P.READY, reason=why, end_reason=RELEASED)


def count_once(view: View, actions: Iterable[Action]) -> list[Action]:
    """`actions` with each multislice slot's preemptions counted at most once (rule "once"):
    idempotent, so the node plan and the merged tick plan may both pass through it."""
    whole: set[tuple[str, int]] | None = None  # found when first needed: rarely, at scale
    counted: set[tuple[str, int]] = set()
    out: list[Action] = []
    for a in actions:
        u = a.slot_update if isinstance(a, Transition) else None
        if u is not None and u.add_preemptions and _multislice(view, u.fleet):
            if whole is None:
                whole = _whole_slots(view)
            key = (u.fleet, u.slot)
            if key in counted or key not in whole:
                assert isinstance(a, Transition)
                a = replace(a, slot_update=replace(u, add_preemptions=0))
            counted.add(key)
        out.append(a)
    return out


def _multislice(view: View, fleet: str) -> bool:
    spec = view.specs.get(fleet)
    return spec is not None and spec.multislice


def _whole_slots(view: View) -> set[tuple[str, int]]:
    """Multislice slots whose every slice had a serving incarnation when the tick began."""
    out = set()
    for key, incs in _slices_by_slot(view).items():
        spec = view.specs.get(key[0])
        serving = {i.slice for i in incs if i.phase in SERVING_PHASES}
        if spec is not None and spec.multislice and len(serving) >= spec.slices:
            out.add(key)
    return out


def _slices_by_slot(view: View) -> dict[tuple[str, int], list[IncarnationRecord]]:
    out: dict[tuple[str, int], list[IncarnationRecord]] = {}
    if not any(spec.multislice for spec in view.specs.values()):
        return out  # no pass over every live node for fleets of single slices
    for inc in view.live:
        spec = view.specs.get(inc.fleet)
        if spec is not None and spec.multislice:
            out.setdefault((inc.fleet, inc.slot), []).append(inc)
    return out
