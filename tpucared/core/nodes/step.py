"""One incarnation's step in the making, and what the per-phase rules share (the rules:
core/nodes/incarnations.py).

`Step` accumulates the actions planned for one live incarnation and tracks the phase they would
leave it in: it records the cloud's facts at most once, deletes by name only while no one else
holds the name, and ends a failed create with the slot's backoff (core/nodes/create_backoff.py).
Also here: the moves that end a node (`die`, `fail_dead`, `external_delete`), and the helpers
about facts (`cloud_facts`: what the list shows, against what is recorded), ownership (`ours`,
`labels_pending`, a name held by another) and expiry (`stuck_reason`, by the timeouts of
core/vocab/stuck.py).
"""

from __future__ import annotations

from datetime import datetime

from tpucared.core.model.causes import LossCause
from tpucared.core.model.durations import fmt as _fmt
from tpucared.core.model.lifecycle import PENDING_PHASES
from tpucared.core.model.observed import LossRecords, MaintenanceWindow, StateClass
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, ErrorKind
from tpucared.core.nodes import create_backoff as budget
from tpucared.core.nodes import flex
from tpucared.core.nodes.cloud import ABSENT, is_unhealthy, queued_pseudo_state
from tpucared.core.nodes.losses import in_window, seen_cause
from tpucared.core.nodes.preemption import loss_of, record_of, worded
from tpucared.core.view import Sighting, View
from tpucared.core.vocab.actions import (
    Action,
    CloudFacts,
    DeleteNode,
    Loss,
    Notice,
    RecordCloud,
    Severity,
    SlotUpdate,
    Transition,
)
from tpucared.core.vocab.policy import HARD_ERRORS

P = NodePhase
PENDING = PENDING_PHASES


class Step:
    """Accumulates one incarnation's actions, tracking its phase as they would leave it."""

    def __init__(self, view: View, inc: IncarnationRecord) -> None:
        self.view = view
        self.inc = inc
        self.phase = inc.phase
        self.phase_since = inc.phase_since
        self.actions: list[Action] = []
        self._recorded = False

    @property
    def now(self) -> datetime:
        return self.view.now

    def move(
        self,
        new: NodePhase,
        reason: str,
        *,
        end_reason: str | None = None,
        cloud: CloudFacts | None = None,
        slot_update: SlotUpdate | None = None,
        cause: LossCause | None = None,
        lost_at: datetime | None = None,
    ) -> None:
        self.actions.append(
            Transition(
                incarnation_id=self.inc.id,
                node_name=self.inc.node_name,
                expected=self.phase,
                new=new,
                reason=reason,
                end_reason=end_reason,
                cloud=None if self._recorded else cloud,
                slot_update=slot_update,
                cause=cause,
                lost_at=lost_at,
            )
        )
        self._recorded = self._recorded or cloud is not None
        self.phase = new
        self.phase_since = self.now

    def record(self, facts: CloudFacts) -> None:
        if self._recorded or not _differs(self.inc, facts):
            return
        state = facts.cloud_state or "?"
        self.actions.append(
            RecordCloud(
                incarnation_id=self.inc.id,
                node_name=self.inc.node_name,
                expected=self.phase,
                cloud=facts,
                reason=f"cloud shows {state}"
                + (f", health {facts.health}" if facts.health else ""),
            )
        )
        self._recorded = True

    def delete(
        self, reason: str, *, end_reason: str | None = None, cause: LossCause | None = None
    ) -> None:
        """Delete by name, unless a successful list shows the name held by something not
        ours: then our node is gone and a delete would hit theirs, so just stop tracking.
        `cause`: why the node is lost (None: our own choice, or recorded already)."""
        inc = self.inc
        if _name_held_by_another(self.view, inc):
            _end_without_delete(self, end_reason or reason, cause)
            return
        end = end_reason if self.phase is not P.DELETING else None
        self.actions.append(
            DeleteNode.of(inc, self.phase, reason=reason, end_reason=end, cause=cause)
        )
        self.phase = P.DELETING

    def fail(self, kind: ErrorKind, why: str, cloud: CloudFacts | None = None) -> None:
        """End a create that produced no usable node: FAILED, with the slot's backoff."""
        update = budget.create_failed(self.view, self.inc, kind, why)
        self.move(
            P.FAILED,
            with_retry(why, update, self.now),
            end_reason=f"create failed: {kind.value}",
            cloud=cloud,
            slot_update=update,
        )
        if kind in HARD_ERRORS:
            self.notice(
                f"create-failed/{self.inc.id}",
                Severity.ERROR,
                f"creating {self.inc.node_name} in {self.inc.zone} failed ({update.last_error}); "
                f"a person must fix this; {with_retry('retrying', update, self.now)}",
            )

    def notice(self, key: str, severity: Severity, message: str) -> None:
        self.actions.append(
            Notice(
                key=key,
                severity=severity,
                fleet=self.inc.fleet,
                node=self.inc.node_name,
                reason=message,
            )
        )


