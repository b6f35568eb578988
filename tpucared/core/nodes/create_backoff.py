"""A slot's create budget: backoff after failed creates, zone rotation, counters.

The node sub-planner (core/nodes/incarnations.py) attaches a `SlotUpdate` from here to the
Transition that ends a create (FAILED, or DEAD before READY), that reaches READY, or that records an
unplanned death, so the slot's bookkeeping changes in the same transaction as the phase.
Rules:
- A capacity error moves the slot to the fleet's next zone and retries at once; only when
  every zone failed in a row does it wait (capacity backoff, per full round of zones),
  counted from the failed create's post: a pace of creates, not a sleep after each failure.
- Other errors keep the zone and wait: transient backoff, or the long error backoff for
  quota, permission, invalid, not-found and a name held by someone else.
- Reaching READY resets the failures and keeps the zone that worked (sticky).
- An unplanned death of a node that was READY counts a preemption and recreates at once.
"""

from __future__ import annotations

from datetime import timedelta

from tpucared.core.model.backoff import delay, jitter
from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import ErrorKind
from tpucared.core.view import View
from tpucared.core.vocab.actions import SlotUpdate


def _zones(view: View, inc: IncarnationRecord) -> tuple[str, ...]:
    spec = view.specs.get(inc.fleet)
    return spec.zones if spec is not None and spec.zones else (inc.zone,)


def create_failed(view: View, inc: IncarnationRecord, kind: ErrorKind, why: str) -> SlotUpdate:
    slot = view.slot(inc.fleet, inc.slot)
    zones = _zones(view, inc)
    failures = slot.create_failures + 1
    here = zones.index(inc.zone) if inc.zone in zones else -1
    u = jitter(inc.fleet, inc.slot, slot.run_id, failures)
    if kind is ErrorKind.CAPACITY or (kind is ErrorKind.ALREADY_EXISTS and len(zones) > 1):
        # Capacity, or the name held here by a node we must not touch (someone else's, or
        # ours relabelled by a person): another zone may be free, so rotate.
        next_zone = zones[(here + 1) % len(zones)]
        rounds, rest = divmod(failures, len(zones))
        rule = (
            view.policy.capacity_backoff
            if kind is ErrorKind.CAPACITY
            else view.policy.error_backoff
        )
        # Mid-round: the next zone has not been tried yet, so try it now.
        wait = timedelta(0) if rest else delay(rule, rounds, u)
        if kind is ErrorKind.CAPACITY and wait:
            # A rate, not a sleep: the wait runs from the failed create's post, so the next
            # create goes as soon as the failure is seen once a whole wait has passed since.
            # How long the API takes to fail a create then costs no extra time, and the slot
            # still sends at most one create per wait (docs/daemon.md, "API requests").
            wait = max(timedelta(0), inc.requested_at + wait - view.now)
    else:
        next_zone = zones[here] if here >= 0 else zones[0]
        # ALREADY_EXISTS in a fleet's only zone: someone else holds the name and a person
        # must act, so it waits like the hard errors.
        rule = (
            view.policy.error_backoff
            if kind is ErrorKind.ALREADY_EXISTS
            else view.policy.backoff_for(kind)
        )
        wait = delay(rule, failures, u)
    return SlotUpdate(
        fleet=inc.fleet,
        slot=inc.slot,
        create_failures=failures,
        next_create_at=view.now + wait if wait else None,
        next_zone=next_zone,
        # The executor stored the API's message in last_error when the call failed; keep it.
        last_error=slot.last_error or f"{kind.value}: {why}",
    )


def create_succeeded(view: View, inc: IncarnationRecord) -> SlotUpdate:
    return SlotUpdate(
        fleet=inc.fleet,
        slot=inc.slot,
        create_failures=0,
        next_create_at=None,
        next_zone=inc.zone,
        last_error=None,
    )


def node_died(view: View, inc: IncarnationRecord) -> SlotUpdate:
    slot = view.slot(inc.fleet, inc.slot)
    return SlotUpdate(
        fleet=inc.fleet,
        slot=inc.slot,
        create_failures=slot.create_failures,
        next_create_at=None,  # recreate the moment the name is free again
        next_zone=slot.next_zone,
        last_error=slot.last_error,
        add_preemptions=1,
    )


def retry_wait(view: View, inc: IncarnationRecord, kind: ErrorKind) -> timedelta:
    """How long after the last delete call a failed delete is issued again."""
    u = jitter(inc.id, inc.node_name, inc.delete_calls)
    return delay(view.policy.backoff_for(kind), max(inc.delete_calls, 1), u)


def waiting_for_capacity(
    create_failures: int, last_create_outcome: str | None, *, live: bool, done: bool, down: bool
) -> bool:
    """The slot has no live node because its last create met a stockout (CAPACITY), and the
    daemon keeps retrying it (the slot is not done, its fleet not down): not given up. What
    `status` shows as "waiting for capacity" and what a stockout notification counts."""
    if down or done or live:
        return False
    return create_failures > 0 and last_create_outcome == ErrorKind.CAPACITY.value
