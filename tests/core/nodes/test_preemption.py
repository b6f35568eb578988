"""A preemption, not a failure (core/nodes/preemption.py): a lost Compute Engine VM's
Transition is marked with its `Loss`, and `explain` words its end by the preemption records
the runtime read (the `compute.instances.preempted` operations): preempted at the record's
time; a spot VM with no record (or unreadable records) counted as preempted, saying so; any
other tier ended as the lists showed it. A TPU API node is never marked: it says PREEMPTED.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tpucared.core.model.observed import ObservedNode, PreemptionRecord
from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import COMPUTE_API, CapacityKind, FleetSpec
from tpucared.core.nodes.cloud import ABSENT
from tpucared.core.nodes.preemption import Where, ZoneRecords, explain, losses, where
from tpucared.core.vocab.actions import Loss, Transition
from tpucared.core.vocab.plan import Plan
from tpucared.gcp.compute.states import InstanceStatus, state_fields

from ..core_support import FLEET, T0, Z1, Z2, ago, inc, ours, run, snapshot, spec, world

MACHINE = "tpu7x-standard-4t"
RECORD = "systemevent-1764169538000-preempted"


def compute_spec(capacity: CapacityKind = CapacityKind.SPOT) -> FleetSpec:
    return spec(size=1, api=COMPUTE_API, accelerator_type=MACHINE, capacity=capacity)


def instance(status: InstanceStatus, cloud_id: str = "7001") -> ObservedNode:
    return ObservedNode(
        name=f"{FLEET}-0", zone=Z1, **state_fields(status), accelerator_type=MACHINE,
        labels=ours(), cloud_id=cloud_id,
    )  # fmt: skip


def ready_instance(**kw: Any) -> IncarnationRecord:
    """The slot's READY incarnation of a compute fleet, as recorded RUNNING (id 7001)."""
    facts = {"cloud_state": "RUNNING", "cloud_state_since": ago(minutes=5), **kw}
    return inc(1, 0, api=COMPUTE_API, accelerator_type=MACHINE, cloud_id="7001", **facts)


def plan_lost(status: InstanceStatus | None, fleet: FleetSpec | None = None, **kw: Any) -> Plan:
    """The plan for the READY VM now listed in `status` (None: gone from the list)."""
    fleet = fleet or compute_spec()
    record = ready_instance(**kw)
    shown = [] if status is None else [instance(status)]
    return run([fleet], world(*shown), snapshot(record, specs=[fleet]))


def dead(p: Plan) -> Transition:
    [t] = [a for a in p.of(Transition) if a.new.value == "dead"]
    return t


@pytest.mark.parametrize(
    ("status", "how"),
    [(InstanceStatus.TERMINATED, "terminated"), (InstanceStatus.STOPPING, "stopping")],
)
def test_a_dead_status_marks_the_loss_of_a_compute_vm(status: InstanceStatus, how: str) -> None:
    p = plan_lost(status)
    t = dead(p)
    assert t.loss == Loss(
        api=COMPUTE_API, project="", zone=Z1, node_name=f"{FLEET}-0", cloud_id="7001",
        how=how, spot=True,
    )  # fmt: skip
    assert t.end_reason == how  # as the lists showed it, until explained
    assert t.slot_update is not None
    assert t.slot_update.add_preemptions == 1
    assert losses(p) == (t.loss,)
    assert p.to_dict()["actions"]  # a marked Transition renders (tpucared plan --json)


def test_a_vanished_compute_vm_is_marked_once_past_its_grace() -> None:
    gone_since = {"cloud_state": ABSENT, "cloud_state_since": ago(seconds=30)}
    p = plan_lost(None, **gone_since)
    t = dead(p)
    assert t.loss is not None
    assert t.loss.how == "vanished"
    assert [a.new.value for a in p.of(Transition)] == ["dead", "deleted"]
    # Missing for less than vanish_grace (20 s): no loss yet, nothing read.
    assert losses(plan_lost(None, cloud_state=ABSENT, cloud_state_since=ago(seconds=5))) == ()


def test_a_tpu_node_is_never_marked_it_says_preempted_itself() -> None:
    from ..core_support import node
    from .nodes_support import C, ready

    tpu = spec(size=1)
    p = run([tpu], world(node(state=C.TERMINATED)), snapshot(ready(node()), specs=[tpu]))
    assert dead(p).end_reason == "terminated"
    assert losses(p) == ()


