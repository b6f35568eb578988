"""The workload sub-planner: one slot's attempt, this tick's probe of its workers -> next steps.

Where it sits: `plan_slot` runs for every slot of a fleet with a workload, and for every slot
with a running attempt, after the node sub-planners (core/planning/tick.py composes it);
`SlotWork.phase_after` is the slot's node phase once the node actions of the same plan are
applied. It returns workload actions (core/workload/actions.py), node replacements
(`DeleteNode`), notices, and holds that tell people why nothing launches yet.

First the running attempt, if any, is judged (core/workload/judge.py has its rules): it ends
(FinishAttempt, with a StopWorkload when its processes may still run, or a node replacement),
is resumed where some workers never started it, or is watched on.

Then, with no attempt running (or one just finished), whether to launch the next one on the
slot's READY node (`attempt` = slot.attempts + 1, so numbers only grow):

  slot done, unwanted, no workload     nothing
  last SUCCEEDED, restart != always    MarkSlotDone (the node planner deletes the node unless
                                       on_success = keep)
  last FAILED/HUNG, restart = never,   give up: MarkSlotDone and a notice for a person
  or failures > max_failures
  a host-maintenance window handled    hold, start it now, or replace the node, as the
  or within `maintenance_lead`         fleet's on_maintenance says (maintenance.py)
  last ended within its backoff        hold: a crash loop backs off (`crash_backoff`, by the
                                       slot's failures, jitter from stable facts); a run that
                                       lasted `stable_after` restarts at once; preemptions and
                                       cancellations never wait
  no fresh probe of every worker       hold
  a worker failed the pre-launch       a bad host: recycle the node (cause bad_host, another
  check: TPU still held after the      zone first), or past max_bad_hosts hold the slot with
  kill, or the fleet's health_check    a notice (bad_hosts.py); max_failures is not touched
  a worker unreachable                 hold; replace the node after `unreachable_grace`
  a launch cannot work: a secret's     hold and a notice (launch_gate.py; the runtime
  variable missing from the daemon's   refuses such a launch all the same, and says so in an
  environment, workload.files missing  event, should the plan not have known)
  otherwise                            LaunchWorkload; when an earlier attempt ran on this
                                       node, the runner cleans up after it first, so a stop
                                       that a relaunch follows in the same tick is left out.
                                       After a cleanup that left workers unclean the launch
                                       cleans up again first and its reason says so; a
                                       launch whose cleanup leaves a worker unclean is
                                       refused (an event), never started beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from tpucared.core.model.backoff import delay, jitter
from tpucared.core.model.causes import LossCause
from tpucared.core.model.durations import fmt
from tpucared.core.model.records import (
    AttemptOutcome,
    IncarnationRecord,
    NodePhase,
    SlotRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.model.specs import RestartPolicy, WorkloadSpec
from tpucared.core.nodes.losses import NOTICE_LEAD, in_window
from tpucared.core.vocab.actions import (
    Action,
    DeleteNode,
    Notice,
    Severity,
    SlotUpdate,
    Transition,
)
from tpucared.core.vocab.plan import Hold
from tpucared.core.workload import maintenance
from tpucared.core.workload.actions import (
    CHARGED_OUTCOMES,
    FinishAttempt,
    LaunchWorkload,
    MarkSlotDone,
    StopWorkload,
)
from tpucared.core.workload.bad_hosts import recycle
from tpucared.core.workload.inputs import NoticeKind, WorkerState
from tpucared.core.workload.judge import Verdict, earliest_since, judge, worker_names
from tpucared.core.workload.launch_gate import cannot_launch, unclean_words
from tpucared.core.workload.notices import heard_notices
from tpucared.core.workload.slot_work import CRASH_BACKOFF as CRASH_BACKOFF
from tpucared.core.workload.slot_work import SlotWork as SlotWork
from tpucared.core.workload.slot_work import WorkloadPolicy as WorkloadPolicy

P = NodePhase
Out = AttemptOutcome
W = WorkerState
_S = timedelta(seconds=1)
_M = timedelta(minutes=1)


@dataclass
class SlotPlan:
    actions: list[Action] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)


def plan_slot(w: SlotWork, policy: WorkloadPolicy) -> SlotPlan:
    """One slot's workload actions and holds at `w.now` (the rules in the module docstrings
    here and in judge.py): end the running attempt if its verdict says so, then decide on the
    next one."""
    out = SlotPlan()
    last = w.last
    failures = w.slot.failures if w.slot is not None else 0
    stop_attempt: WorkloadAttemptRecord | None = None
    if last is not None and last.ended_at is None:
        verdict = judge(w, last, policy)
        if verdict is None:
            out.actions += maintenance.before_window(w, last.number)
            return out
        if verdict.resume:
            out.actions.append(_resume(w, last, verdict))
            return out
        lost = _nodes_of(w, _noticed_workers(w)) if verdict.lost else []
        out.actions.append(_finish(w, last, verdict, lost))
        if verdict.lost:
            for node in lost:
                out.actions += _lost(w, node, verdict.detail)
            out.actions += _stop_others(w, last, lost)
            return out
        if verdict.replace is not None:
            gone = _nodes_of(w, _unreachable_workers(w))
            out.actions += [_replace(n, verdict.replace, verdict.detail) for n in gone]
            out.actions += _stop_others(w, last, gone)
            return out
        if verdict.stop:
            stop_attempt = last
        if verdict.outcome in CHARGED_OUTCOMES:
            failures += 1
        last = replace(last, ended_at=w.now, outcome=verdict.outcome)
    launched = _next(w, last, failures, policy, out)
    if stop_attempt is not None and not (launched and launched.clean_after == stop_attempt.number):
        # Right after the FinishAttempt it follows: the outcome is recorded before anything
        # is killed, so a crash in between cannot turn the kill into the attempt's outcome.
        out.actions.insert(1, _stop(w, stop_attempt))
    return out


# ---------------------------------------------------------------------------------------------
# The running attempt's end, as the verdict says


def _resume(w: SlotWork, last: WorkloadAttemptRecord, verdict: Verdict) -> LaunchWorkload:
    """Launch the running attempt again, on the workers that never started it."""
    assert w.node is not None
    return LaunchWorkload(
        fleet=w.fleet,
        slot=w.index,
        incarnation_id=w.node.id,
        node_name=w.node.node_name,
        attempt=last.number,
        attempt_id=last.id,
        reason=verdict.detail,
    )


def _finish(
    w: SlotWork, last: WorkloadAttemptRecord, verdict: Verdict, lost: list[IncarnationRecord]
) -> FinishAttempt:
    assert verdict.outcome is not None
    return FinishAttempt(
        fleet=w.fleet,
        slot=w.index,
        attempt_id=last.id,
        attempt=last.number,
        outcome=verdict.outcome,
        exit_codes=verdict.codes,
        detail=verdict.detail,
        reason=f"attempt {last.number} {verdict.outcome.value}: {verdict.detail}",
        notices=heard_notices(w.probe.workers if w.probe else (), lost),
    )


def _stop(
    w: SlotWork, attempt: WorkloadAttemptRecord, gone: Sequence[IncarnationRecord] = ()
) -> StopWorkload:
    """Stop `attempt` on the slot's node. A gang's stop reaches every slice still READY (the
    runner's executor); it names a surviving slice, not the stand-in (the newest slice's id),
    which may be the very slice this plan deletes: a stop on a node the plan takes away is
    dropped (probes.keep_chain), and the survivors would run on until the next launch."""
    assert w.node is not None
    target = w.node.id
    if w.gang is not None:
        ids = {n.id for n in gone}
        alive = [s for s in w.gang.survivors() if s.id not in ids]
        if alive:
            target = alive[0].id
    return StopWorkload(
        fleet=w.fleet,
        slot=w.index,
        incarnation_id=target,
        node_name=w.node.node_name,
        attempt=attempt.number,
        reason=f"attempt {attempt.number} ended; a slice runs on all workers "
        "or none: stop it everywhere",
    )


# ---------------------------------------------------------------------------------------------
# The next attempt


def _next(
    w: SlotWork,
    last: WorkloadAttemptRecord | None,
    failures: int,
    policy: WorkloadPolicy,
    out: SlotPlan,
) -> LaunchWorkload | None:
    """Decide whether to launch the next attempt now; returns the launch if any."""
    spec, slot, node = w.spec, w.slot, w.node
    if spec is None or slot is None or slot.done or w.unwanted is not None:
        return None
    if last is not None and last.ended_at is None:
        return None  # still running (only after a resume or a wait): never a second one
    if last is not None and _workload_over(w, spec, last, failures, out):
        return None
    if node is None or node.phase is not P.READY or w.phase_after is not P.READY:
        return None
    if w.workers == 0:
        return None
    if _maintenance_first(w, out):
        return None
    if _launch_held(w, node, last, failures, policy, out):
        return None
    launch = _launch(w, node, slot, last)
    out.actions.append(launch)
    return launch


def _workload_over(
    w: SlotWork, spec: WorkloadSpec, last: WorkloadAttemptRecord, failures: int, out: SlotPlan
) -> bool:
    """Whether the last attempt ended the slot's workload: it succeeded and is not to be
    restarted (MarkSlotDone), or it failed once too often (give up)."""
    outcome = last.outcome
    if outcome is Out.SUCCEEDED and spec.restart is not RestartPolicy.ALWAYS:
        out.actions.append(
            MarkSlotDone(
                fleet=w.fleet,
                slot=w.index,
                reason=f"attempt {last.number} succeeded (restart = {spec.restart.value}): "
                "the workload is done",
            )
        )
        return True
    if outcome in CHARGED_OUTCOMES:
        why = None
        if spec.restart is RestartPolicy.NEVER:
            why = f"attempt {last.number} {outcome.value} and restart = never"
        elif failures > spec.max_failures:
            why = f"{failures} failures, more than max_failures = {spec.max_failures}"
        if why is not None:
            _give_up(w, why, out)
            return True
    return False


def _maintenance_first(w: SlotWork, out: SlotPlan) -> bool:
    """Whether a host-maintenance window stands in the way of a launch (maintenance.py): one
    within the lead is recorded as handled first; a handled one is waited for, started now
    or replaced, as the fleet's `on_maintenance` says."""
    if maintenance.host_down(w):
        out.holds.append(_hold(w, "host maintenance under way (UNHEALTHY_MAINTENANCE)"))
        return True
    due = maintenance.before_window(w, None)
    if due:
        out.actions += due
        out.holds.append(_hold(w, f"no launch into the maintenance window: {due[0].reason}"))
        return True
    gated = maintenance.gate(w)
    if gated is None:
        return False
    out.actions += gated[0]
    out.holds += gated[1]
    return True


