"""The whole tick: the node planner and the workload planner together (`plan_tick`).

The node planner's decisions (a preempted node, a slot scaled down or done) reach the workload
planner through the NodesOutcome, and the workload planner's (a node to replace, a slot done)
reach the node planner through the records at the next tick.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import (
    AttemptOutcome,
    IncarnationRecord,
    NodePhase,
    SlotRecord,
    WorkerRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.model.specs import OnSuccess, WorkloadSpec
from tpucared.core.planning import planner
from tpucared.core.planning.planner import NodesOutcome
from tpucared.core.planning.tick import nodes_outcome, plan_tick
from tpucared.core.view import View
from tpucared.core.vocab.actions import Action, DeleteNode, Notice, Transition
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.policy import Policy
from tpucared.core.workload.actions import FinishAttempt, LaunchWorkload, MarkSlotDone
from tpucared.core.workload.inputs import SlotProbe, WorkerProbe, WorkloadSnapshot
from tpucared.gcp.tpu.states import NodeState

from ..core_support import (
    FLEET,
    T0,
    Z1,
    Z2,
    failed,
    inc,
    listed,
    node,
    ours,
    seen,
    slot,
    snapshot,
    spec,
    world,
)

P = NodePhase
OWNER = "me"
WORKLOAD = WorkloadSpec(run="python3 train.py")


def fleet(**kw: Any) -> Any:
    return spec(size=kw.pop("size", 1), workload=kw.pop("workload", WORKLOAD), **kw)


def ready(id: int = 1, slot_: int = 0) -> IncarnationRecord:
    return seen(inc(id, slot_, P.READY), node(f"{FLEET}-{slot_}", cloud_id=str(100 + id)))


def workers(node_id: int, n: int = 4) -> list[WorkerRecord]:
    return [WorkerRecord(node_id, i, f"10.0.0.{i + 1}") for i in range(n)]


def running(number: int = 1, node_id: int = 1, slot_: int = 0) -> WorkloadAttemptRecord:
    return WorkloadAttemptRecord(id=number, fleet=FLEET, slot=slot_, incarnation_id=node_id,
                                 number=number, started_at=T0 - timedelta(minutes=30))  # fmt: skip


def records(
    specs: list[Any],
    *incs: IncarnationRecord,
    attempts: Iterable[WorkloadAttemptRecord] = (),
    slots: Iterable[SlotRecord] | None = None,
    down: Iterable[str] = (),
) -> WorkloadSnapshot:
    base = snapshot(*incs, specs=specs, slots=slots, down=down)
    return WorkloadSnapshot.build(
        base.fleets.values(),
        base.slots.values(),
        incs,
        workers=[w for i in incs for w in workers(i.id)],
        attempts=attempts,
    )


def probe(node_id: int = 1, attempt: int | None = 1, *states: WorkerProbe) -> SlotProbe:
    workers = states or tuple(WorkerProbe.running(i, 10) for i in range(4))
    tracked = tuple(replace(w, since=T0, log_since=T0) for w in workers)
    return SlotProbe(FLEET, 0, node_id, attempt, T0, tracked)


def tick(
    specs: list[Any], observed: Any, snap: WorkloadSnapshot, probes: Any = None, **kw: Any
) -> Plan:
    return plan_tick(specs, observed, snap, probes or {}, T0, Policy(), OWNER, **kw)


def test_node_actions_come_first_then_the_workload_then_notices() -> None:
    specs = [fleet(size=2)]
    snap = records(specs, ready())
    idle = probe(1, None, *(WorkerProbe.gone(i) for i in range(4)))
    plan = tick(specs, world(node(f"{FLEET}-0", cloud_id="101")), snap, {(FLEET, 0): idle})
    kinds = [a.kind for a in plan.actions]
    # Slot 1 has no node: the node planner creates one; slot 0's workload launches.
    assert kinds == ["create", "launch"]
    (launch,) = plan.of(LaunchWorkload)
    assert (launch.slot, launch.attempt, launch.clean_after) == (0, 1, None)


def test_a_preempted_node_ends_its_attempt_as_preempted() -> None:
    specs = [fleet()]
    snap = records(specs, ready(), attempts=[running()])
    preempted = node(f"{FLEET}-0", state=NodeState.PREEMPTED, cloud_id="101")
    plan = tick(specs, world(preempted), snap, {(FLEET, 0): probe()})
    assert [a.kind for a in plan.actions] == ["transition", "delete", "finish"]
    (t,) = plan.of(Transition)
    assert (t.new, t.slot_update and t.slot_update.add_preemptions) == (P.DEAD, 1)
    (finish,) = plan.of(FinishAttempt)
    assert finish.outcome is AttemptOutcome.PREEMPTED
    assert finish.detail == f"{FLEET}-0 is deleting"


def test_the_probe_decides_even_when_the_zone_cannot_be_listed() -> None:
    """A failed list says nothing about the node (it stays READY), but the workers answered."""
    specs = [fleet()]
    snap = records(specs, ready(), attempts=[running()])
    exited = probe(1, 1, *(WorkerProbe.exited(i, 0) for i in range(4)))
    plan = tick(specs, [failed(Z1), listed(Z2)], snap, {(FLEET, 0): exited})
    assert [a.kind for a in plan.actions] == ["finish", "slot-done"]
    (finish,) = plan.of(FinishAttempt)
    assert finish.outcome is AttemptOutcome.SUCCEEDED


def test_scale_down_cancels_the_attempt_and_deletes_the_node() -> None:
    specs = [fleet(size=0)]
    snap = records([fleet(size=1)], ready(), attempts=[running()])
    plan = tick(specs, world(node(f"{FLEET}-0", cloud_id="101")), snap, {(FLEET, 0): probe()})
    (delete,) = plan.of(DeleteNode)
    assert delete.end_reason is not None
    assert delete.end_reason.startswith("scaled down")
    (finish,) = plan.of(FinishAttempt)
    assert finish.outcome is AttemptOutcome.CANCELLED


@pytest.mark.parametrize(
    ("on_success", "deleted"), [(OnSuccess.DELETE, True), (OnSuccess.KEEP, False)]
)
def test_a_done_slot_keeps_its_node_only_if_asked(on_success: OnSuccess, deleted: bool) -> None:
    specs = [fleet(workload=WorkloadSpec(run="x", on_success=on_success))]
    # Last tick: exit 0 everywhere.
    snap = records(specs, ready(), attempts=[running()])
    exited = probe(1, 1, *(WorkerProbe.exited(i, 0) for i in range(4)))
    listed = world(node(f"{FLEET}-0", cloud_id="101"))
    plan = tick(specs, listed, snap, {(FLEET, 0): exited})
    assert [a.kind for a in plan.actions] == ["finish", "slot-done"]
    # This tick: the slot is done; the node planner acts on it, the workload planner never
    # launches again.
    succeeded = replace(running(), ended_at=T0, outcome=AttemptOutcome.SUCCEEDED)
    done = records(specs, ready(), slots=[slot(0, done=True, attempts=1)], attempts=[succeeded])
    idle = probe(1, 1, *(WorkerProbe.exited(i, 0) for i in range(4)))
    plan = tick(specs, listed, done, {(FLEET, 0): idle})
    assert bool(plan.of(DeleteNode)) is deleted
    assert plan.of(LaunchWorkload) == ()
    assert plan.of(MarkSlotDone) == ()


def test_replacing_a_busy_node_then_creating_a_new_one() -> None:
    specs = [fleet()]
    ended = replace(running(), ended_at=T0, outcome=AttemptOutcome.FAILED)
    snap = records(specs, ready(), attempts=[ended])
    busy = replace(probe(1, 1, *(WorkerProbe.exited(i, 1) for i in range(4))), busy=(2,))
    listed = world(node(f"{FLEET}-0", cloud_id="101"))
    plan = tick(specs, listed, snap, {(FLEET, 0): busy})
    # A TPU still held after cleanup makes a bad host (core/workload/bad_hosts.py): recycled
    # with its own cause, the slot's next create in the fleet's next zone; no preemption is
    # counted, no failure spent, and no create while it is deleted.
    (move,) = plan.of(Transition)
    assert (move.expected, move.new, move.cause) == (P.READY, P.DELETING, LossCause.BAD_HOST)
    assert move.slot_update is not None
    assert move.slot_update.add_preemptions == 0
    (delete,) = plan.of(DeleteNode)
    assert (delete.expected, delete.end_reason, delete.cause) == (
        P.DELETING,
        "bad host",
        LossCause.BAD_HOST,
    )
    assert [a.kind for a in plan.actions] == ["transition", "delete"]


def test_a_fleet_left_out_of_the_config_keeps_its_workload_running() -> None:
    snap = records([fleet()], ready(), attempts=[running()])
    plan = tick([], world(node(f"{FLEET}-0", cloud_id="101")), snap, {(FLEET, 0): probe()})
    assert plan.of(FinishAttempt) == ()
    assert [a.kind for a in plan.actions] == ["notice"]  # the node planner's, about the fleet


def test_a_fleet_marked_down_cancels_its_workload() -> None:
    snap = records([fleet()], ready(), attempts=[running()], down=[FLEET])
    plan = tick([], world(node(f"{FLEET}-0", cloud_id="101")), snap, {(FLEET, 0): probe()})
    (finish,) = plan.of(FinishAttempt)
    assert finish.outcome is AttemptOutcome.CANCELLED
    assert plan.of(DeleteNode)


def test_workload_notices_are_told_once() -> None:
    specs = [fleet()]
    failed = replace(running(), ended_at=T0, outcome=AttemptOutcome.FAILED)
    snap = records(specs, ready(), attempts=[failed], slots=[slot(0, attempts=1, failures=11)])
    listed = world(node(f"{FLEET}-0", cloud_id="101"))
    first = tick(specs, listed, snap)
    key = f"workload-gave-up/{FLEET}/0"
    assert [n.key for n in first.of(Notice)] == [key]
    assert key in first.standing
    again = tick(specs, listed, snap, reported=first.standing)
    assert again.of(Notice) == ()
    assert key in again.standing


def test_without_probes_running_attempts_are_watched_and_nothing_launches() -> None:
    specs = [fleet(size=2)]
    snap = records(specs, ready(), ready(2, 1), attempts=[running()])
    listed = world(node(f"{FLEET}-0", cloud_id="101"), node(f"{FLEET}-1", cloud_id="102"))
    plan = tick(specs, listed, snap)
    assert plan.actions == ()
    assert [h.slot for h in plan.holds] == [1]
    assert plan.holds[0].reason.startswith("waiting for a probe")


def test_nodes_outcome_is_what_the_planner_hands_its_later_sub_planners(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the planner's own extension point: the outcome derived from the plan's
    actions equals the one `plan()` computes."""
    seen_by_later: list[NodesOutcome] = []

    def capture(view: View, outcome: NodesOutcome) -> list[Action]:
        seen_by_later.append(outcome)
        return []

    monkeypatch.setattr(planner, "LATER", (capture,))
    specs = [fleet(size=3)]
    creating = inc(2, 1, P.CREATING, operation="op")
    snap = records(specs, ready(), creating, ready(3, 2))
    listed = world(
        node(f"{FLEET}-0", state=NodeState.PREEMPTED, cloud_id="101"),
        node(f"{FLEET}-1", cloud_id="102"),
        node(f"{FLEET}-2", cloud_id="103"),
        node("sweep-9", zone=Z2, labels=ours()),
    )
    plan = planner.plan(specs, listed, snap, T0, Policy(), OWNER)
    view = View(specs, listed, snap, T0, Policy(), OWNER)
    assert nodes_outcome(view, plan.actions) == seen_by_later[0]
    assert seen_by_later[0].became_ready == {2}
    assert seen_by_later[0].phases[1] is P.DELETING
