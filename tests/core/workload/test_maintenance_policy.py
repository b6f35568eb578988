"""A fleet's `on_maintenance` before an announced window (core/workload/maintenance.py, issue 41
item 2), through the workload planner: the checkpoint at `maintenance_lead`, the attempt's end
after it (never charged), no launch into the window, the early start asked once, the node
replaced when the window is longer than its create took, and `ignore`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import MaintenanceWindow
from tpucared.core.model.records import AttemptOutcome, IncarnationRecord, WorkloadAttemptRecord
from tpucared.core.model.specs import OnMaintenance, WorkloadSpec
from tpucared.core.vocab.actions import DeleteNode
from tpucared.core.workload.actions import (
    CHARGED_OUTCOMES,
    CheckpointForMaintenance,
    StartMaintenance,
    StopWorkload,
)
from tpucared.core.workload.gang import Gang
from tpucared.core.workload.maintenance import MAX_OVERRUN
from tpucared.core.workload.slot_work import SlotWork

from ..core_support import T0
from .workload_support import attempt, decide, finish_of, launch_of, node, probe, work

M = OnMaintenance
LEAD = 300.0


def spec(policy: OnMaintenance = M.CHECKPOINT) -> WorkloadSpec:
    return WorkloadSpec(run="python3 train.py", on_maintenance=policy, maintenance_lead=LEAD)


def window(
    start_in: float, length: float = 3600.0, status: str = "PENDING", can_reschedule: bool = True
) -> MaintenanceWindow:
    start = T0 + timedelta(seconds=start_in)
    end = start + timedelta(seconds=length)
    return MaintenanceWindow(start, end, "SCHEDULED", status, can_reschedule)


def with_window(win: MaintenanceWindow) -> IncarnationRecord:
    return replace(node(), maintenance=win)


def handled(win: MaintenanceWindow, signalled_at: datetime | None = None) -> IncarnationRecord:
    return replace(with_window(win), maintenance_handled_for=win.start,
                   maintenance_checkpoint_at=signalled_at)  # fmt: skip


def ended_attempt() -> WorkloadAttemptRecord:
    return attempt(outcome=AttemptOutcome.PREEMPTED, ended=T0 - timedelta(seconds=5))


# --- the checkpoint ----------------------------------------------------------------------------


def test_a_window_within_the_lead_gets_the_running_attempt_checkpointed() -> None:
    p = decide(work(spec=spec(), node_=with_window(window(LEAD - 1))))
    (ask,) = [a for a in p.actions if isinstance(a, CheckpointForMaintenance)]
    assert (ask.attempt, ask.signal, ask.window_start) == (
        3,
        "TERM",
        T0 + timedelta(seconds=LEAD - 1),
    )
    assert "maintenance_lead 300s" in ask.reason


def test_a_window_beyond_the_lead_or_already_handled_asks_nothing() -> None:
    far = decide(work(spec=spec(), node_=with_window(window(LEAD + 60))))
    win = window(60)
    done = decide(work(spec=spec(), node_=handled(win, T0 - timedelta(seconds=1))))
    for p in (far, done):
        assert not [a for a in p.actions if isinstance(a, CheckpointForMaintenance)]


def test_ignore_asks_nothing_and_launches_as_usual() -> None:
    p = decide(work(spec=spec(M.IGNORE), node_=with_window(window(30))))
    assert not [a for a in p.actions if isinstance(a, CheckpointForMaintenance)]
    idle = decide(work(spec=spec(M.IGNORE), node_=with_window(window(30)), last=ended_attempt(),
                       probe_=probe("ok", "ok", "ok", "ok", attempt=None)))  # fmt: skip
    assert launch_of(idle) is not None


def test_the_attempt_signalled_for_maintenance_ends_preempted_whatever_its_codes() -> None:
    win = window(60)
    for states in (("ok",) * 4, ("exit143",) * 4, ("exit1", "ok", "ok", "ok")):
        node_ = handled(win, T0 - timedelta(seconds=20))
        p = decide(work(spec=spec(), node_=node_, probe_=probe(*states)))
        finish = finish_of(p)
        assert finish is not None, states
        assert finish.outcome is AttemptOutcome.PREEMPTED
        assert finish.outcome not in CHARGED_OUTCOMES
        assert "checkpointed before host maintenance" in (finish.detail or "")
        assert launch_of(p) is None  # not into the window
        assert not [a for a in p.actions if isinstance(a, DeleteNode)]  # the node stays


def test_a_run_still_going_stop_grace_after_the_signal_is_stopped() -> None:
    win = window(60)
    waiting = decide(work(spec=spec(), node_=handled(win, T0 - timedelta(seconds=10))))
    assert finish_of(waiting) is None  # 10 s < stop_grace 25 s: it checkpoints
    late = decide(work(spec=spec(), node_=handled(win, T0 - timedelta(seconds=30))))
    finish = finish_of(late)
    assert finish is not None
    assert finish.outcome is AttemptOutcome.PREEMPTED
    assert [a for a in late.actions if isinstance(a, StopWorkload)]


def test_an_attempt_started_after_the_signal_is_judged_as_usual() -> None:
    node_ = handled(window(60), T0 - timedelta(hours=2))  # an old window's signal
    p = decide(work(spec=spec(), node_=node_, probe_=probe("exit1", "ok", "ok", "ok")))
    finish = finish_of(p)
    assert finish is not None
    assert finish.outcome is AttemptOutcome.FAILED


# --- no launch into the window -----------------------------------------------------------------


def idle_work(policy: OnMaintenance, node_: IncarnationRecord) -> SlotWork:
    return work(spec=spec(policy), node_=node_, last=ended_attempt(),
                probe_=probe("ok", "ok", "ok", "ok", attempt=None))  # fmt: skip


def test_with_nothing_running_a_due_window_is_recorded_and_nothing_launches() -> None:
    p = decide(idle_work(M.CHECKPOINT, with_window(window(60))))
    (ask,) = [a for a in p.actions if isinstance(a, CheckpointForMaintenance)]
    assert ask.attempt is None
    assert launch_of(p) is None
    assert any("no launch into the maintenance window" in h.reason for h in p.holds)


def test_checkpoint_waits_for_the_window_to_pass_then_launches() -> None:
    win = window(60)
    p = decide(idle_work(M.CHECKPOINT, handled(win)))
    assert launch_of(p) is None
    assert any("to pass" in h.reason for h in p.holds)
    over = replace(node(), maintenance=None, maintenance_handled_for=win.start)
    assert launch_of(decide(idle_work(M.CHECKPOINT, over))) is not None


def test_a_window_never_run_nor_withdrawn_holds_no_longer_than_its_end_and_the_overrun() -> None:
    win = window(-7200, length=3600)  # ended an hour ago, still listed
    assert win.end is not None
    assert win.end + MAX_OVERRUN < T0
    assert launch_of(decide(idle_work(M.CHECKPOINT, handled(win)))) is not None


# --- now ---------------------------------------------------------------------------------------


def test_now_starts_the_maintenance_once_after_the_checkpoint() -> None:
    win = window(120, can_reschedule=True)
    p = decide(idle_work(M.NOW, handled(win)))
    (start,) = [a for a in p.actions if isinstance(a, StartMaintenance)]
    assert start.window_start == win.start
    asked = replace(handled(win), maintenance_started_at=T0 - timedelta(seconds=5))
    again = decide(idle_work(M.NOW, asked))
    assert not [a for a in again.actions if isinstance(a, StartMaintenance)]
    assert launch_of(again) is None


def test_the_window_moved_earlier_by_our_own_early_start_is_still_the_handled_one() -> None:
    win = window(120)
    asked = replace(handled(win), maintenance_started_at=T0 - timedelta(seconds=5))
    started = replace(win, start=T0 - timedelta(seconds=4), status="ONGOING")
    moved = replace(asked, maintenance=started)
    p = decide(idle_work(M.NOW, moved))
    assert not [a for a in p.actions if isinstance(a, CheckpointForMaintenance)]
    assert launch_of(p) is None
    # Without an early start of ours, an earlier window is another one: handled afresh.
    other = replace(handled(win), maintenance=started)
    again = decide(idle_work(M.NOW, other))
    assert [a for a in again.actions if isinstance(a, CheckpointForMaintenance)]


@pytest.mark.parametrize(
    ("win", "words"),
    [
        (window(120, can_reschedule=False), "canReschedule false"),
        (window(120, status="ONGOING"), "it is ONGOING"),
    ],
)
def test_now_falls_back_to_waiting_and_says_why(win: MaintenanceWindow, words: str) -> None:
    p = decide(idle_work(M.NOW, handled(win)))
    assert not [a for a in p.actions if isinstance(a, StartMaintenance)]
    assert launch_of(p) is None
    assert any(words in h.reason and "cannot start" in h.reason for h in p.holds)


# --- replace -----------------------------------------------------------------------------------


def test_replace_deletes_the_node_with_cause_maintenance_when_the_window_is_longer() -> None:
    # The node took 10 min to create; the window is an hour.
    win = window(120)
    node_ = replace(handled(win), requested_at=T0 - timedelta(hours=2),
                    ready_at=T0 - timedelta(minutes=110))  # fmt: skip
    p = decide(idle_work(M.REPLACE, node_))
    (delete,) = [a for a in p.actions if isinstance(a, DeleteNode)]
    assert delete.cause is LossCause.MAINTENANCE
    assert launch_of(p) is None


def test_replace_waits_instead_when_a_recreate_takes_longer_than_the_window() -> None:
    win = window(120, length=600)  # 10 min window, 60 min create
    node_ = replace(handled(win), requested_at=T0 - timedelta(hours=2),
                    ready_at=T0 - timedelta(minutes=60))  # fmt: skip
    p = decide(idle_work(M.REPLACE, node_))
    assert not [a for a in p.actions if isinstance(a, DeleteNode)]
    assert any("to pass" in h.reason for h in p.holds)


# --- a multislice slot ---------------------------------------------------------------------


def test_a_slice_s_window_checkpoints_the_whole_gang_and_ends_its_attempt() -> None:
    """Each slice has its own window: the first due one acts for the gang (every slice's run
    is signalled by the runtime), and the gang's attempt ends as the maintenance's."""
    win = window(60)
    first = replace(node(id=3), slice=0, maintenance=win)
    second = replace(node(id=7), slice=1)
    gang = Gang("sweep-0", 2, (first, second), {3: first.phase, 7: second.phase}, {3: 2, 7: 2})
    stand_in = gang.stand_in()
    assert stand_in is not None
    running = replace(work(spec=spec(), node_=stand_in, last=attempt(node_id=7),
                           probe_=probe(node_id=7)), gang=gang)  # fmt: skip
    (ask,) = [a for a in decide(running).actions if isinstance(a, CheckpointForMaintenance)]
    assert (ask.incarnation_id, ask.attempt) == (3, 3)
    signalled = replace(first, maintenance_handled_for=win.start,
                        maintenance_checkpoint_at=T0 - timedelta(seconds=3))  # fmt: skip
    gang = replace(gang, slices=(signalled, second))
    stopped = replace(running, gang=gang, probe=probe("ok", "ok", "ok", "ok", node_id=7))
    finish = finish_of(decide(stopped))
    assert finish is not None
    assert finish.outcome is AttemptOutcome.PREEMPTED


# --- a run killed by the host's maintenance, with no notice -------------------------------


@pytest.mark.parametrize(
    ("node_", "states", "outcome"),
    [
        # The node says it is under maintenance; the runs died with the host.
        (replace(node(), health="UNHEALTHY_MAINTENANCE"), ("died",) * 4, AttemptOutcome.PREEMPTED),
        # Inside its announced window (ONGOING); the workers cannot be reached.
        (with_window(window(-30, status="ONGOING")), ("down",) * 4, AttemptOutcome.PREEMPTED),
        # A run that exits non-zero in a window is the workload's crash.
        (
            replace(node(), health="UNHEALTHY_MAINTENANCE"),
            ("exit1", "died", "run", "run"),
            AttemptOutcome.FAILED,
        ),
        # No maintenance: a died run is a failure, as ever.
        (node(), ("died", "run", "run", "run"), AttemptOutcome.FAILED),
    ],
    ids=["unhealthy-maintenance", "window-unreachable", "crash-in-window", "no-maintenance"],
)
def test_a_run_killed_by_host_maintenance_is_never_a_failure(
    node_: IncarnationRecord, states: tuple[str, ...], outcome: AttemptOutcome
) -> None:
    p = decide(work(spec=spec(M.IGNORE), node_=node_, probe_=probe(*states)))
    finish = finish_of(p)
    assert finish is not None
    assert finish.outcome is outcome
    if outcome is AttemptOutcome.PREEMPTED:
        assert (finish.detail or "").startswith("stopped by host maintenance")
        assert launch_of(p) is None
