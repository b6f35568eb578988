"""A preemption, not a failure: how a lost node's end is worded where its state does not say.

A TPU API node says PREEMPTED itself. A Compute Engine spot VM does not: preempted with
`instanceTerminationAction: STOP` it turns TERMINATED (STOPPING first), with DELETE it simply
vanishes, and the evidence that it was preempted is a zone operation of type
`compute.instances.preempted` naming it (docs/research/compute-engine.md §4.3). So, for a
cloud API in `RECORDS` (the name of its preemption record):

1. `die` (core/nodes/step.py) marks the Transition that ends a READY node lost to a dead state
   or to a vanishing with a `Loss` (`loss_of`); the rest of the plan is made as for any loss
   (the slot counts one preemption: `create_backoff.node_died`, whatever the records say).
2. The runtime collects the plan's `losses`, reads the preemption records of each of their
   locations once (the optional port method `PreemptionRecords.preemptions`, ports/cloud.py),
   only in a tick that has a loss, never every tick, and hands them back as `ZoneRecords`.
3. `explain` rewords each marked Transition by what was found, before the plan is carried out:

   a record of this node (its name, and its cloud id when both say one)
       a preemption record: end_reason "preempted", cause PREEMPTED; a host-maintenance
       record (`compute.instances.hostMaintenance` / `terminateOnHostMaintenance`):
       end_reason "host maintenance", cause MAINTENANCE; the event says when, and which
       record. A loss inside its announced maintenance window stays MAINTENANCE;
   none, and its fleet asks for spot capacity
       end_reason "<how>: counted as preempted" (the slot counts a preemption, as it always
       has), but the cause stays UNKNOWN: nothing tells it; the event says no record was
       found (or that they could not be read);
   none, another tier
       the end as the lists showed it ("vanished", "terminated"), the event says no record,
       the cause stays UNKNOWN.

A location whose records were not read (`tpucared plan`, a cloud without the method) keeps
the end as the lists showed it. Pure: the runtime does the reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import PreemptionRecord, RecordKind
from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import COMPUTE_API, CapacityKind
from tpucared.core.vocab.actions import Loss, Transition
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.view import View

# The cloud APIs whose node states do not say "preempted", by what their record of one is
# (their host-maintenance records are read with them: `ENDS`).
RECORDS: Mapping[str, str] = {COMPUTE_API: "compute.instances.preempted operation"}
# What each kind of record says: the loss's cause, and words for the Transition's reason.
CAUSES: Mapping[RecordKind, LossCause] = {
    RecordKind.PREEMPTED: LossCause.PREEMPTED,
    RecordKind.HOST_MAINTENANCE: LossCause.MAINTENANCE,
}
ENDS: Mapping[RecordKind, tuple[str, str]] = {
    RecordKind.PREEMPTED: ("preempted", "compute.instances.preempted operation"),
    RecordKind.HOST_MAINTENANCE: ("terminated for host maintenance", "host-maintenance operation"),
}
# The end_reason a record's cause gives the incarnation.
ENDS_AS: Mapping[LossCause, str] = {
    LossCause.PREEMPTED: "preempted",
    LossCause.MAINTENANCE: "host maintenance",
}
SPOT = frozenset({CapacityKind.SPOT, CapacityKind.PREEMPTIBLE})

Where = tuple[str, str, str]  # (api, project as the core names it, zone)


@dataclass(frozen=True)
class ZoneRecords:
    """The preemption records read for one location: every one that names one of the lost
    nodes; `error` when they could not be read (nothing is known then)."""

    records: tuple[PreemptionRecord, ...] = ()
    error: str | None = None


def loss_of(view: View, inc: IncarnationRecord, how: str) -> Loss | None:
    """The `Loss` to mark on the Transition that ends READY `inc` (`how`: what the lists
    showed), or None when its cloud's node states say "preempted" themselves."""
    if inc.api not in RECORDS:
        return None
    spec = view.specs.get(inc.fleet)
    return Loss(
        api=inc.api,
        project=inc.project,
        zone=inc.zone,
        node_name=inc.node_name,
        cloud_id=inc.cloud_id,
        how=how,
        spot=spec is not None and spec.capacity in SPOT,
    )


def losses(plan: Plan) -> tuple[Loss, ...]:
    """The losses a plan marks, whose locations' records the runtime reads."""
    return tuple(a.loss for a in plan.actions if isinstance(a, Transition) and a.loss is not None)


def where(loss: Loss) -> Where:
    return (loss.api, loss.project, loss.zone)


def explain(plan: Plan, found: Mapping[Where, ZoneRecords]) -> Plan:
    """`plan` with each marked Transition worded by the records read for its location
    (module docstring); a location not in `found` leaves its Transitions as they are."""
    if not found:
        return plan
    actions = tuple(
        _explained(a, found.get(where(a.loss)))
        if isinstance(a, Transition) and a.loss is not None
        else a
        for a in plan.actions
    )
    return replace(plan, actions=actions)


def record_of(loss: Loss, records: tuple[PreemptionRecord, ...]) -> PreemptionRecord | None:
    """The latest record of this node: its name, and the same cloud id where both say one
    (a record of an earlier node of the same name is not this one's)."""
    mine = [
        r
        for r in records
        if r.name == loss.node_name
        and (r.cloud_id is None or loss.cloud_id is None or r.cloud_id == loss.cloud_id)
    ]
    return max(mine, key=lambda r: r.at or datetime.min.replace(tzinfo=UTC), default=None)


def _explained(t: Transition, zone: ZoneRecords | None) -> Transition:
    loss = t.loss
    if loss is None or zone is None:
        return t
    what = RECORDS.get(loss.api, "preemption record")
    record = None if zone.error is not None else record_of(loss, zone.records)
    # A loss inside its announced maintenance window stays MAINTENANCE whatever the record
    # (core/nodes/losses.py: host-maintenance terminations are logged as preemptions too).
    window = t.cause is LossCause.MAINTENANCE
    if record is not None:
        at = _when(record.at)
        named = f" {record.record}" if record.record else ""
        cause = LossCause.MAINTENANCE if window else CAUSES[record.kind]
        done, record_words = ENDS[record.kind]
        reason = f"{done} at {at} (its {record_words}{named}); {loss.how}"
        return replace(t, end_reason=ENDS_AS[cause], reason=reason, cause=cause)
    if zone.error is not None:
        missing = f"its {what} could not be read ({zone.error})"
    else:
        missing = f"no {what} names it"
    # No record: the cause stays what the lists told (UNKNOWN, or MAINTENANCE by its
    # window), never a guess, even where the slot counts the loss as a preemption.
    if loss.spot and not window:
        reason = f"{loss.how}: a spot VM lost, {missing}: counted as a preemption"
        return replace(t, end_reason=f"{loss.how}: counted as preempted", reason=reason)
    return replace(t, reason=f"{t.reason} ({missing})")


def _when(at: datetime | None) -> str:
    if at is None:
        return "an unknown time"
    return at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
