"""Loss causes in the workload planner (core/workload/planner.py; issue 41 item 4): a node given
up after its workload saw the preemption notice is PREEMPTED (MAINTENANCE inside its announced
window); a node replaced because its workers stopped answering is UNKNOWN. And only the
workload's own crash spends `max_failures`: an attempt whose node is lost, whatever the loss's
cause (preempted, maintenance, run ended, deleted outside, stuck, bad host), ends PREEMPTED,
which is never charged.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import MaintenanceWindow
from tpucared.core.model.records import AttemptOutcome, NodePhase
from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.vocab.actions import DeleteNode, Transition
from tpucared.core.workload.actions import CHARGED_OUTCOMES, MarkSlotDone
from tpucared.core.workload.inputs import NoticeKind

from ..core_support import T0
from .test_notice import SPEC, noticed
from .workload_support import decide, finish_of, node, probe, slot, work

P = NodePhase


def test_a_node_given_up_after_the_notice_is_preempted() -> None:
    p = decide(work(spec=SPEC, probe_=noticed("ok", "ok", "ok", "ok")))
    (dead,) = [a for a in p.actions if isinstance(a, Transition)]
    assert dead.cause is LossCause.PREEMPTED
    (delete,) = [a for a in p.actions if isinstance(a, DeleteNode)]
    assert delete.cause is None  # the loss is recorded once, on the Transition


def test_the_notice_inside_the_announced_window_is_maintenance() -> None:
    window = MaintenanceWindow(start=T0 - timedelta(seconds=30), end=T0 + timedelta(hours=1))
    node_ = replace(node(), maintenance=window)
    p = decide(work(spec=SPEC, node_=node_, probe_=noticed("ok", "ok", "ok", "ok")))
    (dead,) = [a for a in p.actions if isinstance(a, Transition)]
    assert dead.cause is LossCause.MAINTENANCE


def test_a_notice_just_before_the_window_is_maintenance_one_long_before_is_not() -> None:
    """The maintenance-event notice comes about 60 s before the window starts."""
    for start_in, cause in ((60, LossCause.MAINTENANCE), (3600, LossCause.PREEMPTED)):
        start = T0 + timedelta(seconds=start_in)
        window = MaintenanceWindow(start=start, end=start + timedelta(hours=1))
        node_ = replace(node(), maintenance=window)
        p = decide(work(spec=SPEC, node_=node_, probe_=noticed("ok", "ok", "ok", "ok")))
        (dead,) = [a for a in p.actions if isinstance(a, Transition)]
        assert dead.cause is cause, start_in


def test_a_notice_the_run_heard_as_host_maintenance_is_maintenance_without_a_window() -> None:
    """The in-VM watcher's TERMINATE_ON_HOST_MAINTENANCE (run.sh notice_kind), no window
    announced on the node (unscheduled maintenance)."""
    heard = noticed("ok", "ok", "ok", "ok")
    workers = tuple(replace(p, notice_kind=NoticeKind.MAINTENANCE) for p in heard.workers)
    p = decide(work(spec=SPEC, probe_=replace(heard, workers=workers)))
    (dead,) = [a for a in p.actions if isinstance(a, Transition)]
    assert dead.cause is LossCause.MAINTENANCE
    finish = finish_of(p)
    assert finish is not None
    assert (finish.detail or "").startswith("host-maintenance notice")


def test_workers_unreachable_replace_the_node_with_an_unknown_cause() -> None:
    down = probe("down", "down", "run", "run", since=T0 - timedelta(minutes=30))
    p = decide(work(probe_=down))
    deletes = [a for a in p.actions if isinstance(a, DeleteNode)]
    assert deletes
    assert {d.cause for d in deletes} == {LossCause.UNKNOWN}
    finish = finish_of(p)
    assert finish is not None
    assert finish.outcome not in CHARGED_OUTCOMES


# A node lost to any cause: the node planner has moved it out of READY in this plan (DEAD,
# DELETING), or it is gone; none of this is the workload's doing.
LOST = [("dead", P.DEAD, True), ("deleting", P.DELETING, True), ("gone", None, False)]


@pytest.mark.parametrize(("after", "keep_node"), [r[1:] for r in LOST], ids=[r[0] for r in LOST])
def test_a_lost_node_never_spends_max_failures(after: P | None, keep_node: bool) -> None:
    spec = WorkloadSpec(run="python3 train.py", max_failures=2)
    at_limit = slot(failures=2)
    p = decide(
        work(
            spec=spec,
            slot_=at_limit,
            node_=node() if keep_node else None,
            phase_after=after,
            probe_=None,
        )
    )
    finish = finish_of(p)
    assert finish is not None
    assert finish.outcome is AttemptOutcome.PREEMPTED
    assert finish.outcome not in CHARGED_OUTCOMES
    assert not [a for a in p.actions if isinstance(a, MarkSlotDone)]  # not given up


def test_only_a_crash_spends_max_failures() -> None:
    spec = WorkloadSpec(run="python3 train.py", max_failures=2)
    p = decide(work(spec=spec, slot_=slot(failures=2), probe_=probe("exit1", "run", "run", "run")))
    finish = finish_of(p)
    assert finish is not None
    assert finish.outcome is AttemptOutcome.FAILED
    assert finish.outcome in CHARGED_OUTCOMES
    assert [a for a in p.actions if isinstance(a, MarkSlotDone)]  # 3 > max_failures: given up
