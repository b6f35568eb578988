"""The node sub-planner: one live incarnation, what the lists show of it -> its next steps.

For each incarnation in a LIVE phase of a managed fleet, `plan_incarnation` reads the
incarnation's `Sighting` (core/view.py) and its recorded call outcome (`error`,
`operation`) and returns the actions that move it along its lifecycle (core/model/lifecycle.py),
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
except what a call outcome recorded on the incarnation says by itself; and nothing at all is
done while the node shows a state we cannot read (`StateClass.UNREADABLE`): one notice.
The rules decide on the classes of the cloud's states (core/model/observed.py `StateClass`),
which each cloud adapter assigns in one table, never on one cloud's own state names.
Finally, a slot that is no longer wanted (scaled down, fleet down, workload done) gets its
still-pending or READY node deleted.

This module holds the rules, one function per phase; what they share (the `Step` that
accumulates the actions, the moves that end a node, and the helpers about facts, ownership and
expiry) is core/nodes/step.py.
"""

from __future__ import annotations

from datetime import datetime

from tpucared.core.model.causes import LossCause
from tpucared.core.model.durations import fmt as _fmt
from tpucared.core.model.lifecycle import PENDING_PHASES, SERVING_PHASES
from tpucared.core.model.observed import QueuedPhase, StateClass
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, ErrorKind
from tpucared.core.nodes import create_backoff as budget
from tpucared.core.nodes.cloud import (
    ABSENT,
    is_unhealthy,
    unrecognized_notice,
)
from tpucared.core.nodes.step import (
    Step,
    cloud_facts,
    die,
    external_delete,
    fail_dead,
    labels_pending,
    ours,
    stuck_reason,
    with_retry,
)
from tpucared.core.view import Sighting, View
from tpucared.core.vocab.actions import Action, CloudFacts, Severity
from tpucared.core.vocab.policy import DEFECT_NOTICE_AFTER
from tpucared.core.vocab.stuck import QUEUED_RULE

P = NodePhase
K = StateClass
PENDING = PENDING_PHASES
SERVING = SERVING_PHASES


def plan_incarnation(view: View, inc: IncarnationRecord) -> tuple[list[Action], NodePhase]:
    s = view.sighting(inc)
    listed = s.node or view.listed_node(inc.project, inc.zone, inc.node_name)
    if listed is not None and listed.state_class is K.UNREADABLE:
        # Never act on what we cannot read: no delete (not even a scale-down's), no
        # transition, no record; a person is told once (the API grew a state, or something
        # between us and it is broken). Looked up by name: a queued incarnation whose queued
        # list failed does not see its node in its sighting, but the node is still listed.
        return [unrecognized_notice(listed, inc.fleet)], inc.phase
    if _unchanged_ready(view, inc, s):
        return [], P.READY
    step = Step(view, inc)
    if s.known and s.present and not ours(view, inc, s):
        if not labels_pending(inc, s):
            _release(step, s)
    elif inc.phase in PENDING:
        _pending(step, s)
    elif inc.phase is P.READY:
        _ready(step, s)
    elif inc.phase is P.DEAD:
        _dead(step, s)
    elif inc.phase is P.DELETING:
        _deleting(step, s)
    unwanted = view.unwanted(inc.fleet, inc.slot, inc.slice)
    if unwanted is not None and step.phase in SERVING and not labels_pending(inc, s):
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
        and node.state_class is K.USABLE
        and inc.cloud_state == node.state
        and inc.cloud_state_since is not None
        and node.health == inc.health
        and not is_unhealthy(node.health)
        and inc.unhealthy_since is None
        and (node.cloud_id or inc.cloud_id) == inc.cloud_id
        and (node.create_time or inc.create_time) == inc.create_time
        and (node.run_ends_at or inc.run_ends_at) == inc.run_ends_at
        and node.maintenance == inc.maintenance
        and s.known
        and node.labels.get(OWNER_LABEL) == view.owner  # ours, for a node alone
        and node.labels.get(FLEET_LABEL) == inc.fleet
        and view.unwanted(inc.fleet, inc.slot, inc.slice) is None
    )


# ---------------------------------------------------------------------------------------------
# Phases


def _pending(step: Step, s: Sighting) -> None:
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
            ready = node is not None and node.state_class is K.USABLE
            if ready or inc.phase is P.REQUESTED or error is ErrorKind.ALREADY_EXISTS:
                _arrive(step, s, f"the create reported {error.value} but the node is listed")
            else:
                facts = cloud_facts(step, s)
                fail_dead(step, f"create operation failed: {error.value}", error, facts, s)
            return
        kind = ErrorKind.TRANSIENT if error is ErrorKind.ALREADY_EXISTS else error
        step.fail(kind, f"create failed: {error.value}", cloud_facts(step, s))
        return
    if not s.known:
        return
    if s.present:
        _arrive(step, s, "the create went through")
        return
    _absent_pending(step, s)


