"""A flex-start run's end (core/nodes/flex.py): a READY flex-start node lost at or after its
planned end (less RUN_END_LAG) ends "run ended": no preemption counted, no preemption record
asked for, no create backoff; lost earlier, or on another tier, it is a preemption as before.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from tpucared.core.model.observed import ObservedNode
from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import CapacityKind, FleetSpec, NodeOptions
from tpucared.core.nodes.cloud import ABSENT
from tpucared.core.nodes.flex import RUN_END_LAG, RUN_ENDED, run_ended
from tpucared.core.nodes.preemption import suspects
from tpucared.core.vocab.actions import Loss, RecordCloud, Transition
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.policy import Policy
from tpucared.gcp.compute.cloud import ABILITIES as COMPUTE_ABILITIES
from tpucared.gcp.compute.cloud import API as COMPUTE_API
from tpucared.gcp.compute.states import InstanceStatus, state_fields

from ..core_support import FLEET, T0, Z1, ago, edges, inc, ours, run, slot, snapshot, spec, world

MACHINE = "ct6e-standard-4t"
DAY = timedelta(days=1)


def flex_spec() -> FleetSpec:
    return spec(
        size=1, api=COMPUTE_API, accelerator_type=MACHINE, capacity=CapacityKind.FLEX_START,
        node=NodeOptions(topology="4x4", max_run_duration_s=86400),
    )  # fmt: skip


def instance(status: InstanceStatus, ends: datetime | None) -> ObservedNode:
    return ObservedNode(
        name=f"{FLEET}-0", zone=Z1, **state_fields(status), accelerator_type=MACHINE,
        labels=ours(), cloud_id="7001", run_ends_at=ends,
    )  # fmt: skip


def ready(ends: datetime | None, **kw: Any) -> IncarnationRecord:
    facts = {"cloud_state": "RUNNING", "cloud_state_since": ago(hours=1), **kw}
    return inc(
        1, 0, api=COMPUTE_API, accelerator_type=MACHINE, cloud_id="7001", run_ends_at=ends,
        **facts,
    )  # fmt: skip


def plan_lost(
    status: InstanceStatus | None, ends: datetime, fleet: FleetSpec | None = None, **kw: Any
) -> Plan:
    fleet = fleet or flex_spec()
    shown = [] if status is None else [instance(status, ends)]
    # The slot had failed creates before: a run's end keeps its counters as they were.
    slots = [slot(0, create_failures=2, last_error="capacity: stockout")]
    return run([fleet], world(*shown), snapshot(ready(ends, **kw), specs=[fleet], slots=slots))


def suspected(status: InstanceStatus | None, ends: datetime, **kw: Any) -> tuple[Loss, ...]:
    """The preemption-record suspects of the plan_lost world (core/nodes/preemption.py)."""
    shown = [] if status is None else [instance(status, ends)]
    lists = [replace(o, api=COMPUTE_API, abilities=COMPUTE_ABILITIES) for o in world(*shown)]
    return suspects([flex_spec()], lists, [ready(ends, **kw)], T0, Policy().vanish_grace)


def dead(p: Plan) -> Transition:
    [t] = [a for a in p.of(Transition) if a.new.value == "dead"]
    return t


@pytest.mark.parametrize(
    ("lost_at", "ended"),
    [
        (T0, True),  # at the planned end
        (T0 + timedelta(minutes=3), True),  # the cloud's lag, or a slow list
        (T0 - RUN_END_LAG, True),  # the documented lag, the other way
        (T0 - RUN_END_LAG - timedelta(seconds=1), False),  # before: a preemption
        (T0 - DAY, False),
    ],
)
def test_run_ended_by_the_planned_end(lost_at: datetime, ended: bool) -> None:
    assert run_ended(flex_spec(), T0, lost_at) is ended


def test_only_a_flex_start_fleet_with_a_planned_end_has_a_run_end() -> None:
    assert not run_ended(flex_spec(), None, T0)  # the cloud never said when
    assert not run_ended(replace(flex_spec(), capacity=CapacityKind.SPOT), T0, T0)
    assert not run_ended(None, T0, T0)  # a fleet gone from the config


@pytest.mark.parametrize("status", [InstanceStatus.STOPPING, InstanceStatus.TERMINATED])
def test_a_flex_vm_stopping_at_its_planned_end_ended_its_run(status: InstanceStatus) -> None:
    p = plan_lost(status, ends=ago(seconds=10))
    t = dead(p)
    assert t.end_reason == RUN_ENDED
    assert suspected(status, ago(seconds=10)) == ()  # no preemption record is read for it
    assert t.slot_update is not None
    # Neither a preemption nor a failure: the slot asks again at once, counters unchanged.
    assert (t.slot_update.add_preemptions, t.slot_update.next_create_at) == (0, None)
    assert (t.slot_update.create_failures, t.slot_update.last_error) == (2, "capacity: stockout")
    assert "the flex-start run ended" in t.reason
    assert edges(p, 1) == [("ready", "dead")]
    assert [a.node_name for a in p.actions if a.kind == "delete"] == [f"{FLEET}-0"]


def test_a_flex_vm_gone_at_its_planned_end_ended_its_run() -> None:
    """Deleted by the cloud at the end (instanceTerminationAction DELETE): vanished, taken
    for gone past vanish_grace, judged by when it first was missing, not by now."""
    gone = {"cloud_state": ABSENT, "cloud_state_since": ago(seconds=25)}
    p = plan_lost(None, ends=ago(seconds=40), **gone)
    t = dead(p)
    assert t.end_reason == RUN_ENDED
    assert suspected(None, ago(seconds=40), **gone) == ()
    assert t.slot_update is not None
    assert t.slot_update.add_preemptions == 0
    assert edges(p, 1) == [("ready", "dead"), ("dead", "deleted")]


def test_a_flex_vm_lost_before_its_planned_end_was_preempted() -> None:
    p = plan_lost(InstanceStatus.TERMINATED, ends=T0 + timedelta(hours=5))
    t = dead(p)
    assert t.end_reason == "terminated"
    # Its preemption record is read, as any lost VM's.
    assert len(suspected(InstanceStatus.TERMINATED, T0 + timedelta(hours=5))) == 1
    assert t.slot_update is not None
    assert t.slot_update.add_preemptions == 1


def test_a_spot_vm_is_never_a_run_end() -> None:
    fleet = replace(flex_spec(), capacity=CapacityKind.SPOT, node=NodeOptions())
    t = dead(plan_lost(InstanceStatus.TERMINATED, ends=ago(seconds=10), fleet=fleet))
    assert t.end_reason == "terminated"
    assert t.slot_update is not None
    assert t.slot_update.add_preemptions == 1


def test_the_planned_end_is_recorded_when_the_cloud_says_it() -> None:
    """A RUNNING flex VM's `run_ends_at` goes onto the incarnation (RecordCloud), and stays
    there once the VM is gone: the loss is judged by it."""
    fleet = flex_spec()
    ends = T0 + 6 * DAY
    record = ready(None)
    p = run([fleet], world(instance(InstanceStatus.RUNNING, ends)), snapshot(record, specs=[fleet]))
    [rc] = p.of(RecordCloud)
    assert rc.cloud.run_ends_at == ends
    # Recorded, and the VM now missing (within vanish_grace): the recorded end is kept.
    p = run([fleet], world(), snapshot(ready(ends), specs=[fleet]))
    [rc] = p.of(RecordCloud)
    assert (rc.cloud.cloud_state, rc.cloud.run_ends_at) == (ABSENT, ends)
