"""Bad hosts: a READY node whose workers fail the pre-launch check is recycled, on its own budget.

Where it sits: before every new attempt the runtime's executor (runtime/workload/executor.py)
runs the pre-launch check on every worker in one SSH command (launch/sh/cleanup.sh): whatever
holds the accelerator's devices is killed, then the fleet's own `workload.health_check` runs
on the freed TPU. A worker still held after the kill (`SlotProbe.busy`) or failing the health
check (`SlotProbe.unhealthy`) makes its node a bad host; the executor refuses the launch and
the next probe tells the workload planner (planner.py), which calls `recycle` here.

Rules (pure: the probe and the slot's facts in, actions and holds out):
- a bad host is deleted with cause `bad_host` (core/model/causes.py), a planned DeleteNode of
  the READY node; the slot then gets a new node like any empty slot (core/nodes/slots.py). A
  single-slice slot of a fleet with more than one zone tries the zone after the bad host's
  first: a Transition READY -> DELETING carries the slot's next zone, then the DeleteNode (a
  host that comes up held seconds after a preemption may share its zone's trouble, and the
  zone list is the fleet's own order of preference). A multislice slot keeps its slices' zone;
- the attempt was never recorded (the executor refused before it), so `max_failures` is not
  touched: bad hosts have their own budget, `max_bad_hosts` per slot in a rolling day,
  counted from the store (nodes of the slot ended with cause bad_host: `SlotProbe.bad_hosts`,
  their end times, read by the executor when it found the bad host);
- past the budget the node is kept and the slot held, with a notice for a person: recycling
  more would only burn creates on a zone or image that keeps failing. The hold lifts by
  itself once the oldest counted bad host is a day old, or when a person deletes the node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.vocab.actions import Action, DeleteNode, Notice, Severity, SlotUpdate, Transition
from tpucared.core.vocab.plan import Hold
from tpucared.core.workload.inputs import SlotProbe
from tpucared.core.workload.slot_work import SlotWork

P = NodePhase
BAD_HOST_WINDOW = timedelta(days=1)
END_REASON = "bad host"


def ended_at(inc: IncarnationRecord) -> datetime:
    """When an incarnation's loss was decided: its delete's end, else when it left READY."""
    return inc.deleted_at or inc.dead_at or inc.phase_since


def bad_host_ends(incs: Iterable[IncarnationRecord]) -> tuple[datetime, ...]:
    """The end times of the slot's incarnations lost as bad hosts (any age), oldest first."""
    return tuple(sorted(ended_at(i) for i in incs if i.loss_cause is LossCause.BAD_HOST))


def within_day(ends: Iterable[datetime], now: datetime) -> list[datetime]:
    """The bad hosts that count against today's budget: ended in the last 24 h."""
    return sorted(e for e in ends if now - e < BAD_HOST_WINDOW)


def recycle(
    w: SlotWork, probe: SlotProbe, nodes: Sequence[IncarnationRecord]
) -> tuple[list[Action], list[Hold]]:
    """The plan for bad hosts `nodes` (the slot's node, or the gang's slices holding the
    workers that failed): recycle them, or hold the slot when its budget is spent."""
    assert w.spec is not None
    assert w.node is not None
    what = words(probe)
    recent = within_day(probe.bad_hosts, w.now)
    budget = w.spec.max_bad_hosts
    if len(recent) >= budget:
        until = recent[0] + BAD_HOST_WINDOW if recent else None
        why = (
            f"{len(recent)} bad hosts in the last 24 h, max_bad_hosts = {budget}: keeping "
            f"{w.node.node_name} ({what}) for a person"
        )
        notice = Notice(
            key=f"bad-hosts/{w.fleet}/{w.index}",
            severity=Severity.ERROR,
            fleet=w.fleet,
            node=w.node.node_name,
            reason=f"{w.fleet}/{w.index} holds: {why}. Delete the node to try another, or "
            "raise max_bad_hosts.",
        )
        hold = Hold(fleet=w.fleet, slot=w.index, node_name=w.node.node_name, reason=why,
                    until=until)  # fmt: skip
        return [notice], [hold]
    actions: list[Action] = []
    for node in nodes:
        reason = f"replace {node.node_name}: bad host ({what}); bad host {len(recent) + 1} of " \
            f"{budget} today"  # fmt: skip
        actions += replace_elsewhere(w, node, reason, END_REASON, LossCause.BAD_HOST)
    return actions, []


def replace_elsewhere(
    w: SlotWork, node: IncarnationRecord, reason: str, end_reason: str, cause: LossCause
) -> list[Action]:
    """A planned delete of the READY `node` with `cause`; a single-slice slot of a fleet with
    several zones tries the zone after the node's first (the module docstring; also a node
    replaced before its maintenance window, maintenance.py)."""
    out: list[Action] = []
    update = _next_zone(w, node)
    if update is not None:
        # The slot's next zone moves with the node's end, in the same transaction.
        out.append(
            Transition(
                incarnation_id=node.id,
                node_name=node.node_name,
                expected=P.READY,
                new=P.DELETING,
                end_reason=end_reason,
                cause=cause,
                slot_update=update,
                reason=reason,
            )
        )
    seen = P.DELETING if update is not None else P.READY
    out.append(DeleteNode.of(node, seen, reason=reason, end_reason=end_reason, cause=cause))
    return out


def words(probe: SlotProbe) -> str:
    """`worker(s) 1 still held after the kill; worker(s) 0 failed the health check`."""
    parts = []
    if probe.busy:
        parts.append(f"worker(s) {_list(probe.busy)} still held after the kill")
    if probe.unhealthy:
        parts.append(f"worker(s) {_list(probe.unhealthy)} failed the health check")
    return "; ".join(parts) or "no worker named"


def _next_zone(w: SlotWork, node: IncarnationRecord) -> SlotUpdate | None:
    """The slot's bookkeeping with its next create in the zone after the bad host's (a
    single-slice slot of a fleet with several zones); None: leave the slot as it is."""
    slot = w.slot
    if slot is None or w.gang is not None or len(w.zones) < 2:
        return None
    here = w.zones.index(node.zone) if node.zone in w.zones else -1
    return SlotUpdate(
        fleet=node.fleet,
        slot=node.slot,
        create_failures=slot.create_failures,
        next_create_at=slot.next_create_at,
        next_zone=w.zones[(here + 1) % len(w.zones)],
        last_error=slot.last_error,
    )


def _list(workers: Iterable[int]) -> str:
    return ", ".join(str(i) for i in workers)