def _arrive(step: Step, s: Sighting, why: str) -> None:
    """A pending incarnation's resource is listed with our labels: follow its state."""
    facts = cloud_facts(step, s, endpoints=True)
    node, qr = s.node, s.queued
    qr_dead = qr is not None and qr.phase is QueuedPhase.DEAD
    if node is not None and node.state_class is K.USABLE and not qr_dead:
        step.move(
            P.READY,
            f"{step.inc.node_name} is READY",
            cloud=facts,
            slot_update=budget.create_succeeded(step.view, step.inc),
        )
        return
    if node is not None and node.state_class is K.DEAD and node.defect is not None:
        # Made, but not usable (a slice never whole): a failed create with its own doubling
        # wait, told to a person after a few in a row; never capacity's pace (issue 39).
        why = f"{node.state} before READY: {node.defect}"
        update = fail_dead(step, why, ErrorKind.DEFECTIVE, facts, s)
        if update.create_failures == DEFECT_NOTICE_AFTER or update.create_failures % 10 == 0:
            step.notice(
                f"create-defective/{step.inc.id}",
                Severity.WARNING,
                f"{update.create_failures} creates of {step.inc.node_name} in a row failed, "
                f"the last in {step.inc.zone}: {why}; {with_retry('retrying', update, step.now)}",
            )
        return
    if node is not None and node.state_class is K.DEAD:
        # Preempted before it was ever usable: capacity went away; try the next zone.
        why = f"{node.state} before READY"
        fail_dead(step, why, ErrorKind.CAPACITY, facts, s, cause=node.lost_to)
        return
    if qr_dead:
        assert qr is not None
        kind = qr.error or ErrorKind.CAPACITY
        msg = f": {qr.error_message}" if qr.error_message else ""
        fail_dead(step, f"queued resource {qr.state}{msg}", kind, facts, s)
        return
    if (node is not None and node.state_class is K.DELETING) or (
        node is None and qr is not None and qr.phase is QueuedPhase.DELETING
    ):
        step.move(
            P.DELETING,
            "being deleted outside tpucared",
            end_reason="deleted outside tpucared",
            cloud=facts,
            slot_update=budget.create_failed(
                step.view, step.inc, ErrorKind.TRANSIENT, "deleted while creating"
            ),
            cause=LossCause.DELETED_OUTSIDE,
        )
        return
    if step.phase is P.REQUESTED:
        step.move(P.CREATING, why, cloud=facts)
    else:
        step.record(facts)
    expired = _pending_stuck(step, s, facts)
    if expired is not None:
        fail_dead(step, expired, ErrorKind.TRANSIENT, facts, s, cause=LossCause.STUCK)


def _pending_stuck(step: Step, s: Sighting, facts: CloudFacts) -> str | None:
    """Why a listed, still-pending node counts as stuck, or None."""
    node, qr = s.node, s.queued
    if node is not None:
        rule = node.stuck_rule or "creating"
        # The CREATING phase is timed from when the create was accepted; another transient
        # state (e.g. REPAIRING during creation) from when the node entered it.
        creating = node.state_class is K.CREATING
        start = step.phase_since if creating else facts.cloud_state_since
        what = node.state
    else:
        assert qr is not None
        rule = QUEUED_RULE.get(qr.phase, "queued")
        start = facts.cloud_state_since
        what = f"queued resource {qr.state}"
    return stuck_reason(step, rule, start, what)


def _absent_pending(step: Step, s: Sighting) -> None:
    """A pending incarnation with nothing listed under its name in a successful list."""
    inc = step.inc
    policy = step.view.policy
    facts = cloud_facts(step, s)
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
        expired = stuck_reason(step, "creating", inc.phase_since, "an unfinished create operation")
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
            cause=LossCause.UNKNOWN,  # seen, then gone: nothing tells why
        )
        step.move(P.DELETED, "nothing left to delete")
    else:
        step.fail(ErrorKind.TRANSIENT, "the accepted create never showed up in the list", facts)


def _ready(step: Step, s: Sighting) -> None:
    if not s.known:
        return
    facts = cloud_facts(step, s)
    node, qr = s.node, s.queued
    now = step.now
    if qr is not None and qr.phase is QueuedPhase.DEAD:
        die(step, f"queued resource {qr.state}", facts, s)
    elif node is None and qr is not None and qr.phase is QueuedPhase.DELETING:
        external_delete(step, facts)
    elif node is None:
        assert facts.cloud_state_since is not None
        if now - facts.cloud_state_since < step.view.policy.vanish_grace:
            step.record(facts)
        else:
            die(step, "vanished", facts, s, lost=True)
    elif node.state_class is K.DEAD:
        die(step, node.state.lower(), facts, s, lost=True)
    elif node.state_class is K.DELETING:
        external_delete(step, facts)
    elif node.state_class is K.USABLE:
        grace = step.view.policy.unhealthy_grace
        since = facts.unhealthy_since
        if is_unhealthy(node.health) and since is not None and now - since >= grace:
            die(step, f"unhealthy: {node.health} for {_fmt(now - since)}", facts, s)
        else:
            step.record(facts)
    else:
        rule = node.stuck_rule or "unspecified"
        expired = stuck_reason(step, rule, facts.cloud_state_since, node.state)
        if expired is not None:
            die(step, expired, facts, s, cause=LossCause.STUCK)
        else:
            step.record(facts)


def _dead(step: Step, s: Sighting) -> None:
    if s.gone:
        step.move(P.DELETED, "nothing left to delete")
    else:
        step.delete("dead: delete it at once")


def _deleting(step: Step, s: Sighting) -> None:
    inc = step.inc
    policy = step.view.policy
    if inc.error is ErrorKind.NOT_FOUND:
        step.move(P.DELETED, "the delete found nothing: gone")
        return
    if s.gone:
        step.move(P.DELETED, "gone from the list")
        return
    if s.known:
        step.record(cloud_facts(step, s))
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


def _release(step: Step, s: Sighting) -> None:
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
        step.move(P.DEAD, why, end_reason="released: lost our labels", cause=LossCause.UNKNOWN)
        step.move(P.DELETED, "left alone: not ours")
    else:
        step.move(P.DELETED, "left alone: not ours")