def test_a_usable_or_unlisted_zone_marks_nothing() -> None:
    assert losses(plan_lost(InstanceStatus.RUNNING)) == ()
    fleet = compute_spec()
    record = ready_instance(cloud_state=ABSENT, cloud_state_since=ago(minutes=1))
    # Only Z2 listed: Z1 unknown, nothing concluded from absence.
    p = run([fleet], world(zones=(Z2,)), snapshot(record, specs=[fleet]))
    assert losses(p) == ()


def records(*found: PreemptionRecord, error: str | None = None) -> dict[Where, ZoneRecords]:
    return {(COMPUTE_API, "", Z1): ZoneRecords(records=found, error=error)}


def test_its_preempted_operation_says_preempted_and_when() -> None:
    p = plan_lost(InstanceStatus.TERMINATED)
    at = T0 - timedelta(seconds=42)
    older = PreemptionRecord(name=f"{FLEET}-0", at=ago(hours=2), cloud_id="6000", record="old")
    mine = PreemptionRecord(name=f"{FLEET}-0", at=at, cloud_id="7001", record=RECORD)
    t = dead(explain(p, records(older, mine)))
    assert t.end_reason == "preempted"
    assert t.reason == (
        f"preempted at 2025-06-01T11:59:18Z (its compute.instances.preempted operation "
        f"{RECORD}); terminated"
    )
    assert t.slot_update is not None
    assert t.slot_update.add_preemptions == 1
    # Everything else in the plan is as it was.
    rest = [a for a in explain(p, records(mine)).actions if a is not t]
    assert [a for a in rest if not isinstance(a, Transition)] == [
        a for a in p.actions if not isinstance(a, Transition)
    ]


def test_a_record_without_an_id_is_matched_by_name() -> None:
    p = plan_lost(InstanceStatus.STOPPING)
    found = PreemptionRecord(name=f"{FLEET}-0", at=ago(seconds=5), record=RECORD)
    assert dead(explain(p, records(found))).end_reason == "preempted"


def test_a_spot_vm_with_no_operation_counts_as_preempted_and_says_so() -> None:
    p = plan_lost(None, cloud_state=ABSENT, cloud_state_since=ago(seconds=30))
    # An earlier VM of the same name was preempted: not this one's record.
    earlier = PreemptionRecord(name=f"{FLEET}-0", at=ago(hours=1), cloud_id="6000", record="x")
    other = PreemptionRecord(name=f"{FLEET}-1", at=ago(seconds=3), cloud_id="7002", record="y")
    t = dead(explain(p, records(earlier, other)))
    assert t.end_reason == "vanished: counted as preempted"
    assert t.reason == (
        "vanished: a spot VM lost, no compute.instances.preempted operation names it: "
        "counted as a preemption"
    )
    assert t.slot_update is not None
    assert t.slot_update.add_preemptions == 1


def test_unreadable_records_still_count_a_spot_vm_and_say_they_were_unread() -> None:
    p = plan_lost(InstanceStatus.TERMINATED)
    t = dead(explain(p, records(error="HTTP 503: backend error")))
    assert t.end_reason == "terminated: counted as preempted"
    assert "its compute.instances.preempted operation could not be read (HTTP 503" in t.reason


@pytest.mark.parametrize("capacity", [CapacityKind.ON_DEMAND, CapacityKind.RESERVED])
def test_another_tier_ends_as_listed_unless_a_record_says_preempted(
    capacity: CapacityKind,
) -> None:
    p = plan_lost(InstanceStatus.TERMINATED, compute_spec(capacity))
    t = dead(explain(p, records()))
    assert t.end_reason == "terminated"
    assert t.reason == "terminated (no compute.instances.preempted operation names it)"
    found = PreemptionRecord(name=f"{FLEET}-0", at=ago(seconds=9), cloud_id="7001", record=RECORD)
    assert dead(explain(p, records(found))).end_reason == "preempted"


def test_a_location_not_read_leaves_the_plan_as_it_was() -> None:
    p = plan_lost(InstanceStatus.TERMINATED)
    assert explain(p, {}) is p
    elsewhere = {(COMPUTE_API, "", Z2): ZoneRecords()}
    assert explain(p, elsewhere).actions == p.actions
    loss = dead(p).loss
    assert loss is not None
    assert where(loss) == (COMPUTE_API, "", Z1)


def test_a_fleet_gone_from_the_config_is_not_taken_for_spot() -> None:
    """A fleet marked down and no longer configured: its tier is unknown, so a VM of it
    lost with no record ends as the lists showed it."""
    record = ready_instance()
    snap = snapshot(record, extra_fleets=[FLEET], down=[FLEET])
    p = run([], world(instance(InstanceStatus.TERMINATED)), snap)
    t = dead(p)
    assert t.loss is not None
    assert not t.loss.spot
    assert dead(explain(p, records())).end_reason == "terminated"