def _launch_held(
    w: SlotWork,
    node: IncarnationRecord,
    last: WorkloadAttemptRecord | None,
    failures: int,
    policy: WorkloadPolicy,
    out: SlotPlan,
) -> bool:
    """Whether something stands in the way of a launch on the READY node: the crash backoff,
    no fresh probe of every worker, a bad host, an unreachable worker, or a launch that
    cannot work. Each adds its hold, node replacement or notice to `out`."""
    due = _due(w, last, failures, policy)
    if due is not None and w.now < due:
        wait = f"relaunch backoff until {due.isoformat(timespec='seconds')}"
        out.holds.append(_hold(w, f"{wait} after attempt {_last_story(last)}", until=due))
        return True
    probe = w.probe
    if probe is None or probe.incarnation_id != node.id or len(probe.workers) < w.workers:
        out.holds.append(_hold(w, "waiting for a probe of every worker of " + node.node_name))
        return True
    if probe.busy or probe.unhealthy:
        actions, holds = recycle(w, probe, _nodes_of(w, (*probe.busy, *probe.unhealthy)))
        out.actions += actions
        out.holds += holds
        return True
    unreachable = [p for p in probe.workers if p.state is W.UNREACHABLE]
    if unreachable:
        since = earliest_since(unreachable, w.now)
        detail = f"{worker_names(unreachable)} unreachable over SSH for {fmt(w.now - since)}"
        if w.now - since >= policy.unreachable_grace:
            for gone in _nodes_of(w, [p.worker for p in unreachable]):
                out.actions.append(_replace(gone, "replaced: workers unreachable", detail))
        else:
            out.holds.append(_hold(w, f"{detail}: {unreachable[0].describe()}"))
        return True
    assert w.spec is not None
    blocked = cannot_launch(w.spec, probe.secrets_present, probe.blocked)
    if blocked is not None:
        out.actions.append(
            Notice(
                key=f"workload-blocked/{w.fleet}/{w.index}",
                severity=Severity.ERROR,
                fleet=w.fleet,
                node=node.node_name,
                reason=f"{w.fleet}/{w.index} cannot launch its workload: {blocked}",
            )
        )
        out.holds.append(_hold(w, f"cannot launch: {blocked}"))
        return True
    return False


