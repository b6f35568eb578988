"""Every loss with its cause (core/nodes/losses.py, step.py, incarnations.py, preemption.py;
issue 41 item 4): the Transition or DeleteNode that ends a node as a loss carries its
`LossCause`, decided where the loss is decided; an end of our own choosing carries none.

One row per situation: the incarnation as recorded, what the lists show, the cause the plan
gives it. Then the Compute Engine records (`worded`: a record's kind, never a guess), and the
budget: no node cause ever touches the slot's create failures.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import (
    LossRecords,
    MaintenanceWindow,
    PreemptionRecord,
    RecordKind,
)
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.nodes.cloud import ABSENT
from tpucared.core.nodes.losses import in_window, seen_cause
from tpucared.core.vocab.actions import DeleteNode, Transition
from tpucared.core.vocab.plan import Plan
from tpucared.gcp.compute.cloud import API as COMPUTE_API
from tpucared.gcp.compute.states import InstanceStatus

from ..core_support import FLEET, T0, ago, inc, node, run, seen, slot, snapshot, spec, world
from .nodes_support import READY_NODE, SPEC, C, P, pending, plan_for, ready
from .test_flex import plan_lost as plan_flex_lost
from .test_preemption import compute_spec, plan_lost

L = LossCause
ONGOING = MaintenanceWindow(start=ago(minutes=1), end=T0 + timedelta(hours=1), status="ONGOING")
LATER = MaintenanceWindow(start=T0 + timedelta(days=2), end=T0 + timedelta(days=2, hours=1))


def causes(p: Plan) -> list[LossCause | None]:
    """The causes the plan's node-ending actions carry, in order (None: none given)."""
    return [
        a.cause
        for a in p.actions
        if isinstance(a, DeleteNode)
        or (isinstance(a, Transition) and a.new in (P.DEAD, P.DELETING, P.FAILED))
    ]


def lost_cause(p: Plan) -> LossCause | None:
    """The one cause the plan records for its loss (the first node-ending action's)."""
    return next((c for c in causes(p) if c is not None), None)


ROWS = [
    # id, record, observations, the loss's cause
    ("tpu-preempted", ready(READY_NODE), world(node(state=C.PREEMPTED)), L.PREEMPTED),
    ("terminated-says-nothing", ready(READY_NODE), world(node(state=C.TERMINATED)), L.UNKNOWN),
    ("stopped-says-nothing", ready(READY_NODE), world(node(state=C.STOPPED)), L.UNKNOWN),
    (
        "vanished",
        replace(ready(READY_NODE), cloud_state=ABSENT, cloud_state_since=ago(seconds=30)),
        world(),
        L.UNKNOWN,
    ),
    ("deleted-by-someone", ready(READY_NODE), world(node(state=C.DELETING)), L.DELETED_OUTSIDE),
    (
        "deleted-in-its-window",
        ready(READY_NODE, maintenance=ONGOING),
        world(node(state=C.DELETING)),
        L.MAINTENANCE,
    ),
    (
        "terminated-in-its-ongoing-window",
        ready(READY_NODE, maintenance=ONGOING),
        world(node(state=C.TERMINATED)),
        L.MAINTENANCE,
    ),
    (
        # The window as announced (still PENDING in the record), the loss inside it.
        "preempted-inside-its-window",
        ready(READY_NODE, maintenance=replace(ONGOING, status="PENDING")),
        world(node(state=C.PREEMPTED)),
        L.MAINTENANCE,
    ),
    (
        "preempted-days-before-its-window",
        ready(READY_NODE, maintenance=LATER),
        world(node(state=C.PREEMPTED)),
        L.PREEMPTED,
    ),
    (
        "unhealthy-for-maintenance",
        seen(
            inc(1, 0, P.READY),
            node(health="UNHEALTHY_MAINTENANCE"),
            since=ago(minutes=20),
        ),
        world(node(health="UNHEALTHY_MAINTENANCE")),
        L.MAINTENANCE,
    ),
    (
        "unhealthy-timeout",
        seen(inc(1, 0, P.READY), node(health="TIMEOUT"), since=ago(minutes=20)),
        world(node(health="TIMEOUT")),
        L.UNKNOWN,
    ),
    (
        "repairing-too-long",
        seen(inc(1, 0, P.READY), node(state=C.REPAIRING), since=ago(minutes=31)),
        world(node(state=C.REPAIRING)),
        L.STUCK,
    ),
    (
        "creating-too-long",
        pending(P.CREATING, timedelta(hours=3)),
        world(node(state=C.CREATING)),
        L.STUCK,
    ),
    (
        "being-deleted-while-creating",
        pending(P.CREATING),
        world(node(state=C.DELETING)),
        L.DELETED_OUTSIDE,
    ),
    (
        "preempted-before-ready",
        pending(P.CREATING),
        world(node(state=C.PREEMPTED)),
        L.PREEMPTED,
    ),
    (
        "vanished-while-creating",
        pending(P.CREATING, cloud_id="101", cloud_state=ABSENT, cloud_state_since=ago(seconds=30)),
        world(),
        L.UNKNOWN,
    ),
]


@pytest.mark.parametrize(
    ("record", "observations", "cause"),
    [r[1:] for r in ROWS],
    ids=[r[0] for r in ROWS],
)
def test_each_loss_carries_its_cause(
    record: IncarnationRecord, observations: list, cause: LossCause
) -> None:
    p = plan_for(record, observations)
    assert lost_cause(p) is cause, p.actions


