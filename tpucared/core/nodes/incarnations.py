"""The node sub-planner: one live incarnation, what the lists show of it -> its next steps.

For each incarnation in a LIVE phase of a managed fleet, `plan_incarnation` reads the
incarnation's `Sighting` (core/planning/view.py) and its recorded call outcome (`error`,
`operation`) and returns the actions that move it along its lifecycle (core/nodes/lifecycle.py),
plus the phase it will be in once they are applied. Rules, by phase:

REQUESTED/CREATING  the node (or queued resource) is listed with our labels -> the phase its
    state implies (READY; DEAD and delete; DELETING when someone else deletes it); a recorded
    error -> FAILED with the slot's backoff (core/nodes/create_backoff.py), unless the node is
    listed after all; not listed -> wait for the create's outcome, `requested`/`creating` timeouts
    and the list-after-create grace; listed without our labels -> FAILED, never touched.
READY  dead cloud state, unhealthy past its grace, stuck in a transient state past its
    timeout, or missing from successful lists for `vanish_grace` -> DEAD and delete at once
    (straight to DELETED when nothing is left to delete).
DEAD  delete (or DELETED when nothing is listed any more).
DELETING  gone from a successful list, or the delete found NOT_FOUND -> DELETED; otherwise
    delete again after the error's backoff or the `deleting` timeout.
Any phase: nothing is concluded from a zone whose list failed (`Sighting.known` False),
except what a call outcome recorded on the incarnation says by itself.
Finally, a slot that is no longer wanted (scaled down, fleet down, workload done) gets its
still-pending or READY node deleted.
"""

from __future__ import annotations

from datetime import datetime

from tpucared.core.model.durations import fmt as _fmt
from tpucared.core.model.observed import CloudState, QueuedState
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, ErrorKind
from tpucared.core.nodes import create_backoff as budget
from tpucared.core.nodes.cloud import (
    ABSENT,
    DEAD_STATES,
    QUEUED_DEAD,
    is_unhealthy,
    queued_pseudo_state,
)
from tpucared.core.nodes.lifecycle import PENDING_PHASES, SERVING_PHASES
from tpucared.core.nodes.stuck import CLOUD_RULE, QUEUED_RULE
from tpucared.core.planning.actions import (
    Action,
    CloudFacts,
    DeleteNode,
    Notice,
    RecordCloud,
    Severity,
    SlotUpdate,
    Transition,
)
from tpucared.core.planning.policy import HARD_ERRORS
from tpucared.core.planning.view import Sighting, View

P = NodePhase
PENDING = PENDING_PHASES
SERVING = SERVING_PHASES


def plan_incarnation(view: View, inc: IncarnationRecord) -> tuple[list[Action], NodePhase]:
    s = view.sighting(inc)
    if _unchanged_ready(view, inc, s):
        return [], P.READY
    step = _Step(view, inc)
    if s.known and s.present and not _ours(view, inc, s):
        if not _labels_pending(inc, s):
            _release(step, s)
    elif inc.phase in PENDING:
        _pending(step, s)
    elif inc.phase is P.READY:
        _ready(step, s)
    elif inc.phase is P.DEAD:
        _dead(step, s)
    elif inc.phase is P.DELETING:
        _deleting(step, s)
    unwanted = view.unwanted(inc.fleet, inc.slot)
    if unwanted is not None and step.phase in SERVING and not _labels_pending(inc, s):
        step.delete(unwanted, end_reason=unwanted)
    return step.actions, step.phase