# ---------------------------------------------------------------------------------------------
# Moves that end a node


def die(
    step: Step,
    reason: str,
    facts: CloudFacts,
    s: Sighting,
    *,
    lost: bool = False,
    cause: LossCause | None = None,
) -> None:
    """An unplanned death of a READY node: DEAD, then delete (or DELETED if nothing is left).
    `lost`: a dead state or a vanishing, which a cloud whose node states do not say
    "preempted" words by its preemption records, read this tick (core/nodes/preemption.py
    `worded`; the runtime read them for the `suspects`), unless it
    is a flex-start run's end (core/nodes/flex.py): neither a preemption nor a failure.
    `cause`: the loss's cause when the caller knows it (STUCK); else what the lists tell
    (core/nodes/losses.py `seen_cause`). Where the record found says when the cloud lost the
    node, the Transition carries that instant (`lost_at`, nodes.cloud_lost_at): the ledger
    starts the loss there, not at this tick."""
    if not (lost and _run_ended(step, P.DEAD, reason, facts)):
        if cause is None:
            window = _window(step, facts)
            cause = seen_cause(window, s.node, facts.health, _lost_at(step, facts))
        end_reason, why = reason, reason
        lost_at = None
        loss = loss_of(step.view, step.inc, reason) if lost else None
        if loss is not None:  # worded by the cloud's records, where they were read
            found = step.view.loss_records(loss.project, loss.zone)
            cloud = step.view.abilities(loss.api)
            end_reason, why, cause = worded(loss, reason, cause, found, cloud)
            lost_at = _cloud_lost_at(step, loss, found)
        step.move(
            P.DEAD,
            why,
            end_reason=end_reason,
            cloud=facts,
            slot_update=budget.node_died(step.view, step.inc),
            cause=cause,
            lost_at=lost_at,
        )
    if s.gone:
        step.move(P.DELETED, "nothing left to delete")
    else:
        step.delete("dead: delete it at once")


def fail_dead(
    step: Step,
    reason: str,
    kind: ErrorKind,
    facts: CloudFacts,
    s: Sighting,
    *,
    cause: LossCause | None = None,
) -> SlotUpdate:
    """A pending create that left a dead resource behind: DEAD and delete, slot backoff (the
    slot's update, returned). `cause`: set where the node is lost rather than never made
    (stuck past its timeout)."""
    update = budget.create_failed(step.view, step.inc, kind, reason)
    step.move(P.DEAD, reason, end_reason=reason, cloud=facts, slot_update=update, cause=cause)
    if s.gone:
        step.move(P.DELETED, "nothing left to delete")
    else:
        step.delete("dead: delete it at once")
    return update


def external_delete(step: Step, facts: CloudFacts) -> None:
    """Someone else is deleting the node: follow it to DELETING; the slot counts a death,
    unless it is the cloud ending a flex-start run (core/nodes/flex.py). Its cause is
    DELETED_OUTSIDE, or MAINTENANCE inside its announced window (core/nodes/losses.py)."""
    if step.phase is P.READY and _run_ended(step, P.DELETING, "being deleted by the cloud", facts):
        return
    maintained = in_window(_window(step, facts), _lost_at(step, facts))
    step.move(
        P.DELETING,
        "being deleted outside tpucared",
        end_reason="deleted outside tpucared",
        cloud=facts,
        slot_update=budget.node_died(step.view, step.inc),
        cause=LossCause.MAINTENANCE if maintained else LossCause.DELETED_OUTSIDE,
    )


def _run_ended(step: Step, phase: NodePhase, why: str, facts: CloudFacts) -> bool:
    """If the node's loss is its flex-start run's end (core/nodes/flex.py), move it to `phase`
    as such (neither a preemption nor a failure: no backoff) and say True."""
    spec = step.view.specs.get(step.inc.fleet)
    if not flex.run_ended(spec, facts.run_ends_at, facts.cloud_state_since or step.now):
        return False
    step.move(
        phase,
        f"{why}: {flex.how(facts.run_ends_at)}",
        end_reason=flex.RUN_ENDED,
        cloud=facts,
        slot_update=flex.run_over(step.view, step.inc),
        cause=LossCause.RUN_ENDED,
    )
    return True


def _window(step: Step, facts: CloudFacts) -> MaintenanceWindow | None:
    """The maintenance window a loss is judged by: as listed now, else as recorded before
    (the cloud may stop announcing a window once it has begun)."""
    return facts.maintenance or step.inc.maintenance


def _cloud_lost_at(step: Step, loss: Loss, found: LossRecords | None) -> datetime | None:
    """When the cloud says it lost the node: the time of its record of this node (Compute
    Engine: the operation's insertTime, gcp/compute/cloud.py `preemptions`). None when no
    record was read or found, it gives no time, or one after this tick (a clock gone wrong
    is no evidence)."""
    if found is None or found.error is not None:
        return None
    record = record_of(loss, found.records)
    if record is None or record.at is None or record.at > step.now:
        return None
    return record.at