def _launch(
    w: SlotWork, node: IncarnationRecord, slot: SlotRecord, last: WorkloadAttemptRecord | None
) -> LaunchWorkload:
    """The next attempt, on the slot's READY node; it cleans up after the last one first when
    that ran on the same node (again, and saying why, when the last cleanup there left
    workers unclean: core/workload/launch_gate.py)."""
    number = slot.attempts + 1
    ran_here = last is not None and (
        w.gang.ran(last) if w.gang is not None else last.incarnation_id == node.id
    )
    clean_after = last.number if last is not None and ran_here else None
    if last is None:
        reason = f"first attempt on {node.node_name}"
    else:
        reason = f"after attempt {_last_story(last)}"
    unclean = w.probe.unclean if w.probe is not None else None
    if clean_after is not None and unclean is not None:
        reason += f"; {unclean_words(unclean)}: cleaning up again first"
    return LaunchWorkload(
        fleet=w.fleet,
        slot=w.index,
        incarnation_id=node.id,
        node_name=node.node_name,
        attempt=number,
        clean_after=clean_after,
        reason=reason,
    )


def _due(
    w: SlotWork, last: WorkloadAttemptRecord | None, failures: int, policy: WorkloadPolicy
) -> datetime | None:
    """When the next attempt may start: after a crash backoff for a short failed run (and a
    short successful one under restart = always), at once otherwise."""
    if last is None or last.ended_at is None:
        return None
    if last.outcome not in CHARGED_OUTCOMES and last.outcome is not Out.SUCCEEDED:
        return None  # preempted or cancelled: not the workload's doing
    if last.ended_at - last.started_at >= policy.stable_after:
        return None
    n = max(failures, 1) if last.outcome in CHARGED_OUTCOMES else 1
    run_id = w.slot.run_id if w.slot is not None else ""
    u = jitter(w.fleet, w.index, run_id, last.number)
    return last.ended_at + delay(policy.crash_backoff, n, u)