def test_a_create_that_simply_failed_is_no_loss() -> None:
    p = plan_for(pending(P.REQUESTED, timedelta(hours=1)), world())
    assert [a.new for a in p.of(Transition)] == [P.FAILED]
    assert causes(p) == [None]


@pytest.mark.parametrize("how", ["scaled-down", "down"])
def test_an_end_of_our_own_choosing_has_no_cause(how: str) -> None:
    """Scale-down and `tpucared down` delete a healthy node: no loss, no cause."""
    small = replace(SPEC, size=0) if how == "scaled-down" else SPEC
    down = [FLEET] if how == "down" else []
    record = ready(READY_NODE)
    p = run([small], world(READY_NODE), snapshot(record, specs=[small], down=down))
    assert [a.node_name for a in p.of(DeleteNode)] == [f"{FLEET}-0"]
    assert causes(p) == [None]


def test_a_flex_run_end_is_run_ended() -> None:
    p = plan_flex_lost(InstanceStatus.TERMINATED, ends=ago(seconds=10))
    assert lost_cause(p) is L.RUN_ENDED


def test_the_dead_node_delete_repeats_no_cause() -> None:
    """The loss's cause is on the Transition that decides it; the delete after it carries
    none (the store keeps the recorded one, and counts the loss once)."""
    p = plan_for(ready(READY_NODE), world(node(state=C.PREEMPTED)))
    assert causes(p) == [L.PREEMPTED, None]


# ---------------------------------------------------------------------------------------------
# The window, by itself


def test_in_window_by_status_or_by_its_times() -> None:
    assert in_window(ONGOING, T0)
    assert in_window(MaintenanceWindow(start=ago(minutes=5)), T0)  # no end said: from start on
    assert not in_window(LATER, T0)
    assert not in_window(MaintenanceWindow(start=ago(hours=3), end=ago(hours=2)), T0)
    assert not in_window(MaintenanceWindow(status="PENDING"), T0)  # no times, not ONGOING
    assert not in_window(None, T0)
    assert seen_cause(None, None, None, T0) is L.UNKNOWN


# ---------------------------------------------------------------------------------------------
# Compute Engine: the records say, or nothing does


def explained(record: PreemptionRecord | None, **kw: object) -> Transition:
    found = LossRecords(records=() if record is None else (record,))
    p = plan_lost(InstanceStatus.TERMINATED, found=found, **kw)
    [t] = [a for a in p.of(Transition) if a.new is P.DEAD]
    return t


def record(kind: RecordKind) -> PreemptionRecord:
    return PreemptionRecord(
        name=f"{FLEET}-0", at=ago(seconds=30), cloud_id="7001", record="systemevent-1", kind=kind
    )


def test_without_its_records_a_compute_loss_is_unknown() -> None:
    p = plan_lost(InstanceStatus.TERMINATED)
    assert lost_cause(p) is L.UNKNOWN


def test_a_preempted_record_says_preempted() -> None:
    t = explained(record(RecordKind.PREEMPTED))
    assert (t.cause, t.end_reason) == (L.PREEMPTED, "preempted")


def test_a_host_maintenance_record_says_maintenance() -> None:
    t = explained(record(RecordKind.HOST_MAINTENANCE))
    assert (t.cause, t.end_reason) == (L.MAINTENANCE, "host maintenance")
    assert t.reason.startswith("terminated for host maintenance at ")
    assert "host-maintenance operation systemevent-1" in t.reason


def test_no_record_is_unknown_never_a_guess_though_the_slot_counts_a_preemption() -> None:
    t = explained(None)
    assert t.cause is L.UNKNOWN
    assert t.end_reason == "terminated: counted as preempted"
    assert t.slot_update is not None
    assert t.slot_update.add_preemptions == 1
    unread = plan_lost(InstanceStatus.TERMINATED, found=LossRecords(error="HTTP 503"))
    assert lost_cause(unread) is L.UNKNOWN


def test_a_preempted_record_inside_the_window_is_maintenance() -> None:
    """Host-maintenance terminations of spot VMs are logged as preemptions too."""
    t = explained(record(RecordKind.PREEMPTED), maintenance=ONGOING)
    assert t.cause is L.MAINTENANCE


# ---------------------------------------------------------------------------------------------
# The budget: a node's loss, whatever its cause, never counts as a failed create


@pytest.mark.parametrize(
    ("record_", "observations"),
    [r[1:3] for r in ROWS if r[1].phase is NodePhase.READY],
    ids=[r[0] for r in ROWS if r[1].phase is NodePhase.READY],
)
def test_a_serving_nodes_loss_keeps_the_create_failures(
    record_: IncarnationRecord, observations: list
) -> None:
    slots = [slot(0, create_failures=2, last_error="capacity: stockout")]
    p = run([SPEC], observations, snapshot(record_, specs=[SPEC], slots=slots))
    updates = [a.slot_update for a in p.of(Transition) if a.slot_update is not None]
    assert updates
    for u in updates:
        assert (u.create_failures, u.next_create_at) == (2, None)


def test_a_compute_spec_is_what_the_records_are_read_for() -> None:
    assert compute_spec().api == COMPUTE_API
    assert spec().api != COMPUTE_API
