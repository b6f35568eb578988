"""The record-level effect of a plan, as a pure function: the executor contract, executable.

`apply_intent(snapshot, plan, now)` returns the snapshot the store would hold after the
executor recorded every action of `plan` (core/vocab/actions.py) and before any cloud call
returned: creates are REQUESTED, deletes are DELETING, transitions, cloud facts, adopts and
slot updates are written. `record_outcome` adds what a call
returned. Tests use both to check that planning converges and that every write the planner
asks for is legal; the store's tests can compare their writes with them.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from tpucared.core.model.lifecycle import LIVE_PHASES, check_transition, is_terminal
from tpucared.core.model.records import FleetRecord, IncarnationRecord, NodePhase, SlotRecord
from tpucared.core.model.specs import ErrorKind
from tpucared.core.vocab.actions import (
    Action,
    Adopt,
    CloudFacts,
    CreateNode,
    DeleteNode,
    HoldSlices,
    Notice,
    OpenSlot,
    RecordCloud,
    RecordFleet,
    SlotUpdate,
    Transition,
)
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.snapshot import PlainSnapshot, PlannerSnapshot


class StaleAction(RuntimeError):
    """An action's compare-and-set did not match: the executor would skip it. For a plan
    applied to the very snapshot it was made from, that is a planner bug."""


class _Store:
    def __init__(self, snapshot: PlannerSnapshot, now: datetime, strict: bool, id_floor: int):
        self.now = now
        self.strict = strict
        self.fleets = dict(snapshot.fleets)
        self.slots = dict(snapshot.slots)
        self.incs = {i.id: i for i in snapshot.nodes.values()}
        self.last_id = max([id_floor, *self.incs])

    def stale(self, why: str) -> None:
        if self.strict:
            raise StaleAction(why)

    def snapshot(self) -> PlainSnapshot:
        return PlainSnapshot.of(self.fleets.values(), self.slots.values(), self.incs.values())

    def next_id(self) -> int:
        self.last_id += 1
        return self.last_id

    def move(self, inc: IncarnationRecord, new: NodePhase) -> IncarnationRecord:
        check_transition(inc.phase, new)
        now = self.now
        inc = replace(inc, phase=new, phase_since=now, error=None)
        if new is NodePhase.READY:
            inc = replace(inc, ready_at=now)
        elif new is NodePhase.DEAD:
            inc = replace(inc, dead_at=now)
        elif new is NodePhase.DELETED:
            inc = replace(inc, deleted_at=now)
        if is_terminal(new):
            inc = replace(inc, operation=None)
        return inc

    def slot_update(self, u: SlotUpdate) -> None:
        slot = self.slots.get((u.fleet, u.slot)) or SlotRecord(
            fleet=u.fleet, index=u.slot, run_id=f"{u.fleet}-{u.slot}-run"
        )
        self.slots[(u.fleet, u.slot)] = replace(
            slot,
            create_failures=u.create_failures,
            next_create_at=u.next_create_at,
            next_zone=u.next_zone,
            last_error=u.last_error,
            preemptions=slot.preemptions + u.add_preemptions,
        )

    def live_in_slot(self, fleet: str, slot: int, slice_index: int = 0) -> bool:
        return any(
            i.key == (fleet, slot, slice_index) and i.phase in LIVE_PHASES
            for i in self.incs.values()
        )

    def current(self, incarnation_id: int, expected: NodePhase) -> IncarnationRecord | None:
        inc = self.incs.get(incarnation_id)
        if inc is None or inc.phase is not expected:
            found = "missing" if inc is None else inc.phase.value
            self.stale(f"#{incarnation_id}: expected {expected.value}, found {found}")
            return None
        return inc

    def apply(self, action: Action) -> None:
        match action:
            case RecordFleet():
                self._record_fleet(action)
            case OpenSlot():
                self._open_slot(action)
            case CreateNode():
                self._create(action)
            case DeleteNode():
                self._delete(action)
            case Transition():
                self._transition(action)
            case RecordCloud():
                inc = self.current(action.incarnation_id, action.expected)
                if inc is not None:
                    self.incs[inc.id] = _with_facts(inc, action.cloud)
            case Adopt():
                self._adopt(action)
            case HoldSlices():
                key = (action.fleet, action.slot)
                if key in self.slots:
                    self.slots[key] = replace(self.slots[key], held_since=action.since)
            case Notice():
                pass  # the runtime remembers plan.standing
            case _:
                raise TypeError(f"unknown action {action!r}")

    def _record_fleet(self, action: RecordFleet) -> None:
        old = self.fleets.get(action.fleet)
        self.fleets[action.fleet] = FleetRecord(
            name=action.fleet,
            spec_hash=action.spec_hash,
            spec_json=action.spec_json,
            applied_at=self.now,
            down=old.down if old else False,
        )

    def _open_slot(self, action: OpenSlot) -> None:
        key = (action.fleet, action.slot)
        if key not in self.slots:
            self.slots[key] = SlotRecord(
                fleet=action.fleet, index=action.slot, run_id=f"{key[0]}-{key[1]}-run"
            )

    def _requested(self, action: CreateNode | Adopt) -> IncarnationRecord:
        """A new incarnation as a create or an adopt first records it: REQUESTED."""
        return IncarnationRecord(
            id=self.next_id(),
            fleet=action.fleet,
            slot=action.slot,
            node_name=action.node_name,
            zone=action.zone,
            accelerator_type=action.accelerator_type,
            phase=NodePhase.REQUESTED,
            phase_since=self.now,
            requested_at=self.now,
            queued_resource=action.queued_resource,
            project=action.project,
            slice=action.slice,
            api=action.api,
        )

    def _create(self, action: CreateNode) -> None:
        if self.live_in_slot(action.fleet, action.slot, action.slice):
            self.stale(f"create {action.node_name}: the slot has a live incarnation")
            return
        inc = self._requested(action)
        self.incs[inc.id] = inc

    def _delete(self, action: DeleteNode) -> None:
        inc = self.current(action.incarnation_id, action.expected)
        if inc is None:
            return
        if inc.phase is not NodePhase.DELETING:
            inc = self.move(inc, NodePhase.DELETING)
            if action.end_reason:
                inc = replace(inc, end_reason=action.end_reason)
        if action.cause is not None:
            inc = replace(inc, loss_cause=action.cause)
        self.incs[inc.id] = replace(
            inc, delete_calls=inc.delete_calls + 1, last_delete_at=self.now, error=None
        )

    def _transition(self, action: Transition) -> None:
        inc = self.current(action.incarnation_id, action.expected)
        if inc is None:
            return
        inc = self.move(inc, action.new)
        if action.end_reason:
            inc = replace(inc, end_reason=action.end_reason)
        if action.cause is not None:
            inc = replace(inc, loss_cause=action.cause)
        if action.lost_at is not None:
            inc = replace(inc, cloud_lost_at=action.lost_at)
        if action.cloud is not None:
            inc = _with_facts(inc, action.cloud)
        self.incs[inc.id] = inc
        if action.slot_update is not None:
            self.slot_update(action.slot_update)

    def _adopt(self, action: Adopt) -> None:
        if self.live_in_slot(action.fleet, action.slot, action.slice):
            self.stale(f"adopt {action.node_name}: the slot has a live incarnation")
            return
        self.apply(OpenSlot(fleet=action.fleet, slot=action.slot, reason=action.reason))
        inc = _with_facts(self.move(self._requested(action), action.phase), action.cloud)
        if action.end_reason:
            inc = replace(inc, end_reason=action.end_reason)
        self.incs[inc.id] = inc


def _with_facts(inc: IncarnationRecord, f: CloudFacts) -> IncarnationRecord:
    return replace(
        inc,
        cloud_state=f.cloud_state,
        cloud_state_since=f.cloud_state_since,
        health=f.health,
        unhealthy_since=f.unhealthy_since,
        cloud_id=f.cloud_id,
        create_time=f.create_time,
        run_ends_at=f.run_ends_at,
        maintenance=f.maintenance,
    )


def apply_intent(
    snapshot: PlannerSnapshot,
    plan: Plan,
    now: datetime,
    *,
    strict: bool = True,
    id_floor: int = 0,
) -> PlainSnapshot:
    """Record every action's intent, in plan order. `strict` raises StaleAction where the
    executor would skip; new incarnation ids start above `id_floor` and every id in use
    (terminal incarnations leave the snapshot, so a caller that iterates passes the largest
    id it has seen, as a database sequence would)."""
    store = _Store(snapshot, now, strict, id_floor)
    for action in plan.actions:
        store.apply(action)
    return store.snapshot()


def record_outcome(
    snapshot: PlannerSnapshot,
    incarnation_id: int,
    now: datetime,
    *,
    operation: str | None = None,
    error: ErrorKind | None = None,
    accepted_create: bool = False,
) -> PlainSnapshot:
    """What the executor records when a call (or its operation) returns: an accepted create
    moves REQUESTED -> CREATING with its operation; otherwise `operation`/`error` are set."""
    incs = {i.id: i for i in snapshot.nodes.values()}
    inc = incs[incarnation_id]
    if accepted_create:
        check_transition(inc.phase, NodePhase.CREATING)
        inc = replace(
            inc, phase=NodePhase.CREATING, phase_since=now, operation=operation, error=None
        )
    else:
        inc = replace(inc, operation=operation, error=error)
    incs[incarnation_id] = inc
    return PlainSnapshot.of(snapshot.fleets.values(), snapshot.slots.values(), incs.values())