def _give_up(w: SlotWork, why: str, out: SlotPlan) -> None:
    out.actions.append(
        MarkSlotDone(fleet=w.fleet, slot=w.index, reason=f"giving up on the workload: {why}")
    )
    out.actions.append(
        Notice(
            key=f"workload-gave-up/{w.fleet}/{w.index}",
            severity=Severity.ERROR,
            fleet=w.fleet,
            node=w.node.node_name if w.node is not None else None,
            reason=f"{w.fleet}/{w.index}: gave up on the workload ({why}); the slot is done "
            "and keeps no node unless on_success = keep. Its attempts are in the event log.",
        )
    )


# ---------------------------------------------------------------------------------------------
# Helpers


def _nodes_of(w: SlotWork, workers: Iterable[int]) -> list[IncarnationRecord]:
    """The real nodes holding these workers: the slot's node, or a gang's slices holding
    them (every slice when none is known)."""
    if w.gang is not None:
        return w.gang.slices_of(workers)
    return [w.node] if w.node is not None else []


def _noticed_workers(w: SlotWork) -> list[int]:
    return [p.worker for p in (w.probe.workers if w.probe else ()) if p.notice_at is not None]


def _unreachable_workers(w: SlotWork) -> list[int]:
    workers = w.probe.workers if w.probe else ()
    return [p.worker for p in workers if p.state is W.UNREACHABLE]


