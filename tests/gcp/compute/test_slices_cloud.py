"""`ComputeCloud`'s multi-host slices against the emulator's MIG surface over loopback: a 4-host
spot slice created as a MIG with its workload policy and template, followed to provisioned and
observed as ONE RUNNING node with 4 endpoints in worker order; a stockout (INDIVIDUAL and BULK)
as CAPACITY; a member preempted -> the slice DEAD, the record mapped to the slice; delete;
sweep removing the template and the policy once nothing uses them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from tpucared.core.model.observed import StateClass
from tpucared.core.model.specs import CapacityKind, ErrorKind
from tpucared.gcp.compute import ComputeCloud, shared
from tpucared.gcp.compute.shared import policy_name
from tpucared.gcp.compute.slices import worker_id
from tpucared.gcp.errors import ApiError, NotFoundError

from .support import OWNER, ZONE, Control, P, finished, shape

NOW = datetime(2026, 11, 26, tzinfo=UTC)
SLICE = {"topology": "2x2x4", "hosts": 4}
FAST = {"create_seconds": 0.1, "delete_seconds": 0.05, "compute_mig_retry_seconds": 0.1}


@pytest.fixture
def emulator_options() -> dict[str, Any]:
    return dict(FAST)


async def observe_one(cloud: ComputeCloud) -> Any:
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.ok, observation.error_message
    [node] = observation.nodes  # the members are not nodes of their own
    return node


async def observe_until(cloud: ComputeCloud, state_class: StateClass) -> Any:
    """The one node once it is in `state_class` (members boot after the create is done)."""
    seen = []
    for _ in range(300):
        node = await observe_one(cloud)
        if node.state_class is state_class:
            return node
        seen.append(node.state)
        await asyncio.sleep(0.02)
    raise AssertionError(f"never {state_class}: {sorted(set(seen))}")


async def test_a_slice_is_created_provisioned_and_observed_as_one_node(
    cloud: ComputeCloud, control: Control
) -> None:
    op = await cloud.create(P, ZONE, "iron-0", shape(**SLICE))
    assert op.name.startswith(f"projects/{P}/zones/{ZONE}/instanceGroupManagers/iron-0/operations/")
    done = await finished(cloud, op)
    assert done.error is None, done.error
    node = await observe_until(cloud, StateClass.USABLE)
    assert node.name == "iron-0"
    assert (node.state, node.state_class) == ("RUNNING", StateClass.USABLE)
    assert node.owned_by(OWNER)
    assert node.fleet == "iron"
    assert node.accelerator_type == "tpu7x-standard-4t"
    assert node.cloud_id
    assert node.create_time is not None
    assert [e.index for e in node.endpoints] == [0, 1, 2, 3]
    assert len({e.internal_ip for e in node.endpoints}) == 4
    # Host keys: each member's guest attributes, by worker id.
    keys = await cloud.host_keys(P, ZONE, "iron-0")
    assert sorted(keys) == [0, 1, 2, 3]
    assert all(pairs for pairs in keys.values())
    assert len({tuple(pairs) for pairs in keys.values()}) == 4  # four hosts, four keys
    log = await control.requests()
    [insert] = [r for r in log if r["method"] == "POST" and r["path"].endswith("Managers")]
    assert insert["query"]["requestId"]
    # A second slice of the same spec reuses the policy and the template.
    await finished(cloud, await cloud.create(P, ZONE, "iron-1", shape(**SLICE)))
    log = await control.requests()
    assert len([r for r in log if r["path"].endswith("/instanceTemplates")
                and r["method"] == "POST"]) == 1  # fmt: skip
    assert len([r for r in log if r["path"].endswith("/resourcePolicies")
                and r["method"] == "POST"]) == 1  # fmt: skip


@pytest.mark.parametrize(
    "emulator_options",
    [{**FAST, "compute_mig_worker_order": "shuffled", "compute_worker_id_source": source}
     for source in ("agent-worker-number", "tpu-env")],
)  # fmt: skip
async def test_worker_order_is_the_tpu_worker_id_not_the_name_order(
    cloud: ComputeCloud, emulator_options: dict[str, Any]
) -> None:
    await finished(cloud, await cloud.create(P, ZONE, "iron-0", shape(**SLICE)))
    node = await observe_until(cloud, StateClass.USABLE)
    assert node.state == "RUNNING"
    listed = await cloud.client.list_instances(P, ZONE)
    ip_to_worker = {i["networkInterfaces"][0]["networkIP"]: worker_id(i) for i in listed}
    assert [ip_to_worker[e.internal_ip] for e in node.endpoints] == [0, 1, 2, 3]


async def test_an_individual_stockout_is_capacity(cloud: ComputeCloud, control: Control) -> None:
    await control.capacity(2)
    op = await cloud.create(P, ZONE, "iron-0", shape(**SLICE))
    done = await finished(cloud, op)
    assert done.error is not None
    assert done.error.kind is ErrorKind.CAPACITY
    node = await observe_one(cloud)  # still listed: the planner deletes it
    assert node.state_class is StateClass.CREATING
    gone = await cloud.delete(P, ZONE, "iron-0")
    assert (await finished(cloud, gone)).error is None
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.nodes == ()


async def test_a_bulk_stockout_is_capacity(cloud: ComputeCloud, control: Control) -> None:
    await control.capacity(2)
    reserved = shape(**SLICE, capacity=CapacityKind.RESERVED, reservation_bound=True)
    op = await cloud.create(P, ZONE, "iron-0", reserved, reservation="r1")
    done = await finished(cloud, op)
    assert done.error is not None
    assert done.error.kind is ErrorKind.CAPACITY
    node = await observe_one(cloud)
    assert node.state_class is StateClass.WAITING  # nothing made until all can be


async def test_a_plain_reserved_slice_is_individual_and_the_emulator_refuses_it_in_bulk(
    cloud: ComputeCloud,
) -> None:
    """Issue 39: "Bulk mode in MIGs is only supported with instance templates that specify
    either a reservation-bound or flex-start provisioning model" (compute/docs/
    instance-groups/bulk-create-instances-in-mig). The reserved slice before the fix was BULK
    with a STANDARD template: refused."""
    reserved = shape(**SLICE, capacity=CapacityKind.RESERVED)
    await finished(cloud, await cloud.create(P, ZONE, "iron-0", reserved, reservation="r1"))
    [group] = await cloud.client.list_migs(P, ZONE)
    assert group["targetSizePolicy"]["mode"] == "INDIVIDUAL"
    body = {**group, "name": "iron-1", "targetSizePolicy": {"mode": "BULK"}}
    body = {k: body[k] for k in ("name", "instanceTemplate", "baseInstanceName", "targetSize",
                                 "targetSizePolicy", "resourcePolicies")}  # fmt: skip
    with pytest.raises(ApiError, match="reservation-bound or flex-start") as caught:
        await cloud.client.insert_mig(P, ZONE, body)
    assert caught.value.kind is ErrorKind.INVALID


async def test_a_preempted_member_makes_the_slice_dead_and_its_record_the_slices(
    cloud: ComputeCloud, control: Control
) -> None:
    await finished(cloud, await cloud.create(P, ZONE, "iron-0", shape(**SLICE)))
    await observe_until(cloud, StateClass.USABLE)
    await control.instance("iron-0-w-002", "preempt")
    node = await observe_until(cloud, StateClass.DEAD)
    assert node.name == "iron-0"
    records = await cloud.preemptions(P, ZONE, ["iron-0"])
    assert [r.name for r in records] == ["iron-0"]


async def test_delete_and_sweep_leave_nothing(cloud: ComputeCloud, control: Control) -> None:
    await finished(cloud, await cloud.create(P, ZONE, "iron-0", shape(**SLICE)))
    await observe_until(cloud, StateClass.USABLE)
    assert await cloud.sweep(P, ZONE) == ()  # in use
    op = await cloud.delete(P, ZONE, "iron-0")
    assert (await finished(cloud, op)).error is None
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.nodes == ()
    swept = await cloud.sweep(P, ZONE)
    assert len(swept) == 2
    assert policy_name(OWNER, "2x2x4") in swept
    assert await cloud.client.list_templates(P) == []
    assert await cloud.client.list_policies(P, "us-central1") == []
    # A delete of a name never observed tries the instance, then the MIG: gone either way.
    fresh = ComputeCloud(cloud.client, owner=OWNER)
    with pytest.raises(NotFoundError):
        await fresh.delete(P, ZONE, "iron-9")


async def test_another_owners_slice_is_not_ours_and_its_members_are_no_nodes(
    cloud: ComputeCloud,
) -> None:
    theirs = ComputeCloud(cloud.client, owner="someone-else")
    op = await theirs.create(P, ZONE, "iron-0", shape(owner="someone-else", **SLICE))
    await finished(theirs, op)
    await observe_until_theirs(theirs)
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.ok, observation.error_message
    assert observation.nodes == ()
    # Their workload policy is theirs: another name, and our sweep leaves it and the template.
    assert policy_name("someone-else", "2x2x4") != policy_name(OWNER, "2x2x4")
    await finished(theirs, await theirs.delete(P, ZONE, "iron-0"))
    assert await cloud.sweep(P, ZONE) == ()
    assert len(await theirs.sweep(P, ZONE)) == 2


async def observe_until_theirs(theirs: ComputeCloud) -> None:
    node = await observe_until(theirs, StateClass.USABLE)
    assert node.owner == "someone-else"


async def test_a_workload_policy_of_our_name_with_another_topology_is_refused(
    cloud: ComputeCloud,
) -> None:
    body = shared.policy_body(OWNER, "2x2x4")
    body["workloadPolicy"]["acceleratorTopology"] = "2x2x2"
    await cloud.client.insert_policy(P, "us-central1", body)
    with pytest.raises(ApiError) as caught:
        await cloud.create(P, ZONE, "iron-0", shape(**SLICE))
    assert caught.value.kind is ErrorKind.INVALID
    assert await cloud.client.list_migs(P, ZONE) == []  # no MIG on a policy not ours to use


@pytest.mark.parametrize(
    "emulator_options", [{**FAST, "compute_mig_on_member_loss": "recreate_member"}]
)
async def test_a_member_the_mig_recreates_makes_the_slice_dead_for_good(
    cloud: ComputeCloud, control: Control, emulator_options: dict[str, Any]
) -> None:
    await finished(cloud, await cloud.create(P, ZONE, "iron-0", shape(**SLICE)))
    await observe_until(cloud, StateClass.USABLE)
    await control.instance("iron-0-w-003", "preempt")
    await observe_until(cloud, StateClass.DEAD)
    members = await cloud.client.list_managed_instances(P, ZONE, "iron-0")
    for _ in range(300):  # the MIG makes the member again; the slice stays dead
        members = await cloud.client.list_managed_instances(P, ZONE, "iron-0")
        if all(m.get("instanceStatus") == "RUNNING" for m in members):
            break
        await asyncio.sleep(0.02)
    assert all(m.get("instanceStatus") == "RUNNING" for m in members)
    node = await observe_one(cloud)
    assert (node.state, node.state_class) == ("SLICE_RECREATED", StateClass.DEAD)


async def test_a_flex_start_slice_waits_for_capacity_then_runs_until_its_planned_end(
    cloud: ComputeCloud, control: Control
) -> None:
    await control.capacity(0)
    flex = shape(**SLICE, capacity=CapacityKind.FLEX_START, max_run_duration_s=3600)
    op = await cloud.create(P, ZONE, "iron-0", flex)
    for _ in range(20):  # a stockout is no failure: flex-start waits by design
        op = await cloud.poll(op.name)
        assert op.error is None, op.error
        await asyncio.sleep(0.02)
    node = await observe_until(cloud, StateClass.WAITING)
    assert node.stuck_rule == "queued"
    await control.capacity(4)
    node = await observe_until(cloud, StateClass.USABLE)
    assert len(node.endpoints) == 4
    assert node.run_ends_at is not None
    assert node.run_ends_at > node.create_time
    template = (await cloud.client.list_templates(P))[0]["properties"]
    assert template["scheduling"]["provisioningModel"] == "FLEX_START"
    [group] = await cloud.client.list_migs(P, ZONE)
    assert group["targetSizePolicy"]["mode"] == "BULK"
