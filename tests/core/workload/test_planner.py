"""The workload sub-planner, rule by rule: tables of one slot's situation -> its actions.

Each row changes one thing from the default world of workload_support.py
(attempt 3 runs on READY node #7 of 4 workers since ten minutes; this tick's probe is of that
attempt).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tpucared.core.model.backoff import BackoffRule
from tpucared.core.model.records import AttemptOutcome
from tpucared.core.model.specs import OnSuccess, RestartPolicy, WorkloadSpec
from tpucared.core.vocab.actions import DeleteNode, Notice, Severity
from tpucared.core.workload.actions import StopWorkload
from tpucared.core.workload.inputs import SlotProbe, WorkerProbe, WorkerState, track
from tpucared.core.workload.planner import CRASH_BACKOFF, WorkloadPolicy

from ..core_support import T0
from .workload_support import (
    NODE_ID,
    P,
    ago,
    attempt,
    decide,
    finish_of,
    kinds,
    launch_of,
    node,
    outcome_of,
    probe,
    slot,
    w,
    work,
)

Out = AttemptOutcome
SHORT = {"last": attempt(started=ago(minutes=2))}  # a short run: a crash loop backs off
YOUNG = {"last": attempt(started=ago(seconds=30))}  # launched moments ago
LATE = {"since": ago(minutes=6)}  # past unreachable_grace


# ---------------------------------------------------------------------------------------------
# The running attempt, by what the probe shows


@pytest.mark.parametrize(
    ("states", "extra", "outcome", "expect"),
    [
        # Healthy, or nothing to conclude yet.
        (("run", "run", "run", "run"), {}, None, []),
        # One worker ends badly: the attempt failed on every worker. A long run relaunches
        # at once, and the relaunch's cleanup stops the others (no separate stop).
        (("run", "run", "exit1", "run"), {}, "failed", ["finish", "launch"]),
        (("run", "run", "died", "run"), {}, "failed", ["finish", "launch"]),
        (("exit3", "exit3", "exit3", "exit3"), {}, "failed", ["finish", "launch"]),
        (("ok", "ok", "exit1", "ok"), {}, "failed", ["finish", "launch"]),
        # A short run backs off: the others are stopped now, the relaunch waits.
        (("run", "run", "exit1", "run"), SHORT, "failed", ["finish", "stop"]),
        (("run", "died", "run", "run"), SHORT, "failed", ["finish", "stop"]),
        (("exit1", "exit1", "exit1", "exit1"), SHORT, "failed", ["finish"]),
        # Exit 0 everywhere: done (restart = on-failure).
        (("ok", "ok", "ok", "ok"), {}, "succeeded", ["finish", "slot-done"]),
        (("ok", "ok", "ok", "ok"), SHORT, "succeeded", ["finish", "slot-done"]),
        # A rebooted worker: the machine's doing, relaunch at once (no backoff).
        (("rebooted", "run", "run", "run"), SHORT, "preempted", ["finish", "launch"]),
        # Stragglers after exit 0 get exit_grace.
        (("ok", "run", "run", "run"), {}, None, []),
        (("ok", "run", "run", "run"), {"since": ago(minutes=2)}, "failed", ["finish", "launch"]),
        # Unreachable workers: wait, then replace the node.
        (("down", "run", "run", "run"), {}, None, []),
        (("down", "run", "run", "run"), LATE, "preempted", ["finish", "delete"]),
        (("down", "down", "down", "down"), LATE, "preempted", ["finish", "delete"]),
        # An unreachable worker next to a failed one: stop what can be reached; no launch
        # while a worker cannot be reached.
        (("down", "exit1", "run", "run"), {}, "failed", ["finish", "stop"]),
        # Never started: resume within launch_grace, else it failed.
        (("norun", "norun", "norun", "norun"), YOUNG, None, ["launch"]),
        (("run", "norun", "run", "run"), YOUNG, None, ["launch"]),
        (("run", "norun", "run", "run"), {}, "failed", ["finish", "launch"]),
        (("ok", "norun", "ok", "ok"), YOUNG, "failed", ["finish"]),
    ],
)  # fmt: skip
def test_running_attempt(
    states: tuple[str, ...], extra: dict[str, Any], outcome: str | None, expect: list[str]
) -> None:
    kw = dict(extra)
    since = kw.pop("since", None)
    p = decide(work(probe_=probe(*states, since=since), **kw))
    assert outcome_of(p) == outcome
    assert kinds(p) == expect


def test_a_failure_records_codes_and_a_readable_detail() -> None:
    p = decide(work(probe_=probe("run", "exit1", "died", "run"), **SHORT))
    f = finish_of(p)
    assert f is not None
    assert f.exit_codes == {0: None, 1: 1, 2: None, 3: None}
    assert f.detail == "worker 1 exited 1; worker 2 gone (died); workers 0, 3 running"
    (stop,) = [a for a in p.actions if isinstance(a, StopWorkload)]
    assert (stop.attempt, stop.incarnation_id) == (3, NODE_ID)
    # The outcome is recorded before anything is killed.
    assert kinds(p) == ["finish", "stop"]


def test_relaunch_after_a_failure_cleans_up_the_failed_attempt_first() -> None:
    p = decide(work(probe_=probe("run", "run", "exit1", "run"), slot_=slot(failures=2)))
    launch = launch_of(p)
    assert launch is not None
    assert (launch.attempt, launch.clean_after, launch.attempt_id) == (4, 3, None)
    assert "after attempt 3 failed" in launch.reason


def test_a_resume_relaunches_the_same_attempt_into_its_run() -> None:
    p = decide(work(probe_=probe("norun", "run", "run", "run"),
                    last=attempt(started=ago(seconds=30))))  # fmt: skip
    launch = launch_of(p)
    assert launch is not None
    assert (launch.attempt, launch.attempt_id, launch.clean_after) == (3, 103, None)


# ---------------------------------------------------------------------------------------------
# The node under the attempt


@pytest.mark.parametrize(
    ("changes", "outcome", "expect"),
    [
        # The node planner found it preempted this tick (DEAD, delete).
        ({"phase_after": P.DELETING}, "preempted", ["finish"]),
        ({"phase_after": P.DEAD}, "preempted", ["finish"]),
        # Its incarnation is not live any more (e.g. the daemon was down meanwhile).
        ({"node_": None, "probe_": None}, "preempted", ["finish"]),
        # Exit 0 everywhere, seen just before the node went away: it succeeded.
        ({"phase_after": P.DELETING, "probe_": probe("ok", "ok", "ok", "ok")}, "succeeded",
         ["finish", "slot-done"]),
        # We take the node away (scale-down, `down`): cancelled.
        ({"phase_after": P.DELETING, "unwanted": "scaled down"}, "cancelled", ["finish"]),
        # The fleet lost its workload while the node stays: cancelled and stopped.
        ({"spec": None}, "cancelled", ["finish", "stop"]),
        # No probe this tick (just restarted, probe failed): keep watching, never relaunch.
        ({"probe_": None}, None, []),
        # A probe of another attempt or another node says nothing about this one.
        ({"probe_": probe("ok", "ok", "ok", "ok", attempt=2)}, None, []),
        ({"probe_": probe("ok", "ok", "ok", "ok", node_id=8)}, None, []),
    ],
)  # fmt: skip
def test_node_under_the_attempt(
    changes: dict[str, Any], outcome: str | None, expect: list[str]
) -> None:
    p = decide(work(**changes))
    assert outcome_of(p) == outcome
    assert kinds(p) == expect


def test_attempt_on_a_replaced_node_is_preempted_and_relaunched_on_the_new_one() -> None:
    fresh = node(id=8)
    p = decide(work(node_=fresh, probe_=probe("norun", "norun", "norun", "norun", attempt=None,
                                               node_id=8)))  # fmt: skip
    assert outcome_of(p) == "preempted"
    f = finish_of(p)
    assert f is not None
    assert f.detail == f"its node (incarnation #{NODE_ID}) is gone"
    launch = launch_of(p)
    assert launch is not None
    # A fresh node: nothing to clean up.
    assert (launch.attempt, launch.incarnation_id, launch.clean_after) == (4, 8, None)


def test_preemption_does_not_charge_the_crash_budget() -> None:
    p = decide(work(phase_after=P.DEAD, slot_=slot(failures=10)))
    assert outcome_of(p) == "preempted"
    assert [a for a in p.actions if isinstance(a, Notice)] == []


# ---------------------------------------------------------------------------------------------
# Hangs


@pytest.mark.parametrize(
    ("logs", "hung"),
    [
        ([ago(minutes=3)] * 4, True),
        ([ago(seconds=10), ago(minutes=3), ago(minutes=3), ago(minutes=3)], False),  # worker 0 logs
        ([ago(seconds=30)] * 4, False),
    ],
)
def test_hang_is_no_log_growth_on_any_worker(logs: list[Any], hung: bool) -> None:
    pr = probe()
    pr = SlotProbe(**{**pr.__dict__, "workers": tuple(
        w("run", i, log_since=t) for i, t in enumerate(logs))})  # fmt: skip
    spec = WorkloadSpec(run="x", hang_timeout=60.0)
    p = decide(work(spec=spec, probe_=pr))
    assert (outcome_of(p) == "hung") is hung
    if hung:
        assert kinds(p) == ["finish", "launch"]  # a long run relaunches at once


def test_no_hang_timeout_means_never_hung() -> None:
    pr = probe()
    pr = SlotProbe(**{**pr.__dict__, "workers": tuple(
        w("run", i, log_since=ago(days=1)) for i in range(4))})  # fmt: skip
    assert kinds(decide(work(probe_=pr))) == []


def test_hang_is_timed_from_the_attempt_start_at_the_latest() -> None:
    pr = probe()
    pr = SlotProbe(**{**pr.__dict__, "workers": tuple(
        w("run", i, log_since=ago(hours=1)) for i in range(4))})  # fmt: skip
    spec = WorkloadSpec(run="x", hang_timeout=60.0)
    assert kinds(decide(work(spec=spec, probe_=pr, last=attempt(started=ago(seconds=30))))) == []


# ---------------------------------------------------------------------------------------------
# The next attempt


IDLE = probe("norun", "norun", "norun", "norun", attempt=None)
ALWAYS = WorkloadSpec(run="x", restart=RestartPolicy.ALWAYS)
NEVER = WorkloadSpec(run="x", restart=RestartPolicy.NEVER)


def ended(
    outcome: AttemptOutcome, *, minutes_run: float = 30, ago_min: float = 1, **kw: Any
) -> Any:
    end = ago(minutes=ago_min)
    return attempt(outcome=outcome, started=end - timedelta(minutes=minutes_run), ended=end, **kw)


@pytest.mark.parametrize(
    ("changes", "expect"),
    [
        # A fresh slot: attempt 1, nothing to clean.
        ({"last": None, "slot_": slot(attempts=0)}, ["launch"]),
        # restart decides after success...
        ({"last": ended(Out.SUCCEEDED)}, ["slot-done"]),
        ({"last": ended(Out.SUCCEEDED), "spec": ALWAYS},
         ["launch"]),
        ({"last": ended(Out.SUCCEEDED), "spec": NEVER},
         ["slot-done"]),
        # ...and after failure, with the crash budget.
        ({"last": ended(Out.FAILED), "slot_": slot(failures=10)}, ["launch"]),
        ({"last": ended(Out.FAILED), "slot_": slot(failures=11)}, ["slot-done", "notice"]),
        ({"last": ended(Out.HUNG), "slot_": slot(failures=11)}, ["slot-done", "notice"]),
        ({"last": ended(Out.FAILED), "slot_": slot(failures=1),
          "spec": WorkloadSpec(run="x", max_failures=0)}, ["slot-done", "notice"]),
        ({"last": ended(Out.FAILED), "slot_": slot(failures=1),
          "spec": NEVER}, ["slot-done", "notice"]),
        # Preemptions and cancellations relaunch whatever the restart policy and budget.
        ({"last": ended(Out.PREEMPTED, minutes_run=0.1), "slot_": slot(failures=11),
          "spec": NEVER}, ["launch"]),
        ({"last": ended(Out.CANCELLED, minutes_run=0.1)}, ["launch"]),
        # The slot no longer wants the workload.
        ({"last": ended(Out.FAILED), "slot_": slot(done=True)}, []),
        ({"last": None, "unwanted": "scaled down: fleet sweep has size 0"}, []),
        ({"last": None, "spec": None}, []),
        ({"last": None, "slot_": None}, []),
        # The node is not (or no longer) usable.
        ({"last": None, "node_": None}, []),
        ({"last": None, "node_": node(P.CREATING)}, []),
        ({"last": None, "phase_after": P.DEAD}, []),
        ({"last": None, "workers": 0}, []),
        # The TPU stayed held after the last cleanup: a bad host, replaced.
        ({"last": ended(Out.FAILED), "probe_": probe(attempt=3, busy=(2,))}, ["delete"]),
        # Unreachable workers: hold, then replace.
        ({"last": None, "probe_": probe("down", "norun", "norun", "norun", attempt=None)}, []),
        ({"last": None, "probe_": probe("down", "norun", "norun", "norun", attempt=None,
                                         since=ago(minutes=6))}, ["delete"]),
        # Probes missing or partial: wait for one of every worker.
        ({"last": None, "probe_": None}, []),
        ({"last": None, "probe_": probe("norun", "norun", attempt=None)}, []),
        # A launch that cannot work: a notice for a person, no launch.
        ({"last": None, "probe_": probe("norun", "norun", "norun", "norun", attempt=None,
                                         blocked="WANDB_KEY is not set")}, ["notice"]),
    ],
)  # fmt: skip
def test_next_attempt(changes: dict[str, Any], expect: list[str]) -> None:
    changes.setdefault("probe_", IDLE)
    assert kinds(decide(work(**changes))) == expect


def test_attempt_numbers_continue_from_the_slot_counter() -> None:
    launch = launch_of(decide(work(last=ended(Out.PREEMPTED, node_id=6), slot_=slot(attempts=3),
                                   probe_=IDLE)))  # fmt: skip
    assert launch is not None
    assert (launch.attempt, launch.clean_after) == (4, None)
    launch = launch_of(decide(work(last=None, slot_=slot(attempts=0), probe_=IDLE)))
    assert launch is not None
    assert launch.attempt == 1


def test_giving_up_tells_a_person_once_per_slot() -> None:
    p = decide(work(last=ended(Out.FAILED), slot_=slot(failures=11), probe_=IDLE))
    (notice,) = [a for a in p.actions if isinstance(a, Notice)]
    assert notice.severity is Severity.ERROR
    assert notice.key == "workload-gave-up/sweep/0"
    assert "11 failures, more than max_failures = 10" in notice.reason


@pytest.mark.parametrize(
    ("failures", "low", "high"),
    [(1, 10, 10), (2, 10, 20), (3, 10, 40), (6, 10, 300), (10, 10, 300)],
)
def test_a_crash_loop_backs_off_exponentially(failures: int, low: float, high: float) -> None:
    last = ended(Out.FAILED, minutes_run=0.5, ago_min=0)
    p = decide(work(last=last, slot_=slot(failures=failures), probe_=IDLE))
    assert kinds(p) == []
    (hold,) = p.holds
    assert hold.until is not None
    wait = (hold.until - T0).total_seconds()
    assert low <= wait <= high
    assert "relaunch backoff" in hold.reason
    assert "after attempt 3 failed" in hold.reason
    # Once the backoff has passed, it launches.
    assert kinds(decide(work(last=last, slot_=slot(failures=failures), probe_=IDLE,
                             now=hold.until))) == ["launch"]  # fmt: skip


def test_backoff_is_deterministic_and_spread_between_slots() -> None:
    last = ended(Out.FAILED, minutes_run=0.5, ago_min=0)
    one = decide(work(last=last, slot_=slot(failures=4), probe_=IDLE)).holds[0].until
    again = decide(work(last=last, slot_=slot(failures=4), probe_=IDLE)).holds[0].until
    other = decide(work(last=last, slot_=slot(failures=4, run_id="sweep-0-s"),
                        probe_=IDLE)).holds[0].until  # fmt: skip
    assert one == again
    assert one != other


def test_a_short_run_under_restart_always_waits_a_little() -> None:
    spec = WorkloadSpec(run="true", restart=RestartPolicy.ALWAYS)
    last = ended(Out.SUCCEEDED, minutes_run=0.1, ago_min=0)
    p = decide(work(spec=spec, last=last, probe_=IDLE))
    assert kinds(p) == []
    assert p.holds[0].until == T0 + CRASH_BACKOFF.base


def test_replacing_a_node_is_a_planned_delete_of_the_ready_node() -> None:
    p = decide(work(last=ended(Out.FAILED), probe_=probe(attempt=3, busy=(1, 3))))
    (delete,) = p.actions
    assert isinstance(delete, DeleteNode)
    # The end a bad host gets (core/workload/bad_hosts.py).
    expected = (NODE_ID, P.READY, "bad host")
    assert (delete.incarnation_id, delete.expected, delete.end_reason) == expected
    assert "worker(s) 1, 3" in delete.reason
    assert delete.end_reason is not None
    assert len(delete.end_reason) <= 64


def test_keep_on_success_does_not_relaunch() -> None:
    spec = WorkloadSpec(run="x", on_success=OnSuccess.KEEP)
    p = decide(work(spec=spec, last=ended(Out.SUCCEEDED), slot_=slot(done=True), probe_=IDLE))
    assert p.actions == []
    assert p.holds == []


def test_policy_refuses_negative_graces() -> None:
    with pytest.raises(ValueError, match="negative"):
        WorkloadPolicy(exit_grace=timedelta(seconds=-1))
    assert WorkloadPolicy(crash_backoff=BackoffRule(timedelta(seconds=1), timedelta(seconds=2)))


# ---------------------------------------------------------------------------------------------
# Tracking across ticks


def test_track_carries_timers_over_while_nothing_changes() -> None:
    t1, t2, t3 = T0, T0 + timedelta(seconds=10), T0 + timedelta(seconds=20)

    def tick(at: Any, *workers: WorkerProbe, attempt: int = 3) -> SlotProbe:
        return SlotProbe("sweep", 0, NODE_ID, attempt, at, tuple(workers))

    first = track(None, tick(t1, WorkerProbe.running(0, 10), WorkerProbe.running(1, 5)))
    assert [(p.since, p.log_since) for p in first.workers] == [(t1, t1), (t1, t1)]
    second = track(first, tick(t2, WorkerProbe.running(0, 20), WorkerProbe.unreachable(1, "x")))
    assert [(p.since, p.log_since) for p in second.workers] == [(t1, t2), (t2, t1)]
    # An unreachable worker's log size is unknown, not changed.
    assert second.workers[1].log_bytes == 5
    third = track(second, tick(t3, WorkerProbe.running(0, 20), WorkerProbe.running(1, 5)))
    assert [(p.since, p.log_since) for p in third.workers] == [(t1, t2), (t3, t1)]
    # A new attempt (or node) starts every timer afresh.
    fourth = track(third, tick(t3, WorkerProbe.running(0, 20), attempt=4))
    assert (fourth.workers[0].since, fourth.workers[0].log_since) == (t3, t3)
    assert fourth.workers[0].state is WorkerState.RUNNING