def _stop_others(
    w: SlotWork, attempt: WorkloadAttemptRecord, gone: list[IncarnationRecord]
) -> list[Action]:
    """A gang's attempt ends with some slices lost or replaced: stop it on the others, which
    would otherwise wait for their lost peers (all-or-nothing)."""
    if w.gang is None:
        return []
    ids = {n.id for n in gone}
    if not any(s.id not in ids for s in w.gang.survivors()):
        return []
    return [_stop(w, attempt, gone)]


def _lost(w: SlotWork, node: IncarnationRecord, why: str) -> list[Action]:
    """The node got its preemption notice: DEAD now, as if the API already said PREEMPTED
    (the preemption counted once, here; the create of its replacement not held back), and
    deleted in the same plan, as the node planner deletes a node it finds dead."""
    slot = w.slot
    dead = Transition(
        incarnation_id=node.id,
        node_name=node.node_name,
        expected=P.READY,
        new=P.DEAD,
        end_reason="preempted",
        slot_update=SlotUpdate(
            fleet=node.fleet,
            slot=node.slot,
            create_failures=slot.create_failures if slot is not None else 0,
            next_create_at=None,
            next_zone=slot.next_zone if slot is not None else None,
            last_error=slot.last_error if slot is not None else None,
            add_preemptions=1,
        ),
        reason=f"{node.node_name} is being preempted: {why}",
        cause=_notice_cause(w, node),
    )
    delete = DeleteNode.of(
        node, P.DEAD, reason="dead: delete it at once, without waiting for the API to say PREEMPTED"
    )
    return [dead, delete]


def _notice_cause(w: SlotWork, node: IncarnationRecord) -> LossCause:
    """A notice at (or just before, core/nodes/losses.py NOTICE_LEAD) the node's announced
    maintenance window, or one the run's watcher heard as host maintenance
    (`maintenance-event` TERMINATE_ON_HOST_MAINTENANCE, unannounced windows included), is the
    maintenance's; any other is a preemption."""
    workers = [p for p in (w.probe.workers if w.probe else ()) if p.notice_at]
    at = min((p.notice_at for p in workers if p.notice_at), default=w.now)
    if in_window(node.maintenance, at, NOTICE_LEAD) or any(
        p.notice_kind is NoticeKind.MAINTENANCE for p in workers
    ):
        return LossCause.MAINTENANCE
    return LossCause.PREEMPTED


def _replace(node: IncarnationRecord, end_reason: str, why: str) -> DeleteNode:
    """A planned delete of a READY node whose workers stopped answering; the slot gets a new
    one (no preemption counted). Its cause is UNKNOWN: nothing tells why they stopped."""
    return DeleteNode.of(
        node,
        P.READY,
        reason=f"replace {node.node_name}: {why}",
        end_reason=end_reason,
        cause=LossCause.UNKNOWN,
    )


def _hold(w: SlotWork, reason: str, until: datetime | None = None) -> Hold:
    name = w.node.node_name if w.node is not None else f"{w.fleet}-{w.index}"
    return Hold(fleet=w.fleet, slot=w.index, node_name=name, reason=reason, until=until)


def _last_story(last: WorkloadAttemptRecord | None) -> str:
    if last is None:
        return "none"
    outcome = last.outcome.value if last.outcome is not None else "running"
    return f"{last.number} {outcome}"