def _lost_at(step: Step, facts: CloudFacts) -> datetime:
    """When the lists first showed the loss: the start of the state it is lost to."""
    return facts.cloud_state_since or step.now


def _end_without_delete(step: Step, why: str, cause: LossCause | None = None) -> None:
    reason = f"{why}; the name is now held by a node that is not ours: nothing to delete"
    if step.phase in PENDING:
        step.move(P.FAILED, reason, end_reason=why)
        return
    if step.phase is P.READY:
        step.move(P.DEAD, reason, end_reason=why, cause=cause)
    step.move(P.DELETED, reason)


# ---------------------------------------------------------------------------------------------
# Facts, ownership, expiry


def ours(view: View, inc: IncarnationRecord, s: Sighting) -> bool:
    """Every listed part (node, queued resource) carries our labels for this fleet."""
    parts = [r.labels for r in (s.node, s.queued) if r is not None]
    return all(
        labels.get(OWNER_LABEL) == view.owner and labels.get(FLEET_LABEL) == inc.fleet
        for labels in parts
    )


def _name_held_by_another(view: View, inc: IncarnationRecord) -> bool:
    """A successful list shows the incarnation's name held by something not ours (checked
    on whichever of the node and queued lists succeeded)."""
    occupant = view.occupant(inc.project, inc.zone, inc.node_name)
    if occupant is None:
        return False
    held = []
    if occupant.node is not None and view.zone_known(inc.project, inc.zone):
        held.append(occupant.node.labels)
    if occupant.queued is not None and view.zone_known(inc.project, inc.zone, queued=True):
        held.append(occupant.queued.labels)
    return any(
        labels.get(OWNER_LABEL) != view.owner or labels.get(FLEET_LABEL) != inc.fleet
        for labels in held
    )


def labels_pending(inc: IncarnationRecord, s: Sighting) -> bool:
    """A node we are creating, listed without any labels yet: no verdict until it has some."""
    node = s.node
    return (
        inc.phase in PENDING
        and node is not None
        and node.state_class is StateClass.CREATING
        and not node.labels
        and s.queued is None
    )


def cloud_facts(step: Step, s: Sighting, *, endpoints: bool = False) -> CloudFacts:
    """What the lists show of the incarnation, as facts to record: a state (or an unhealthy
    streak) that has not changed keeps its recorded start."""
    inc, now = step.inc, step.now
    node, qr = s.node, s.queued
    health: str | None = None
    cloud_id, create_time = inc.cloud_id, inc.create_time
    run_ends_at = inc.run_ends_at  # kept once the node is gone: its loss is judged by it
    maintenance = inc.maintenance  # kept likewise: the window it was lost in, if any
    if node is not None:
        state = str(node.state)  # a plain string in the record, whatever the adapter's type
        health = node.health
        cloud_id = node.cloud_id or cloud_id
        create_time = node.create_time or create_time
        run_ends_at = node.run_ends_at or run_ends_at
        maintenance = node.maintenance  # a window no longer listed is over (or called off)
    elif qr is not None:
        state = queued_pseudo_state(qr.state)
    else:
        state = ABSENT
    same = state == inc.cloud_state and inc.cloud_state_since is not None
    unhealthy_since = None
    if is_unhealthy(health):
        streak = is_unhealthy(inc.health) and inc.unhealthy_since is not None
        unhealthy_since = inc.unhealthy_since if streak else now
    return CloudFacts(
        cloud_state=state,
        cloud_state_since=inc.cloud_state_since if same else now,
        health=health,
        unhealthy_since=unhealthy_since,
        cloud_id=cloud_id,
        create_time=create_time,
        endpoints=node.endpoints if endpoints and node is not None else None,
        run_ends_at=run_ends_at,
        maintenance=maintenance,
    )


def _differs(inc: IncarnationRecord, f: CloudFacts) -> bool:
    return (
        f.cloud_state != inc.cloud_state
        or f.cloud_state_since != inc.cloud_state_since
        or f.health != inc.health
        or f.unhealthy_since != inc.unhealthy_since
        or f.cloud_id != inc.cloud_id
        or f.create_time != inc.create_time
        or f.run_ends_at != inc.run_ends_at
        or f.maintenance != inc.maintenance
    )


def stuck_reason(step: Step, rule: str, start: datetime | None, what: str) -> str | None:
    """Why `what`, lasting since `start`, counts as stuck by the timeout `rule`
    (core/vocab/stuck.py); None while it has not timed out or has no timeout."""
    timeout = step.view.policy.timeout(rule)
    if timeout is None or start is None:
        return None
    age = step.now - start
    if age < timeout:
        return None
    return f"stuck: {what} for {_fmt(age)} (timeout {rule} = {_fmt(timeout)})"


def with_retry(why: str, update: SlotUpdate, now: datetime) -> str:
    zone = f" in {update.next_zone}" if update.next_zone else ""
    if update.next_create_at is None:
        return f"{why}; next create{zone} at once"
    return f"{why}; next create{zone} in {_fmt(update.next_create_at - now)}"