def _unchanged_ready(view: View, inc: IncarnationRecord, s: Sighting) -> bool:
    """A READY incarnation listed READY and healthy, with our labels, exactly as recorded, in
    a slot still wanted: the rules below give it no action. Nearly every node of a big fleet
    is in this case at nearly every tick, so it is answered here without building the facts
    and actions the general path compares (a performance shortcut: same result)."""
    node = s.node
    return (
        inc.phase is P.READY
        and node is not None
        and s.queued is None
        and inc.queued_resource is None
        and node.state is CloudState.READY
        and inc.cloud_state == CloudState.READY.value
        and inc.cloud_state_since is not None
        and node.health == inc.health
        and not is_unhealthy(node.health)
        and inc.unhealthy_since is None
        and (node.cloud_id or inc.cloud_id) == inc.cloud_id
        and (node.create_time or inc.create_time) == inc.create_time
        and s.known
        and node.labels.get(OWNER_LABEL) == view.owner  # _ours, for a node alone
        and node.labels.get(FLEET_LABEL) == inc.fleet
        and view.unwanted(inc.fleet, inc.slot) is None
    )


class _Step:
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

    def delete(self, reason: str, *, end_reason: str | None = None) -> None:
        """Delete by name, unless a successful list shows the name held by something not
        ours: then our node is gone and a delete would hit theirs, so just stop tracking."""
        inc = self.inc
        if _name_held_by_another(self.view, inc):
            _end_without_delete(self, end_reason or reason)
            return
        self.actions.append(
            DeleteNode(
                incarnation_id=inc.id,
                fleet=inc.fleet,
                slot=inc.slot,
                node_name=inc.node_name,
                zone=inc.zone,
                expected=self.phase,
                queued_resource=inc.queued_resource,
                end_reason=end_reason if self.phase is not P.DELETING else None,
                reason=reason,
            )
        )
        self.phase = P.DELETING

    def fail(self, kind: ErrorKind, why: str, cloud: CloudFacts | None = None) -> None:
        """End a create that produced no usable node: FAILED, with the slot's backoff."""
        update = budget.create_failed(self.view, self.inc, kind, why)
        self.move(
            P.FAILED,
            _with_retry(why, update, self.now),
            end_reason=f"create failed: {kind.value}",
            cloud=cloud,
            slot_update=update,
        )
        if kind in HARD_ERRORS:
            self.notice(
                f"create-failed/{self.inc.id}",
                Severity.ERROR,
                f"creating {self.inc.node_name} in {self.inc.zone} failed ({update.last_error}); "
                f"a person must fix this; {_with_retry('retrying', update, self.now)}",
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
# Phases


def _pending(step: _Step, s: Sighting) -> None:
    """REQUESTED (create outcome not recorded yet) and CREATING (accepted, not READY)."""
    inc = step.inc
    error = inc.error
    if error is not None:
        if not s.known:
            if error is not ErrorKind.ALREADY_EXISTS:
                # Safe even blind: if the node exists after all, the next create of the same
                # name gets ALREADY_EXISTS and it is adopted then.
                step.fail(error, f"create failed: {error.value}")
            return  # ALREADY_EXISTS: wait for a list that says whose node it is
        if s.present:
            node = s.node
            ready = node is not None and node.state is CloudState.READY
            if ready or inc.phase is P.REQUESTED or error is ErrorKind.ALREADY_EXISTS:
                _arrive(step, s, f"the create reported {error.value} but the node is listed")
            else:
                facts = _facts(step, s)
                _fail_dead(step, f"create operation failed: {error.value}", error, facts, s)
            return
        kind = ErrorKind.TRANSIENT if error is ErrorKind.ALREADY_EXISTS else error
        step.fail(kind, f"create failed: {error.value}", _facts(step, s))
        return
    if not s.known:
        return
    if s.present:
        _arrive(step, s, "the create went through")
        return
    _absent_pending(step, s)


def _arrive(step: _Step, s: Sighting, why: str) -> None:
    """A pending incarnation's resource is listed with our labels: follow its state."""
    facts = _facts(step, s, endpoints=True)
    node, qr = s.node, s.queued
    qr_dead = qr is not None and qr.state in QUEUED_DEAD
    if node is not None and node.state is CloudState.READY and not qr_dead:
        step.move(
            P.READY,
            f"{step.inc.node_name} is READY",
            cloud=facts,
            slot_update=budget.create_succeeded(step.view, step.inc),
        )
        return
    if node is not None and node.state in DEAD_STATES:
        # Preempted before it was ever usable: capacity went away; try the next zone.
        _fail_dead(step, f"{node.state.value} before READY", ErrorKind.CAPACITY, facts, s)
        return
    if qr_dead:
        assert qr is not None
        kind = qr.error or ErrorKind.CAPACITY
        msg = f": {qr.error_message}" if qr.error_message else ""
        _fail_dead(step, f"queued resource {qr.state.value}{msg}", kind, facts, s)
        return
    if (node is not None and node.state is CloudState.DELETING) or (
        node is None and qr is not None and qr.state is QueuedState.DELETING
    ):
        step.move(
            P.DELETING,
            "being deleted outside tpucared",
            end_reason="deleted outside tpucared",
            cloud=facts,
            slot_update=budget.create_failed(
                step.view, step.inc, ErrorKind.TRANSIENT, "deleted while creating"
            ),
        )
        return
    if step.phase is P.REQUESTED:
        step.move(P.CREATING, why, cloud=facts)
    else:
        step.record(facts)
    expired = _pending_stuck(step, s, facts)
    if expired is not None:
        _fail_dead(step, expired, ErrorKind.TRANSIENT, facts, s)


def _pending_stuck(step: _Step, s: Sighting, facts: CloudFacts) -> str | None:
    """Why a listed, still-pending node counts as stuck, or None."""
    node, qr = s.node, s.queued
    if node is not None:
        state = node.state
        rule = CLOUD_RULE.get(state, "creating")
        # The CREATING phase is timed from when the create was accepted; another transient
        # state (e.g. REPAIRING during creation) from when the node entered it.
        start = step.phase_since if state is CloudState.CREATING else facts.cloud_state_since
        what = state.value
    else:
        assert qr is not None
        rule = QUEUED_RULE.get(qr.state, "queued")
        start = facts.cloud_state_since
        what = f"queued resource {qr.state.value}"
    return _expired(step, rule, start, what)


def _absent_pending(step: _Step, s: Sighting) -> None:
    """A pending incarnation with nothing listed under its name in a successful list."""
    inc = step.inc
    policy = step.view.policy
    facts = _facts(step, s)
    if step.phase is P.REQUESTED:
        # The executor has not recorded the call's outcome: it is running, or we crashed.
        timeout = policy.timeout("requested")
        age = step.now - inc.phase_since
        if timeout is not None and age >= timeout:
            step.fail(ErrorKind.TRANSIENT, f"create never confirmed after {_fmt(age)}")
        return
    seen = inc.cloud_id is not None or inc.cloud_state not in (None, ABSENT)
    if not seen and inc.operation is not None:
        # The create operation is still running: its outcome (e.g. no capacity) comes as
        # `error`; a node that is not listed yet is no news.
        expired = _expired(step, "creating", inc.phase_since, "an unfinished create operation")
        if expired is not None:
            step.fail(ErrorKind.TRANSIENT, expired, facts)
        else:
            step.record(facts)
        return
    if not seen and step.now - inc.phase_since < policy.create_grace:
        step.record(facts)  # list-after-create: a new node may take a moment to be listed
        return
    assert facts.cloud_state_since is not None
    if step.now - facts.cloud_state_since < policy.vanish_grace:
        step.record(facts)
        return
    if seen:
        why = "vanished while creating"
        step.move(
            P.DEAD,
            why,
            end_reason="vanished",
            cloud=facts,
            slot_update=budget.create_failed(step.view, inc, ErrorKind.TRANSIENT, why),
        )
        step.move(P.DELETED, "nothing left to delete")
    else:
        step.fail(ErrorKind.TRANSIENT, "the accepted create never showed up in the list", facts)


def _ready(step: _Step, s: Sighting) -> None:
    if not s.known:
        return
    facts = _facts(step, s)
    node, qr = s.node, s.queued
    now = step.now
    if qr is not None and qr.state in QUEUED_DEAD:
        _die(step, f"queued resource {qr.state.value}", facts, s)
    elif node is None and qr is not None and qr.state is QueuedState.DELETING:
        _external_delete(step, facts)
    elif node is None:
        assert facts.cloud_state_since is not None
        if now - facts.cloud_state_since < step.view.policy.vanish_grace:
            step.record(facts)
        else:
            _die(step, "vanished", facts, s)
    elif node.state in DEAD_STATES:
        _die(step, node.state.value.lower(), facts, s)
    elif node.state is CloudState.DELETING:
        _external_delete(step, facts)
    elif node.state is CloudState.READY:
        grace = step.view.policy.unhealthy_grace
        since = facts.unhealthy_since
        if is_unhealthy(node.health) and since is not None and now - since >= grace:
            _die(step, f"unhealthy: {node.health} for {_fmt(now - since)}", facts, s)
        else:
            step.record(facts)
    else:
        rule = CLOUD_RULE.get(node.state, "unspecified")
        expired = _expired(step, rule, facts.cloud_state_since, node.state.value)
        if expired is not None:
            _die(step, expired, facts, s)
        else:
            step.record(facts)


def _dead(step: _Step, s: Sighting) -> None:
    if s.gone:
        step.move(P.DELETED, "nothing left to delete")
    else:
        step.delete("dead: delete it at once")


def _deleting(step: _Step, s: Sighting) -> None:
    inc = step.inc
    policy = step.view.policy
    if inc.error is ErrorKind.NOT_FOUND:
        step.move(P.DELETED, "the delete found nothing: gone")
        return
    if s.gone:
        step.move(P.DELETED, "gone from the list")
        return
    if s.known:
        step.record(_facts(step, s))
    last = inc.last_delete_at or inc.phase_since
    due: datetime | None
    if inc.error is not None and inc.operation is None:
        due = last + budget.retry_wait(step.view, inc, inc.error)
        why = f"the last delete failed ({inc.error.value})"
    else:
        timeout = policy.timeout("deleting")
        due = None if timeout is None else last + timeout
        why = f"still listed {_fmt(step.now - last)} after the last delete"
    if due is not None and step.now >= due:
        step.delete(f"delete again (call {inc.delete_calls + 1}): {why}")
    if inc.delete_calls >= policy.max_delete_calls:
        step.notice(
            f"delete-stuck/{inc.id}",
            Severity.ERROR,
            f"{inc.node_name} in {inc.zone} is still there after {inc.delete_calls} delete "
            f"calls ({why}); it may hold quota and cost money",
        )


# ---------------------------------------------------------------------------------------------
# Shared moves


def _die(step: _Step, reason: str, facts: CloudFacts, s: Sighting) -> None:
    """An unplanned death of a READY node: DEAD, then delete (or DELETED if nothing is left)."""
    step.move(
        P.DEAD,
        reason,
        end_reason=reason,
        cloud=facts,
        slot_update=budget.node_died(step.view, step.inc),
    )
    if s.gone:
        step.move(P.DELETED, "nothing left to delete")
    else:
        step.delete("dead: delete it at once")


def _fail_dead(step: _Step, reason: str, kind: ErrorKind, facts: CloudFacts, s: Sighting) -> None:
    """A pending create that left a dead resource behind: DEAD and delete, slot backoff."""
    step.move(
        P.DEAD,
        reason,
        end_reason=reason,
        cloud=facts,
        slot_update=budget.create_failed(step.view, step.inc, kind, reason),
    )
    if s.gone:
        step.move(P.DELETED, "nothing left to delete")
    else:
        step.delete("dead: delete it at once")


def _external_delete(step: _Step, facts: CloudFacts) -> None:
    step.move(
        P.DELETING,
        "being deleted outside tpucared",
        end_reason="deleted outside tpucared",
        cloud=facts,
        slot_update=budget.node_died(step.view, step.inc),
    )


def _end_without_delete(step: _Step, why: str) -> None:
    reason = f"{why}; the name is now held by a node that is not ours: nothing to delete"
    if step.phase in PENDING:
        step.move(P.FAILED, reason, end_reason=why)
        return
    if step.phase is P.READY:
        step.move(P.DEAD, reason, end_reason=why)
    step.move(P.DELETED, reason)


def _release(step: _Step, s: Sighting) -> None:
    """The name is listed without our labels (someone else's node, or our labels were
    removed): stop tracking it and never touch it."""
    inc = step.inc
    labels = s.labels() or {}
    who = ", ".join(f"{k}={labels.get(k) or '-'}" for k in (FLEET_LABEL, OWNER_LABEL))
    why = f"{inc.node_name} in {inc.zone} is listed without our labels ({who})"
    step.notice(
        f"foreign/{inc.zone}/{inc.node_name}",
        Severity.WARNING,
        f"{why}: tpucared will not touch it; delete or rename it to free the name",
    )
    if step.phase in PENDING:
        step.fail(ErrorKind.ALREADY_EXISTS, why)
    elif step.phase is P.READY:
        step.move(P.DEAD, why, end_reason="released: lost our labels")
        step.move(P.DELETED, "left alone: not ours")
    else:
        step.move(P.DELETED, "left alone: not ours")


# ---------------------------------------------------------------------------------------------
# Facts and helpers


def _ours(view: View, inc: IncarnationRecord, s: Sighting) -> bool:
    """Every listed part (node, queued resource) carries our labels for this fleet."""
    parts = [r.labels for r in (s.node, s.queued) if r is not None]
    return all(
        labels.get(OWNER_LABEL) == view.owner and labels.get(FLEET_LABEL) == inc.fleet
        for labels in parts
    )


def _name_held_by_another(view: View, inc: IncarnationRecord) -> bool:
    """A successful list shows the incarnation's name held by something not ours (checked
    on whichever of the node and queued lists succeeded)."""
    occupant = view.occupant(inc.zone, inc.node_name)
    if occupant is None:
        return False
    held = []
    if occupant.node is not None and view.zone_known(inc.zone):
        held.append(occupant.node.labels)
    if occupant.queued is not None and view.zone_known(inc.zone, queued=True):
        held.append(occupant.queued.labels)
    return any(
        labels.get(OWNER_LABEL) != view.owner or labels.get(FLEET_LABEL) != inc.fleet
        for labels in held
    )


def _labels_pending(inc: IncarnationRecord, s: Sighting) -> bool:
    """A node we are creating, listed without any labels yet: no verdict until it has some."""
    node = s.node
    return (
        inc.phase in PENDING
        and node is not None
        and node.state is CloudState.CREATING
        and not node.labels
        and s.queued is None
    )


def _facts(step: _Step, s: Sighting, *, endpoints: bool = False) -> CloudFacts:
    inc, now = step.inc, step.now
    node, qr = s.node, s.queued
    health: str | None = None
    cloud_id, create_time = inc.cloud_id, inc.create_time
    if node is not None:
        state = node.state.value
        health = node.health
        cloud_id = node.cloud_id or cloud_id
        create_time = node.create_time or create_time
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
    )


def _differs(inc: IncarnationRecord, f: CloudFacts) -> bool:
    return (
        f.cloud_state != inc.cloud_state
        or f.cloud_state_since != inc.cloud_state_since
        or f.health != inc.health
        or f.unhealthy_since != inc.unhealthy_since
        or f.cloud_id != inc.cloud_id
        or f.create_time != inc.create_time
    )


def _expired(step: _Step, rule: str, start: datetime | None, what: str) -> str | None:
    timeout = step.view.policy.timeout(rule)
    if timeout is None or start is None:
        return None
    age = step.now - start
    if age < timeout:
        return None
    return f"stuck: {what} for {_fmt(age)} (timeout {rule} = {_fmt(timeout)})"


def _with_retry(why: str, update: SlotUpdate, now: datetime) -> str:
    zone = f" in {update.next_zone}" if update.next_zone else ""
    if update.next_create_at is None:
        return f"{why}; next create{zone} at once"
    return f"{why}; next create{zone} in {_fmt(update.next_create_at - now)}"
