"""A preemption, not a failure (core/nodes/preemption.py): `suspects` names a lost Compute
Engine VM from the lists (before any plan), and the one plan words its end by the preemption
records the runtime read into the observation (the `compute.instances.preempted` operations):
preempted at the record's time; a spot VM with no record (or unreadable records) counted as
preempted, saying so; any other tier ended as the lists showed it. A TPU API node is never a
suspect: it says PREEMPTED.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from tpucared.core.model.abilities import CloudAbilities
from tpucared.core.model.observed import (
    LossRecords,
    ObservedNode,
    PreemptionRecord,
    RecordKind,
    ZoneObservation,
)
from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import CapacityKind, ErrorKind, FleetSpec
from tpucared.core.nodes.cloud import ABSENT
from tpucared.core.nodes.preemption import suspects, where, with_records
from tpucared.core.vocab.actions import Loss, Transition
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.policy import Policy
from tpucared.gcp.compute.cloud import ABILITIES as COMPUTE_ABILITIES
from tpucared.gcp.compute.cloud import API as COMPUTE_API
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


def lost_world(
    status: InstanceStatus | None, fleet: FleetSpec | None = None, **kw: Any
) -> tuple[FleetSpec, list[ZoneObservation], IncarnationRecord]:
    """The READY VM now listed in `status` (None: gone from the list), listed by Compute
    Engine: (its fleet, the lists, its record)."""
    fleet = fleet or compute_spec()
    shown = [] if status is None else [instance(status)]
    lists = [replace(o, api=COMPUTE_API, abilities=COMPUTE_ABILITIES) for o in world(*shown)]
    return fleet, lists, ready_instance(**kw)


def suspected(status: InstanceStatus | None, **kw: Any) -> tuple[Loss, ...]:
    fleet, lists, record = lost_world(status, **kw)
    return suspects([fleet], lists, [record], T0, Policy().vanish_grace)


def plan_lost(
    status: InstanceStatus | None,
    fleet: FleetSpec | None = None,
    found: LossRecords | None = None,
    **kw: Any,
) -> Plan:
    """The plan for the READY VM now listed in `status`, with `found` read for its zone (None:
    nothing read, as `tpucared plan`)."""
    fleet, lists, record = lost_world(status, fleet, **kw)
    if found is not None:
        lists = list(with_records(lists, {(COMPUTE_API, "", Z1): found}))
    return run([fleet], lists, snapshot(record, specs=[fleet]))


def dead(p: Plan) -> Transition:
    [t] = [a for a in p.of(Transition) if a.new.value == "dead"]
    return t


@pytest.mark.parametrize(
    ("status", "how"),
    [(InstanceStatus.TERMINATED, "terminated"), (InstanceStatus.STOPPING, "stopping")],
)
def test_a_dead_status_marks_the_loss_of_a_compute_vm(status: InstanceStatus, how: str) -> None:
    loss = Loss(
        api=COMPUTE_API, project="", zone=Z1, node_name=f"{FLEET}-0", cloud_id="7001",
        how=how, spot=True,
    )  # fmt: skip
    assert suspected(status) == (loss,)
    t = dead(plan_lost(status))
    assert t.end_reason == how  # as the lists showed it, where no records were read
    assert t.slot_update is not None
    assert t.slot_update.add_preemptions == 1
    assert plan_lost(status).to_dict()["actions"]  # renders (tpucared plan --json)


def test_a_vanished_compute_vm_is_a_suspect_once_past_its_grace() -> None:
    gone_since = {"cloud_state": ABSENT, "cloud_state_since": ago(seconds=30)}
    (loss,) = suspected(None, **gone_since)
    assert loss.how == "vanished"
    p = plan_lost(None, **gone_since)
    assert [a.new.value for a in p.of(Transition)] == ["dead", "deleted"]
    # Missing for less than vanish_grace (20 s): no loss yet, nothing read.
    assert suspected(None, cloud_state=ABSENT, cloud_state_since=ago(seconds=5)) == ()
    assert not [a for a in plan_lost(None, cloud_state=ABSENT,
                                     cloud_state_since=ago(seconds=5)).of(Transition)
                if a.new.value == "dead"]  # fmt: skip


def test_a_tpu_node_is_never_a_suspect_it_says_preempted_itself() -> None:
    from ..core_support import node
    from .nodes_support import C, ready

    tpu = spec(size=1)
    lists = world(node(state=C.TERMINATED))
    p = run([tpu], lists, snapshot(ready(node()), specs=[tpu]))
    assert dead(p).end_reason == "terminated"
    assert suspects([tpu], lists, [ready(node())], T0, Policy().vanish_grace) == ()


def test_a_usable_or_unlisted_zone_suspects_nothing() -> None:
    assert suspected(InstanceStatus.RUNNING) == ()
    fleet = compute_spec()
    record = ready_instance(cloud_state=ABSENT, cloud_state_since=ago(minutes=1))
    # Only Z2 listed: Z1 unknown, nothing concluded from absence.
    lists = [replace(o, api=COMPUTE_API, abilities=COMPUTE_ABILITIES) for o in world(zones=(Z2,))]
    assert suspects([fleet], lists, [record], T0, Policy().vanish_grace) == ()
    failed = [*lists, replace(lists[0], zone=Z1, error=ErrorKind.TRANSIENT)]
    assert suspects([fleet], failed, [record], T0, Policy().vanish_grace) == ()


def records(*found: PreemptionRecord, error: str | None = None) -> LossRecords:
    return LossRecords(records=found, error=error)


def test_its_preempted_operation_says_preempted_and_when() -> None:
    at = T0 - timedelta(seconds=42)
    older = PreemptionRecord(name=f"{FLEET}-0", at=ago(hours=2), cloud_id="6000", record="old")
    mine = PreemptionRecord(name=f"{FLEET}-0", at=at, cloud_id="7001", record=RECORD)
    p = plan_lost(InstanceStatus.TERMINATED, found=records(older, mine))
    t = dead(p)
    assert t.end_reason == "preempted"
    assert t.reason == (
        f"preempted at 2025-06-01T11:59:18Z (its compute.instances.preempted operation "
        f"{RECORD}); terminated"
    )
    assert t.lost_at == at  # the cloud's own instant, for the ledger (nodes.cloud_lost_at)
    assert p.to_json()  # renders with it (tpucared plan --json)
    assert t.slot_update is not None
    assert t.slot_update.add_preemptions == 1
    # Everything else in the plan is as without records.
    bare = plan_lost(InstanceStatus.TERMINATED)
    assert [a for a in p.actions if not isinstance(a, Transition)] == [
        a for a in bare.actions if not isinstance(a, Transition)
    ]


def test_a_record_without_an_id_is_matched_by_name() -> None:
    found = PreemptionRecord(name=f"{FLEET}-0", at=ago(seconds=5), record=RECORD)
    p = plan_lost(InstanceStatus.STOPPING, found=records(found))
    assert dead(p).end_reason == "preempted"
    # A record's time after the tick is no evidence (a clock gone wrong): not kept.
    late = replace(found, at=T0 + timedelta(seconds=5))
    assert dead(plan_lost(InstanceStatus.STOPPING, found=records(late))).lost_at is None


def test_a_spot_vm_with_no_operation_counts_as_preempted_and_says_so() -> None:
    # An earlier VM of the same name was preempted: not this one's record.
    earlier = PreemptionRecord(name=f"{FLEET}-0", at=ago(hours=1), cloud_id="6000", record="x")
    other = PreemptionRecord(name=f"{FLEET}-1", at=ago(seconds=3), cloud_id="7002", record="y")
    gone = {"cloud_state": ABSENT, "cloud_state_since": ago(seconds=30)}
    t = dead(plan_lost(None, found=records(earlier, other), **gone))
    assert t.end_reason == "vanished: counted as preempted"
    assert t.reason == (
        "vanished: a spot VM lost, no compute.instances.preempted operation names it: "
        "counted as a preemption"
    )
    assert t.slot_update is not None
    assert t.slot_update.add_preemptions == 1


def test_unreadable_records_still_count_a_spot_vm_and_say_they_were_unread() -> None:
    t = dead(plan_lost(InstanceStatus.TERMINATED, found=records(error="HTTP 503: backend error")))
    assert t.lost_at is None  # nothing says when: the ledger starts the loss at dead_at
    assert t.end_reason == "terminated: counted as preempted"
    assert "its compute.instances.preempted operation could not be read (HTTP 503" in t.reason


@pytest.mark.parametrize("capacity", [CapacityKind.ON_DEMAND, CapacityKind.RESERVED])
def test_another_tier_ends_as_listed_unless_a_record_says_preempted(
    capacity: CapacityKind,
) -> None:
    t = dead(plan_lost(InstanceStatus.TERMINATED, compute_spec(capacity), records()))
    assert t.end_reason == "terminated"
    assert t.reason == "terminated (no compute.instances.preempted operation names it)"
    found = PreemptionRecord(name=f"{FLEET}-0", at=ago(seconds=9), cloud_id="7001", record=RECORD)
    p = plan_lost(InstanceStatus.TERMINATED, compute_spec(capacity), records(found))
    assert dead(p).end_reason == "preempted"


def test_records_of_another_location_leave_the_end_as_listed() -> None:
    fleet, lists, record = lost_world(InstanceStatus.TERMINATED)
    elsewhere = list(with_records(lists, {(COMPUTE_API, "", Z2): records()}))
    assert [o.loss_records is not None for o in elsewhere] == [False, True]  # Z1, Z2
    # ...and records read by another API's name for the location are not attached.
    assert all(o.loss_records is None for o in with_records(lists, {("tpu", "", Z1): records()}))
    t = dead(run([fleet], elsewhere, snapshot(record, specs=[fleet])))
    assert t.end_reason == "terminated"
    assert t.reason == "terminated"
    (loss,) = suspected(InstanceStatus.TERMINATED)
    assert where(loss) == (COMPUTE_API, "", Z1)


def test_a_fleet_gone_from_the_config_is_not_taken_for_spot() -> None:
    """A fleet marked down and no longer configured: its tier is unknown, so a VM of it
    lost with no record ends as the lists showed it."""
    record = ready_instance()
    snap = snapshot(record, extra_fleets=[FLEET], down=[FLEET])
    shown = world(instance(InstanceStatus.TERMINATED))
    lists = [replace(o, api=COMPUTE_API, abilities=COMPUTE_ABILITIES) for o in shown]
    (loss,) = suspects([], lists, [record], T0, Policy().vanish_grace)
    assert not loss.spot
    found = list(with_records(lists, {(COMPUTE_API, "", Z1): records()}))
    assert dead(run([], found, snap)).end_reason == "terminated"


def test_the_cloud_says_whether_it_keeps_records_and_what_they_are_called() -> None:
    """The core decides on the abilities stamped on the lists, never on the API's name: the
    same VM listed by a cloud that keeps no records is no suspect, and a cloud that names
    its records otherwise has its loss worded in its own words."""
    fleet, lists, record = lost_world(InstanceStatus.TERMINATED)
    silent = [replace(o, abilities=CloudAbilities()) for o in lists]
    assert suspects([fleet], silent, [record], T0, Policy().vanish_grace) == ()
    assert dead(run([fleet], silent, snapshot(record, specs=[fleet]))).reason == "terminated"
    own = CloudAbilities(preemption_records="reclaim notice", maintenance_records="drain log")
    mine = PreemptionRecord(name=f"{FLEET}-0", at=ago(seconds=42), cloud_id="7001", record="r1")
    drained = replace(mine, kind=RecordKind.HOST_MAINTENANCE)
    for found, words in ((mine, "its reclaim notice r1"), (drained, "its drain log r1")):
        other = [replace(o, api="elsewhere", abilities=own) for o in lists]
        theirs = replace(record, api="elsewhere")
        read = list(with_records(other, {("elsewhere", "", Z1): records(found)}))
        assert words in dead(run([fleet], read, snapshot(theirs, specs=[fleet]))).reason
    gone = [replace(o, api="elsewhere", abilities=own) for o in lists]
    t = dead(run([fleet], list(with_records(gone, {("elsewhere", "", Z1): records()})),
                 snapshot(replace(record, api="elsewhere"), specs=[fleet])))  # fmt: skip
    assert t.reason == (
        "terminated: a spot VM lost, no reclaim notice names it: counted as a preemption"
    )
