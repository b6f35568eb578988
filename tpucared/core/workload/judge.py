"""How a running attempt ends: this tick's probe of its workers -> the attempt's verdict.

`judge` runs for the slot's running attempt, from `plan_slot` (core/workload/planner.py, which
turns the verdict into FinishAttempt, StopWorkload, a resume or a node replacement, then decides
on the next attempt). It returns a `Verdict`, or None to keep watching.

A slice is all-or-nothing: every worker runs the same attempt, and when one worker's run ends
or disappears while the node stays READY, the attempt ends on every worker. Rules, first match
wins:

  node not READY after this plan, or   SUCCEEDED if the probe saw exit 0 on every worker;
  the attempt's node is gone           CANCELLED if the slot is no longer wanted (or the fleet
                                       lost its workload); PREEMPTED otherwise (the node
                                       planner counts the preemption itself); a multislice
                                       slot's surviving slices are stopped
  fleet lost its workload / unwanted   CANCELLED, stop
  no probe of this attempt this tick   keep watching (e.g. after a daemon restart: re-attach,
                                       never relaunch blindly)
  a worker got the preemption notice   PREEMPTED (never a failure, whatever the exit codes)
                                       once no worker runs it any more or `stop_grace` after
                                       the notice; the node is lost (`lost`: the planner
                                       moves it to DEAD, counting the preemption once, and the
                                       node planner deletes it without waiting for PREEMPTED);
                                       until then keep watching: the workload checkpoints
  the daemon signalled it before a      PREEMPTED (never a failure, whatever the exit codes)
  maintenance window (maintenance.py)  once no worker runs it, or `stop_grace` after the
                                       signal (then stop); the node stays for the window
  a worker's run killed (gone, or      PREEMPTED, stop (the maintenance killed it: never a
  unreachable; none exited non-zero)   failure); the next attempt follows the window. A
  while the node is under host         run that exits non-zero in a window is a crash
  maintenance (health UNHEALTHY_
  MAINTENANCE, or inside its window)
  a worker rebooted                    PREEMPTED, stop
  a worker exited non-zero or died     FAILED, stop every worker
  a worker unreachable                 wait `unreachable_grace`, then PREEMPTED and replace
                                       the node (the API can show READY for a dead machine)
  a worker never started the attempt   within `launch_grace` of its start, and no worker
                                       ended: launch it again there (resume, idempotent);
                                       else FAILED, stop
  every worker exited 0                SUCCEEDED
  some exited 0, others still run      wait `exit_grace` for the rest, then FAILED, stop
  every log quiet for `hang_timeout`   HUNG, stop
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tpucared.core.model.durations import fmt
from tpucared.core.model.records import AttemptOutcome, NodePhase, WorkloadAttemptRecord
from tpucared.core.workload import maintenance
from tpucared.core.workload.inputs import (
    NEVER_STARTED,
    REBOOTED,
    NoticeKind,
    SlotProbe,
    WorkerProbe,
    WorkerState,
)
from tpucared.core.workload.slot_work import SlotWork, WorkloadPolicy

P = NodePhase
Out = AttemptOutcome
W = WorkerState


@dataclass(frozen=True)
class Verdict:
    """How the running attempt ends (or that it is resumed)."""

    outcome: AttemptOutcome | None
    detail: str
    codes: dict[int, int | None] = field(default_factory=dict)
    stop: bool = False  # its processes may still run on a READY node: stop every worker
    replace: str | None = None  # replace the node; the end reason (at most 64 characters)
    resume: bool = False
    lost: bool = False  # the node got its preemption notice: it is dead to us


def judge(w: SlotWork, a: WorkloadAttemptRecord, policy: WorkloadPolicy) -> Verdict | None:
    """The verdict on the running attempt `a` (the rules in the module docstring), or None
    while it runs on, or while there is no news of it yet."""
    node = w.node
    on_node = node is not None and node.id == a.incarnation_id
    probe = _probe_of(w, a, on_node)
    codes = _codes(probe)
    if not on_node or w.phase_after is not P.READY:
        return _off_node(w, a, probe, codes, on_node)
    assert node is not None
    if w.spec is None or w.unwanted is not None:
        why = w.unwanted or "the fleet has no workload any more"
        return Verdict(Out.CANCELLED, f"stopped: {why}", codes, stop=True)
    if probe is None:
        return None
    noticed = [p.notice_at for p in probe.workers if p.notice_at is not None]
    if noticed:
        return _noticed(w, probe.workers, min(noticed), codes)
    asked = maintenance.asked_at(w, a.started_at)
    if asked is not None:
        return _checkpointed(w, probe.workers, asked, codes)
    if maintenance.under_way(w) and _killed(probe.workers):
        # The host went down under the run (no notice reached it): the maintenance's end.
        detail = f"stopped by host maintenance: {_story(probe.workers)}"
        return Verdict(Out.PREEMPTED, detail, codes, stop=_may_run(probe.workers))
    return _by_workers(w, a, probe.workers, codes, policy, w.spec.hang_timeout)


def _noticed(
    w: SlotWork, workers: tuple[WorkerProbe, ...], at: datetime, codes: dict[int, int | None]
) -> Verdict | None:
    """The VM is being preempted: the workload got its stop signal from the watcher; wait
    for it to exit (a checkpoint) up to `stop_grace`, then the attempt was preempted."""
    how = _after_signal(w, workers, at, "every worker stopped")
    if how is None:
        return None
    what = "preemption notice"
    if any(p.notice_kind is NoticeKind.MAINTENANCE for p in workers):
        what = "host-maintenance notice (TERMINATE_ON_HOST_MAINTENANCE)"
    # No stop: the node is lost and deleted, processes and all.
    return Verdict(Out.PREEMPTED, f"{what}; {how}", codes, lost=True)


def _checkpointed(
    w: SlotWork, workers: tuple[WorkerProbe, ...], at: datetime, codes: dict[int, int | None]
) -> Verdict | None:
    """The daemon sent the workload its stop signal before a maintenance window
    (maintenance.py): its end, whatever the exit codes, is the maintenance's. The node stays
    (the window has not started); a run still going after `stop_grace` is stopped."""
    how = _after_signal(w, workers, at, "stopped")
    if how is None:
        return None
    detail = f"checkpointed before host maintenance; {how}"
    return Verdict(Out.PREEMPTED, detail, codes, stop=_may_run(workers))


def _after_signal(
    w: SlotWork, workers: tuple[WorkerProbe, ...], at: datetime, stopped: str
) -> str | None:
    """How the workload took the stop signal it got at `at`: None while some worker still
    runs it within `stop_grace` (it checkpoints), else the words for the attempt's end."""
    assert w.spec is not None
    running = [p for p in workers if p.state is W.RUNNING]
    waited = w.now - at
    if running and waited < timedelta(seconds=w.spec.stop_grace):
        return None
    if running:
        return f"{worker_names(running)} still running after {fmt(waited)} (stop_grace)"
    return f"{stopped} within {fmt(max(waited, timedelta(0)))}: {_story(workers)}"


