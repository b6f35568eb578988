"""Multislice slots in the pure planner: N slices, one unit (issue 13).

Node level (core/nodes/slots.py, core/nodes/multislice.py): names and labels, one zone per slot,
the hold of READY slices while one is missing and its release, one queued resource for a queued
slot, a preemption counted once. Workload level (core/workload/gang.py through `plan_tick`):
never a launch on a partial slot, a launch on the whole gang, the attempt ended and stopped on
the surviving slices when one is lost. Tables first, then properties over random slot states.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tpucared.core.model.observed import ObservedNode
from tpucared.core.model.records import (
    IncarnationRecord,
    NodePhase,
    WorkerRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.model.specs import (
    SLICE_LABEL,
    SLOT_LABEL,
    FleetSpec,
    Provisioning,
    WorkloadSpec,
)
from tpucared.core.nodes.multislice import RELEASED
from tpucared.core.planning.tick import plan_tick
from tpucared.core.vocab.actions import (
    Adopt,
    CreateNode,
    DeleteNode,
    HoldSlices,
    Transition,
)
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.policy import Policy
from tpucared.core.workload.actions import FinishAttempt, LaunchWorkload, StopWorkload
from tpucared.core.workload.inputs import SlotProbe, WorkerProbe, WorkloadSnapshot
from tpucared.core.workload.probes import keep_chain, leaving
from tpucared.gcp.tpu.states import NodeState, QueuedState

from ..core_support import (
    FLEET,
    T0,
    Z1,
    Z2,
    node,
    ours,
    qr,
    run,
    slot,
    snapshot,
    spec,
    world,
)

P = NodePhase
HOLD = 1800.0
WORKLOAD = WorkloadSpec(run="python3 train.py")


def multi(slices: int = 2, size: int = 1, **kw: Any) -> FleetSpec:
    return spec(size=size, slices=slices, multislice_hold=kw.pop("hold", HOLD), **kw)


def piece(
    id: int, index: int, phase: NodePhase = P.READY, *, zone: str = Z1, slot_index: int = 0,
    **kw: Any,
) -> IncarnationRecord:  # fmt: skip
    """Slice `index` of slot `slot_index` of "sweep", recorded as if already seen READY."""
    since = kw.pop("since", T0 - timedelta(minutes=5))
    return IncarnationRecord(
        id=id,
        fleet=FLEET,
        slot=slot_index,
        slice=index,
        node_name=f"{FLEET}-{slot_index}-{index}",
        zone=zone,
        accelerator_type="v4-8",
        phase=phase,
        phase_since=since,
        requested_at=since,
        ready_at=since if phase is P.READY else None,
        cloud_state=kw.pop("cloud_state", "READY" if phase is P.READY else None),
        cloud_state_since=since,
        cloud_id=str(id),
        **kw,
    )


def listed_piece(
    inc: IncarnationRecord, state: NodeState = NodeState.READY, **kw: Any
) -> ObservedNode:
    return replace(node(inc.node_name, inc.zone, state, ours(), cloud_id=inc.cloud_id), **kw)


def holds_of(p: Plan) -> list[HoldSlices]:
    return list(p.of(HoldSlices))


# ---------------------------------------------------------------------------------------------
# Node level


def test_an_empty_multislice_slot_gets_one_create_per_slice_named_and_labelled() -> None:
    fleet = multi(slices=3)
    p = run([fleet], world())
    creates = p.of(CreateNode)
    assert [(c.node_name, c.slice, c.zone) for c in creates] == [
        ("sweep-0-0", 0, Z1),
        ("sweep-0-1", 1, Z1),
        ("sweep-0-2", 2, Z1),
    ]
    assert [(c.labels[SLOT_LABEL], c.labels[SLICE_LABEL]) for c in creates] == [
        ("0", "0"),
        ("0", "1"),
        ("0", "2"),
    ]
    assert all(c.queued_resource is None and c.slices == 1 for c in creates)


def test_a_single_slice_fleet_is_unchanged() -> None:
    p = run([spec(size=1)], world())
    (create,) = p.of(CreateNode)
    assert (create.node_name, create.slice, SLOT_LABEL in create.labels) == ("sweep-0", 0, False)


def test_a_missing_slice_is_created_in_the_zone_of_the_others() -> None:
    fleet = multi()
    ready = piece(1, 0, zone=Z2)
    # The slot's own rotation points at Z1 (a capacity error moved it there): ignored while a
    # slice lives, since slices talk over the data-centre network.
    snap = snapshot(ready, specs=[fleet], slots=[slot(next_zone=Z1, held_since=T0)])
    p = run([fleet], world(listed_piece(ready)), snap)
    (create,) = p.of(CreateNode)
    assert (create.node_name, create.zone, create.slice) == ("sweep-0-1", Z2, 1)
    assert "with the slot's other slices" in create.reason


def test_ready_slices_are_held_while_one_is_missing_then_released_at_the_limit() -> None:
    fleet = multi()
    ready = piece(1, 0)
    listing = world(listed_piece(ready))
    # Starts: the hold is recorded, and `plan` explains it.
    p = run([fleet], listing, snapshot(ready, specs=[fleet]))
    assert [(h.since, h.slot) for h in holds_of(p)] == [(T0, 0)]
    (explained,) = [h for h in p.holds if "multislice_hold" in h.reason]
    assert explained.until == T0 + timedelta(seconds=HOLD)
    assert "keeping 1 of 2 slices READY while slice(s) 1 are missing" in explained.reason
    # Within the hold: nothing new, the slice is kept.
    held = snapshot(ready, specs=[fleet], slots=[slot(held_since=T0 - timedelta(minutes=29))])
    p = run([fleet], listing, held)
    assert holds_of(p) == []
    assert p.of(DeleteNode) == ()
    # At the hold: the READY slice is released (a planned delete) and the hold cleared.
    over = snapshot(ready, specs=[fleet], slots=[slot(held_since=T0 - timedelta(seconds=HOLD))])
    p = run([fleet], listing, over)
    (release,) = p.of(DeleteNode)
    assert (release.node_name, release.end_reason, release.expected) == (
        "sweep-0-0",
        RELEASED,
        P.READY,
    )
    assert [h.since for h in holds_of(p)] == [None]


def test_the_hold_ends_when_every_slice_is_ready() -> None:
    fleet = multi()
    a, b = piece(1, 0), piece(2, 1)
    snap = snapshot(a, b, specs=[fleet], slots=[slot(held_since=T0 - timedelta(minutes=3))])
    p = run([fleet], world(listed_piece(a), listed_piece(b)), snap)
    assert [h.since for h in holds_of(p)] == [None]
    assert p.of(DeleteNode) == ()
    assert p.of(CreateNode) == ()


def test_a_multislice_hold_of_zero_releases_at_once() -> None:
    fleet = multi(hold=0.0)
    ready = piece(1, 0)
    p = run([fleet], world(listed_piece(ready)), snapshot(ready, specs=[fleet]))
    assert [d.end_reason for d in p.of(DeleteNode)] == [RELEASED]


def test_two_slices_preempted_at_once_count_one_preemption() -> None:
    fleet = multi(slices=3)
    pieces = [piece(i + 1, i) for i in range(3)]
    listing = world(
        listed_piece(pieces[0], NodeState.PREEMPTED),
        listed_piece(pieces[1], NodeState.PREEMPTED),
        listed_piece(pieces[2]),
    )
    p = run([fleet], listing, snapshot(*pieces, specs=[fleet]))
    dead = [t for t in p.of(Transition) if t.new is P.DEAD]
    assert len(dead) == 2
    counted = [t.slot_update.add_preemptions for t in dead if t.slot_update is not None]
    assert sum(counted) == 1


def test_a_slice_preempted_while_the_slot_is_already_broken_is_not_counted_again() -> None:
    fleet = multi()
    gone = piece(1, 0, P.DELETING, end_reason="preempted")
    other = piece(2, 1)
    listing = world(listed_piece(other, NodeState.PREEMPTED))
    p = run([fleet], listing, snapshot(gone, other, specs=[fleet]))
    (dead,) = [t for t in p.of(Transition) if t.new is P.DEAD]
    assert dead.slot_update is not None
    assert dead.slot_update.add_preemptions == 0


def test_a_queued_multislice_slot_is_one_queued_resource() -> None:
    fleet = multi(slices=2, provisioning=Provisioning.QUEUED)
    p = run([fleet], world(queued=True))
    (create,) = p.of(CreateNode)
    assert (create.node_name, create.queued_resource, create.slices) == ("sweep-0-0", "sweep-0", 2)
    assert SLOT_LABEL in create.labels
    assert SLICE_LABEL not in create.labels


def test_a_queued_multislice_slot_adopts_its_other_nodes_as_they_appear() -> None:
    fleet = multi(slices=2, provisioning=Provisioning.QUEUED)
    first = piece(1, 0, P.CREATING, queued_resource="sweep-0", cloud_state="QUEUED:PROVISIONING")
    qname = "projects/p/locations/z/queuedResources/sweep-0"
    listing = world(
        listed_piece(first, NodeState.CREATING, queued_resource=qname),
        node("sweep-0-1", Z1, NodeState.CREATING, ours(), cloud_id="9", queued_resource=qname),
        queued=True,
    )
    listing = [
        replace(o, queued_resources=(qr("sweep-0", Z1, QueuedState.PROVISIONING, ours()),))
        if o.zone == Z1
        else o
        for o in listing
    ]
    p = run([fleet], listing, snapshot(first, specs=[fleet]))
    (adopt,) = p.of(Adopt)
    assert (adopt.node_name, adopt.slice, adopt.queued_resource) == ("sweep-0-1", 1, "sweep-0")
    assert p.of(CreateNode) == ()


def test_a_queued_multislice_slot_waits_until_every_old_slice_is_gone() -> None:
    fleet = multi(slices=2, provisioning=Provisioning.QUEUED)
    going = piece(2, 1, P.DELETING, queued_resource="sweep-0", end_reason="preempted")
    still = qr("sweep-0", Z1, QueuedState.DELETING, ours())
    listing = [
        replace(o, queued_resources=(still,)) if o.zone == Z1 else o for o in world(queued=True)
    ]
    p = run([fleet], listing, snapshot(going, specs=[fleet]))
    assert p.of(CreateNode) == ()
    assert any("its name is not free yet" in h.reason for h in p.holds)


# ---------------------------------------------------------------------------------------------
# Workload level (plan_tick)

WORKERS = 2


def workers_of(*incs: IncarnationRecord) -> list[WorkerRecord]:
    return [
        WorkerRecord(incarnation_id=i.id, index=w, internal_ip=f"10.{i.id}.0.{w}")
        for i in incs
        for w in range(WORKERS)
    ]


def gang_probe(stand_in: int, attempt: int | None, states: list[WorkerProbe]) -> SlotProbe:
    return SlotProbe(
        fleet=FLEET, slot=0, incarnation_id=stand_in, attempt=attempt, observed_at=T0,
        workers=tuple(replace(w, since=T0 - timedelta(minutes=1), log_since=T0) for w in states),
    )  # fmt: skip


def tick(
    fleet: FleetSpec,
    incs: list[IncarnationRecord],
    listing: list[ObservedNode],
    probe: SlotProbe | None,
    attempt: WorkloadAttemptRecord | None = None,
) -> Plan:
    snap = WorkloadSnapshot.build(
        fleets=snapshot(specs=[fleet]).fleets.values(),
        slots=[slot(attempts=attempt.number if attempt else 0)],
        incarnations=incs,
        workers=workers_of(*incs),
        attempts=[attempt] if attempt else [],
    )
    probes = {(FLEET, 0): probe} if probe is not None else {}
    return plan_tick([fleet], world(*listing), snap, probes, T0, Policy(), "me")


def test_no_launch_until_every_slice_is_ready_then_one_on_the_whole_gang() -> None:
    fleet = multi(workload=WORKLOAD)
    a, b = piece(1, 0), piece(2, 1, P.CREATING, cloud_state="CREATING")
    idle = [WorkerProbe.gone(w) for w in range(2 * WORKERS)]
    p = tick(fleet, [a, b], [listed_piece(a), listed_piece(b, NodeState.CREATING)], None)
    assert p.of(LaunchWorkload) == ()
    b = replace(b, phase=P.READY, cloud_state="READY", ready_at=T0 - timedelta(minutes=1))
    p = tick(fleet, [a, b], [listed_piece(a), listed_piece(b)], gang_probe(2, None, idle))
    (launch,) = p.of(LaunchWorkload)
    # On the gang's stand-in: the newest slice's id; the slot's name.
    assert (launch.incarnation_id, launch.node_name, launch.attempt) == (2, "sweep-0", 1)


def test_a_probe_of_part_of_the_gang_does_not_launch() -> None:
    fleet = multi(workload=WORKLOAD)
    a, b = piece(1, 0), piece(2, 1)
    half = gang_probe(2, None, [WorkerProbe.gone(w) for w in range(WORKERS)])
    p = tick(fleet, [a, b], [listed_piece(a), listed_piece(b)], half)
    assert p.of(LaunchWorkload) == ()


def test_a_lost_slice_ends_the_attempt_stops_the_others_and_counts_once() -> None:
    fleet = multi(workload=WORKLOAD)
    a, b = piece(1, 0), piece(2, 1)
    attempt = WorkloadAttemptRecord(
        id=50, fleet=FLEET, slot=0, incarnation_id=2, number=1, started_at=T0 - timedelta(hours=1)
    )
    running = gang_probe(2, 1, [WorkerProbe.running(w, 100) for w in range(2 * WORKERS)])
    listing = [listed_piece(a), listed_piece(b, NodeState.PREEMPTED)]
    p = tick(fleet, [a, b], listing, running, attempt)
    (finish,) = p.of(FinishAttempt)
    assert finish.outcome.value == "preempted"
    (stop,) = p.of(StopWorkload)
    assert (stop.attempt, stop.slot) == (1, 0)
    # Named after the survivor, not the stand-in (the lost slice, the newest): the runtime
    # drops the plan's stops on nodes it deletes, which left the survivor running (issue 13's
    # recovery benchmark found it).
    assert stop.incarnation_id == a.id
    assert keep_chain([stop], leaving(p.actions)) == [stop]
    updates = [t.slot_update for t in p.of(Transition) if t.slot_update is not None]
    assert sum(u.add_preemptions for u in updates) == 1
    # The dead slice is replaced in its own right; the survivor is kept.
    assert [d.node_name for d in p.of(DeleteNode)] == ["sweep-0-1"]


def test_a_notice_on_one_slice_loses_that_slice_and_stops_the_other() -> None:
    fleet = multi(workload=WorkloadSpec(run="python3 train.py", stop_grace=5.0))
    a, b = piece(1, 0), piece(2, 1)
    attempt = WorkloadAttemptRecord(
        id=50, fleet=FLEET, slot=0, incarnation_id=2, number=1, started_at=T0 - timedelta(hours=1)
    )
    noticed = T0 - timedelta(seconds=30)
    states = [WorkerProbe.running(w, 100) for w in range(WORKERS)] + [
        replace(WorkerProbe.exited(w, 0, 100), notice_at=noticed)
        for w in range(WORKERS, 2 * WORKERS)
    ]
    p = tick(fleet, [a, b], [listed_piece(a), listed_piece(b)], gang_probe(2, 1, states), attempt)
    lost = [t for t in p.of(Transition) if t.new is P.DEAD]
    assert [t.node_name for t in lost] == ["sweep-0-1"]  # the slice whose workers heard it
    (stop,) = p.of(StopWorkload)
    assert keep_chain([stop], leaving(p.actions)) == [stop]
    assert p.of(FinishAttempt)[0].outcome.value == "preempted"


# ---------------------------------------------------------------------------------------------
# Properties

PHASES = [P.REQUESTED, P.CREATING, P.READY, P.DEAD, P.DELETING, None]


@settings(max_examples=200, deadline=None)
@given(
    phases=st.lists(st.sampled_from(PHASES), min_size=2, max_size=4),
    held_for=st.one_of(st.none(), st.floats(min_value=0, max_value=2 * HOLD)),
    probed=st.booleans(),
)
def test_never_a_launch_on_a_partial_slot_never_held_past_the_limit(
    phases: list[NodePhase | None], held_for: float | None, probed: bool
) -> None:
    fleet = multi(slices=len(phases), workload=WORKLOAD)
    incs = [piece(i + 1, i, ph) for i, ph in enumerate(phases) if ph is not None]
    listing = [listed_piece(i) for i in incs if i.phase is P.READY]
    held_since = None if held_for is None else T0 - timedelta(seconds=held_for)
    stand_in = max((i.id for i in incs), default=0)
    probe = None
    if probed and incs:
        gone = [WorkerProbe.gone(w) for w in range(WORKERS * len(incs))]
        probe = gang_probe(stand_in, None, gone)
    snap = WorkloadSnapshot.build(
        fleets=snapshot(specs=[fleet]).fleets.values(),
        slots=[slot(held_since=held_since)],
        incarnations=incs,
        workers=workers_of(*incs),
    )
    probes = {(FLEET, 0): probe} if probe is not None else {}
    p = plan_tick([fleet], world(*listing), snap, probes, T0, Policy(), "me")
    whole = all(ph is P.READY for ph in phases)
    if p.of(LaunchWorkload):
        assert whole
    ready = [i for i in incs if i.phase is P.READY]
    partial = 0 < len(ready) < len(phases)
    if partial and held_for is not None and held_for >= HOLD:
        released = {d.node_name for d in p.of(DeleteNode) if d.end_reason == RELEASED}
        assert released == {i.node_name for i in ready}
    if not partial:
        assert all(d.end_reason != RELEASED for d in p.of(DeleteNode))
