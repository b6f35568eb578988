"""Bad hosts (core/workload/bad_hosts.py): a node whose workers fail the pre-launch check is
recycled with cause bad_host, in another zone first, on its own daily budget; max_failures
is never touched."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import AttemptOutcome
from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.vocab.actions import DeleteNode, Notice, Transition
from tpucared.core.workload.bad_hosts import bad_host_ends, within_day
from tpucared.core.workload.slot_work import SlotWork

from ..core_support import T0, Z1, Z2
from .workload_support import (
    NODE_ID,
    P,
    ago,
    attempt,
    decide,
    kinds,
    node,
    probe,
    slot,
    work,
)

IDLE = ("norun",) * 4
SPEC = WorkloadSpec(run="python3 train.py", max_bad_hosts=2, max_failures=0)


def bad(**kw: Any) -> SlotWork:
    """A first launch on a fresh node whose pre-launch check failed."""
    return work(spec=SPEC, last=None, slot_=slot(attempts=0),
                probe_=probe(*IDLE, attempt=None, **kw))  # fmt: skip


def test_a_held_accelerator_recycles_the_node_with_its_cause() -> None:
    p = decide(bad(busy=(1,)))
    (delete,) = p.actions
    assert isinstance(delete, DeleteNode)
    assert (delete.incarnation_id, delete.expected, delete.cause) == (
        NODE_ID, P.READY, LossCause.BAD_HOST)  # fmt: skip
    assert "worker(s) 1 still held after the kill" in delete.reason
    assert "bad host 1 of 2 today" in delete.reason


def test_a_failed_health_check_is_a_bad_host_and_spends_no_failure() -> None:
    # max_failures = 0 and a failed attempt behind: a crash would give up, a bad host does not.
    last = attempt(3, outcome=AttemptOutcome.PREEMPTED, node_id=6)
    w = replace(bad(unhealthy=(0, 2)), last=last)
    p = decide(w)
    assert kinds(p) == ["delete"]
    assert "worker(s) 0, 2 failed the health check" in p.actions[0].reason
    assert not any(a.kind in ("mark-done", "finish") for a in p.actions)


def test_another_zone_first_when_the_fleet_has_several() -> None:
    w = replace(bad(busy=(0,)), zones=(Z1, Z2))
    leave, delete = decide(w).actions
    assert isinstance(leave, Transition)
    assert (leave.expected, leave.new, leave.cause) == (P.READY, P.DELETING, LossCause.BAD_HOST)
    assert leave.slot_update is not None
    assert (node().zone, leave.slot_update.next_zone) == (Z1, Z2)
    assert leave.slot_update.add_preemptions == 0
    assert isinstance(delete, DeleteNode)
    assert (delete.expected, delete.cause) == (P.DELETING, LossCause.BAD_HOST)


def test_past_the_daily_budget_the_slot_is_held_with_a_notice() -> None:
    ends = (ago(hours=30), ago(hours=20), ago(minutes=5))  # the first is more than a day old
    p = decide(bad(busy=(0,), bad_hosts=ends))
    (notice,) = p.actions
    assert isinstance(notice, Notice)
    assert notice.key == "bad-hosts/sweep/0"
    assert "2 bad hosts in the last 24 h, max_bad_hosts = 2" in notice.reason
    (hold,) = p.holds
    assert hold.until == ago(hours=20) + timedelta(days=1)
    # A day after the older of the two, one counts: recycled again.
    later = replace(bad(busy=(0,), bad_hosts=ends), now=T0 + timedelta(hours=5))
    assert kinds(decide(later)) == ["delete"]


def test_bad_hosts_are_counted_from_the_stored_causes() -> None:
    gone = replace(node(P.DELETED, id=3), loss_cause=LossCause.BAD_HOST, deleted_at=ago(hours=2))
    old = replace(node(P.DELETED, id=2), loss_cause=LossCause.BAD_HOST, deleted_at=ago(days=2))
    preempted = replace(node(P.DELETED, id=4), loss_cause=LossCause.PREEMPTED, deleted_at=T0)
    ends = bad_host_ends([gone, old, preempted, node()])
    assert ends == (ago(days=2), ago(hours=2))
    assert within_day(ends, T0) == [ago(hours=2)]