def _probe_of(w: SlotWork, a: WorkloadAttemptRecord, on_node: bool) -> SlotProbe | None:
    """This tick's probe if it is of `a` on its node: a probe of another node or attempt
    says nothing about this one."""
    probe = w.probe
    if (
        probe is not None
        and on_node
        and probe.incarnation_id == a.incarnation_id
        and probe.attempt == a.number
        and probe.workers
    ):
        return probe
    return None


def _off_node(
    w: SlotWork,
    a: WorkloadAttemptRecord,
    probe: SlotProbe | None,
    codes: dict[int, int | None],
    on_node: bool,
) -> Verdict:
    """The attempt's node is gone, or not READY after this plan: nothing left to stop."""
    if probe is not None and _all_exited_zero(probe.workers):
        return Verdict(Out.SUCCEEDED, "exited 0 on every worker", codes)
    if w.spec is None or w.unwanted is not None:
        why = w.unwanted or "the fleet has no workload any more"
        return Verdict(Out.CANCELLED, f"stopped: {why}", codes)
    node = w.node
    if on_node and node is not None and w.phase_after is not None:
        where = f"{node.node_name} is {w.phase_after.value}"
    else:
        where = f"its node (incarnation #{a.incarnation_id}) is gone"
    # A multislice slot lost a slice: the others still run it, waiting for their peers.
    survivors = w.gang.survivors() if w.gang is not None else []
    if survivors:
        where = f"{where}; stopping it on {', '.join(s.node_name for s in survivors)}"
    return Verdict(Out.PREEMPTED, where, codes, stop=bool(survivors))


def _by_workers(
    w: SlotWork,
    a: WorkloadAttemptRecord,
    workers: tuple[WorkerProbe, ...],
    codes: dict[int, int | None],
    policy: WorkloadPolicy,
    hang_timeout: float | None,
) -> Verdict | None:
    """The attempt on its READY node, by what this tick's probe found on each worker (the
    rules from "a worker rebooted" on)."""
    rebooted = [p for p in workers if p.state is W.GONE and p.detail == REBOOTED]
    if rebooted:
        return Verdict(Out.PREEMPTED, f"{worker_names(rebooted)} rebooted", codes, stop=True)
    broken = [
        p
        for p in workers
        if (p.state is W.EXITED and p.exit_code != 0)
        or (p.state is W.GONE and p.detail != NEVER_STARTED)
    ]
    if broken:
        return Verdict(Out.FAILED, _story(workers), codes, stop=_may_run(workers))
    unreachable = [p for p in workers if p.state is W.UNREACHABLE]
    if unreachable:
        since = earliest_since(unreachable, w.now)
        if w.now - since < policy.unreachable_grace:
            return None
        detail = f"{worker_names(unreachable)} unreachable for {fmt(w.now - since)}: " + "; ".join(
            p.describe() for p in unreachable
        )
        return Verdict(Out.PREEMPTED, detail, codes, replace="replaced: workers unreachable")
    never = [p for p in workers if p.state is W.GONE]  # NEVER_STARTED, the only GONE left
    if never:
        return _never_started(w, a, workers, never, codes, policy)
    return _running_or_exited(w, a, workers, codes, policy, hang_timeout)


