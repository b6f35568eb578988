"""slices.py and shared.py from JSON, no server: the slice state table, worker order from each
source, ownership by description, a malformed member, the provisioning check's errors, the MIG
and template bodies, and names.py's slice operation path."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tpucared.core.model.observed import StateClass
from tpucared.core.model.specs import CapacityKind, ErrorKind
from tpucared.gcp.compute import names, shared
from tpucared.gcp.compute.slices import (
    FLEX_MARK,
    SLICE_STATES,
    SliceState,
    mig_body,
    mig_labels,
    provisioning,
    slice_from_json,
    worker_order,
)
from tpucared.gcp.fields import MalformedResource

from .support import OWNER, ZONE, P, shape

# As Google writes a member's `created-by`: the project's number, not its id (issue 39).
NUMBER = "776293755095"
MIG = f"projects/{NUMBER}/zones/{ZONE}/instanceGroupManagers/iron-0"
STOCKOUT = {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no tpu7x"}]}


def member(n: int, status: str = "RUNNING", worker: int | None = None, **extra: Any) -> dict:
    items = [{"key": "created-by", "value": MIG}]
    if worker is not None:
        items.append({"key": "agent-worker-number", "value": str(worker)})
    return {
        "name": f"iron-0-w-{n:03d}",
        "id": str(100 + n),
        "status": status,
        "machineType": f"zones/{ZONE}/machineTypes/tpu7x-standard-4t",
        "networkInterfaces": [{"networkIP": f"10.0.0.{n}"}],
        "metadata": {"items": items},
        **extra,
    }


def mig(size: int = 4, stable: bool = True, **actions: int) -> dict:
    return {
        "name": "iron-0",
        "id": "77",
        "description": f"tpucared-owner={OWNER} tpucared-fleet=iron",
        "creationTimestamp": "2026-11-26T10:00:00Z",
        "targetSize": size,
        "currentActions": {"none": size, **actions},
        "status": {"isStable": stable},
    }


def four(**kw: Any) -> list[dict]:
    return [member(n, worker=n - 1, **kw) for n in range(1, 5)]


def test_every_member_running_is_one_usable_node_with_workers_in_order() -> None:
    members = [member(1, worker=2), member(2, worker=0), member(3, worker=3), member(4, worker=1)]
    node = slice_from_json(ZONE, mig(), members)
    assert (node.name, node.state, node.state_class) == ("iron-0", "RUNNING", StateClass.USABLE)
    assert node.owned_by(OWNER)
    assert node.fleet == "iron"
    assert node.cloud_id == "77"
    assert node.accelerator_type == "tpu7x-standard-4t"
    assert [(e.index, e.internal_ip) for e in node.endpoints] == [
        (0, "10.0.0.2"), (1, "10.0.0.4"), (2, "10.0.0.1"), (3, "10.0.0.3"),
    ]  # fmt: skip


def test_worker_order_from_tpu_env_then_the_name_suffix_else_unknown() -> None:
    env = [member(n) for n in (1, 2)]
    env[0]["metadata"]["items"].append({"key": "tpu-env", "value": "A: 'x'\nWORKER_ID: '1'\n"})
    env[1]["metadata"]["items"].append({"key": "tpu-env", "value": "WORKER_ID: '0'"})
    assert [m["name"] for m in worker_order(env) or ()] == ["iron-0-w-002", "iron-0-w-001"]
    by_name = [member(3), member(1)]
    assert [m["name"] for m in worker_order(by_name) or ()] == ["iron-0-w-001", "iron-0-w-003"]
    nameless = [member(1), {**member(2), "name": "odd"}]
    assert worker_order(nameless) is None
    node = slice_from_json(ZONE, mig(size=2), nameless)
    assert node.state == SliceState.SLICE_NO_WORKER_IDS
    assert node.state_class is StateClass.UNREADABLE


@pytest.mark.parametrize(
    ("the_mig", "members", "state", "cls"),
    [
        (mig(), four(), "RUNNING", StateClass.USABLE),
        (mig(), [*four()[:3], member(4, "TERMINATED", worker=3)], "TERMINATED", StateClass.DEAD),
        (mig(), four()[:3], SliceState.SLICE_INCOMPLETE, StateClass.DEAD),
        (mig(stable=False, creating=1), four()[:3], SliceState.SLICE_CREATING, StateClass.CREATING),
        (mig(stable=False, recreating=1), four(), SliceState.SLICE_RECREATED, StateClass.DEAD),
        (mig(stable=False, deleting=4), four(), SliceState.SLICE_DELETING, StateClass.DELETING),
        (mig(), four(status="PENDING"), SliceState.SLICE_PENDING, StateClass.WAITING),
        ({**mig(stable=False), "status": {"bulkInstanceOperation": {"inProgress": True}}}, [],
         SliceState.SLICE_PENDING, StateClass.WAITING),
        (mig(stable=False), four(status="STAGING"), SliceState.SLICE_CREATING, StateClass.CREATING),
        (mig(stable=False, creating=4), [], SliceState.SLICE_CREATING, StateClass.CREATING),
        (mig(), [], SliceState.SLICE_INCOMPLETE, StateClass.DEAD),  # every member vanished
        (mig(), [*four()[:3], member(4, "NEWSTATE", worker=3)], "UNRECOGNIZED",
         StateClass.UNREADABLE),
    ],
)  # fmt: skip
def test_the_slice_state_table(
    the_mig: dict, members: list[dict], state: str, cls: StateClass
) -> None:
    node = slice_from_json(ZONE, the_mig, members)
    assert (node.state, node.state_class) == (state, cls)
    if state in SLICE_STATES:
        assert node.stuck_rule == SLICE_STATES[state][1]
    # What the cloud made but cannot be used is told apart from capacity taken away: before
    # READY the core makes it a DEFECTIVE create (issue 39), a TERMINATED member stays a loss.
    defective = state in (SliceState.SLICE_INCOMPLETE, SliceState.SLICE_RECREATED)
    assert (node.defect is not None) == defective


def test_ownership_is_the_description() -> None:
    assert mig_labels(mig()) == {"tpucared-owner": OWNER, "tpucared-fleet": "iron"}
    assert mig_labels({**mig(), "description": "made by hand"}) is None
    assert mig_labels({k: v for k, v in mig().items() if k != "description"}) is None


def test_a_malformed_member_or_mig_raises() -> None:
    with pytest.raises(MalformedResource):
        slice_from_json(ZONE, mig(), [{**member(1), "labels": ["not", "a", "map"]}])
    with pytest.raises(MalformedResource):
        slice_from_json(ZONE, {**mig(), "name": 7}, [])


def test_provisioning_done_capacity_quota_and_flex_waiting() -> None:
    booting = [{"instance": "x", "instanceStatus": "PROVISIONING"}] * 4
    assert provisioning(mig(), booting) == (False, None)  # made, not up yet
    made = [{"instance": "x", "instanceStatus": "RUNNING"}] * 4
    assert provisioning(mig(), made) == (True, None)
    # A VM already lost is past its making too: the list tells the rest.
    assert provisioning(mig(), [*made[:3], {"instanceStatus": "TERMINATED"}]) == (True, None)
    assert provisioning(mig(), [*made[:3], {"instanceStatus": "PENDING"}]) == (False, None)
    assert provisioning(mig(), [*made[:3], {"currentAction": "CREATING"}]) == (False, None)
    stockout = {"currentAction": "CREATING", "lastAttempt": {"errors": STOCKOUT}}
    done, error = provisioning(mig(), [*made[:3], stockout])
    assert done
    assert error is not None
    assert error.kind is ErrorKind.CAPACITY
    quota = {"errors": [{"code": "QUOTA_EXCEEDED", "message": "TPUS_PER_PROJECT"}]}
    _, error = provisioning(mig(), [{"lastAttempt": {"errors": quota}}])
    assert error is not None
    assert error.kind is ErrorKind.QUOTA
    bulk = {**mig(), "status": {"bulkInstanceOperation": {
        "inProgress": True, "lastProgressCheck": {"error": STOCKOUT}}}}  # fmt: skip
    done, error = provisioning(bulk, [])
    assert error is not None
    assert error.kind is ErrorKind.CAPACITY
    assert provisioning(bulk, [], flex_start=True) == (False, None)
    # A restarted daemon knows a flex-start slice by its description: it still waits.
    flex = {**bulk, "description": f"tpucared-owner={OWNER} tpucared-fleet=iron {FLEX_MARK}"}
    assert provisioning(flex, []) == (False, None)
    assert mig_labels(flex) == {"tpucared-owner": OWNER, "tpucared-fleet": "iron"}


def test_the_mig_body_and_the_template() -> None:
    spot = shape(topology="2x2x4", hosts=4)
    body = mig_body("iron-0", spot, owner=OWNER, fleet="iron", template="t", policy="p")
    assert body["baseInstanceName"] == "iron-0-w-###"
    assert body["targetSize"] == 4
    assert body["targetSizePolicy"] == {"mode": "INDIVIDUAL"}
    assert body["instanceLifecyclePolicy"] == {"defaultActionOnFailure": "DO_NOTHING"}
    assert body["resourcePolicies"] == {"workloadPolicy": "p"}
    assert mig_labels(body) == {"tpucared-owner": OWNER, "tpucared-fleet": "iron"}
    # Bulk mode only with a reservation-bound or flex-start template (issue 39): a plain
    # reserved slice (STANDARD, a specific reservation) is INDIVIDUAL.
    reserved = shape(topology="2x2x4", hosts=4, capacity=CapacityKind.RESERVED)
    plain = mig_body("iron-0", reserved, owner=OWNER, fleet="iron", template="t", policy="p")
    assert plain["targetSizePolicy"] == {"mode": "INDIVIDUAL"}
    calendar = replace(reserved, reservation_bound=True)
    bulk = mig_body("iron-0", calendar, owner=OWNER, fleet="iron", template="t", policy="p")
    assert bulk["targetSizePolicy"] == {"mode": "BULK"}
    bound = shared.template_body(calendar, ZONE, reservation="r1", boot_disk_gb=100)
    assert bound["properties"]["scheduling"] == {
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": True,  # Google's body for it
        "provisioningModel": "RESERVATION_BOUND",
        "instanceTerminationAction": "DELETE",
    }
    flex = shape(capacity=CapacityKind.FLEX_START, max_run_duration_s=3600)
    one = mig_body("iron-0", flex, owner=OWNER, fleet="iron", template="t", policy=None)
    assert one["targetSize"] == 1
    assert one["targetSizePolicy"] == {"mode": "BULK"}
    assert "resourcePolicies" not in one
    template = shared.template_body(spot, ZONE, reservation=None, boot_disk_gb=100)
    props = template["properties"]
    assert props["machineType"] == "tpu7x-standard-4t"
    assert props["scheduling"]["provisioningModel"] == "SPOT"
    assert props["scheduling"]["instanceTerminationAction"] == "STOP"
    assert props["labels"]["tpucared-owner"] == OWNER
    meta = {i["key"]: i["value"] for i in props["metadata"]["items"]}
    assert meta["enable-guest-attributes"] == "TRUE"
    assert "ssh-keys" in meta
    assert template["name"].startswith("tpucared-")
    again = shared.template_body(spot, ZONE, reservation=None, boot_disk_gb=100)
    assert again == template  # content-addressed: the same spec, the same name
    other = shared.template_body(spot, ZONE, reservation=None, boot_disk_gb=200)
    assert other["name"] != template["name"]
    held = shared.template_body(reserved, ZONE, reservation="r1", boot_disk_gb=100)
    assert held["properties"]["reservationAffinity"]["values"] == ["r1"]


def test_the_slice_operation_path_round_trips_and_is_told_apart() -> None:
    path = names.slice_operation_path(P, ZONE, "iron-0", "op-1")
    assert names.slice_operation_place(path) == (P, ZONE, "iron-0", "op-1")
    with pytest.raises(ValueError, match="slice operation"):
        names.slice_operation_place(names.operation_path(P, ZONE, "op-1"))
    with pytest.raises(ValueError, match="zone operation"):
        names.operation_place(path)
    assert names.names_mig(f"https://x/compute/v1/{MIG}", ZONE) == "iron-0"
    assert names.names_mig(f"projects/{P}/zones/{ZONE}/instanceGroupManagers/a", ZONE) == "a"
    assert names.names_mig(f"projects/{NUMBER}/zones/other/instanceGroupManagers/a", ZONE) is None
    assert names.names_mig(f"projects/{NUMBER}/regions/r/instanceGroupManagers/a", ZONE) is None
    assert names.names_mig(f"projects/{NUMBER}/xzones/{ZONE}/instanceGroupManagers/a", ZONE) is None


def test_a_member_of_another_id_than_when_the_slice_ran_makes_it_recreated() -> None:
    ran = {m["name"]: m["id"] for m in four()}
    assert slice_from_json(ZONE, mig(), four(), ran).state == "RUNNING"
    members = four()
    members[2]["id"] = "999"  # the MIG made worker 2 again: its workload is gone
    node = slice_from_json(ZONE, mig(), members, ran)
    assert (node.state, node.state_class) == (SliceState.SLICE_RECREATED, StateClass.DEAD)
    assert slice_from_json(ZONE, mig(), members).state == "RUNNING"  # no memory: not told