def _never_started(
    w: SlotWork,
    a: WorkloadAttemptRecord,
    workers: tuple[WorkerProbe, ...],
    never: list[WorkerProbe],
    codes: dict[int, int | None],
    policy: WorkloadPolicy,
) -> Verdict:
    """Some workers never started the attempt: resume it there while the rest run and the
    launch is recent, else it failed."""
    rest_running = all(p.state is W.RUNNING for p in workers if p not in never)
    if rest_running and w.now - a.started_at < policy.launch_grace:
        return Verdict(
            None,
            f"attempt {a.number} has not started on {worker_names(never)}: launch it there",
            resume=True,
        )
    return Verdict(
        Out.FAILED,
        f"never started on {worker_names(never)} ({fmt(w.now - a.started_at)} after launch)",
        codes,
        stop=_may_run(workers),
    )


def _running_or_exited(
    w: SlotWork,
    a: WorkloadAttemptRecord,
    workers: tuple[WorkerProbe, ...],
    codes: dict[int, int | None],
    policy: WorkloadPolicy,
    hang_timeout: float | None,
) -> Verdict | None:
    """Every worker runs the attempt or exited 0: done, waiting for the rest, or hung."""
    running = [p for p in workers if p.state is W.RUNNING]
    if not running:
        return Verdict(Out.SUCCEEDED, "exited 0 on every worker", codes)
    if len(running) < len(workers):
        first = earliest_since([p for p in workers if p.state is W.EXITED], w.now)
        if w.now - first < policy.exit_grace:
            return None
        exited = [p for p in workers if p.state is W.EXITED]
        detail = (
            f"{worker_names(exited)} exited 0 but {worker_names(running)} still running "
            f"{fmt(w.now - first)} later"
        )
        return Verdict(Out.FAILED, detail, codes, stop=True)
    if hang_timeout is not None:
        # Hung only when no worker's log grows: often only worker 0 logs at all.
        quiet = max(max((p.log_since or w.now) for p in workers), a.started_at)
        if w.now - quiet >= timedelta(seconds=hang_timeout):
            detail = f"no log output on any worker for {fmt(w.now - quiet)} (hang_timeout)"
            return Verdict(Out.HUNG, detail, codes, stop=True)
    return None


def _killed(workers: Iterable[WorkerProbe]) -> bool:
    """Some worker's run was killed from outside (gone, not an exit of its own) or cannot be
    reached, and none exited non-zero: what a host going down does, never a crash."""
    ws = list(workers)
    crashed = any(p.state is W.EXITED and p.exit_code != 0 for p in ws)
    gone = any(p.state in (W.GONE, W.UNREACHABLE) and p.detail != NEVER_STARTED for p in ws)
    return gone and not crashed


def _codes(probe: SlotProbe | None) -> dict[int, int | None]:
    if probe is None:
        return {}
    return {p.worker: p.exit_code if p.state is W.EXITED else None for p in probe.workers}


def _all_exited_zero(workers: Iterable[WorkerProbe]) -> bool:
    ws = list(workers)
    return bool(ws) and all(p.state is W.EXITED and p.exit_code == 0 for p in ws)


def _may_run(workers: Iterable[WorkerProbe]) -> bool:
    """Some worker may still run the attempt (or we cannot tell): it must be stopped."""
    return any(p.state in (W.RUNNING, W.UNREACHABLE) for p in workers)


def earliest_since(workers: Iterable[WorkerProbe], now: datetime) -> datetime:
    """When the longest-lasting of these workers' states began."""
    return min((p.since or now) for p in workers)


def worker_names(workers: list[WorkerProbe]) -> str:
    """`worker 2` or `workers 0, 1`, for messages."""
    indexes = ", ".join(str(p.worker) for p in workers)
    return f"worker {indexes}" if len(workers) == 1 else f"workers {indexes}"


def _story(workers: tuple[WorkerProbe, ...]) -> str:
    """`worker 2 exited 1; worker 3 gone (died); workers 0, 1 running`."""
    groups: dict[str, list[WorkerProbe]] = {}
    for p in workers:
        groups.setdefault(p.describe(), []).append(p)
    # Ends first: they are the news.
    order = sorted(groups.items(), key=lambda kv: (kv[1][0].state is W.RUNNING, kv[0]))
    return "; ".join(f"{worker_names(ps)} {what}" for what, ps in order)
