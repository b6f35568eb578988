"""Multi-host slices as managed instance groups, driven by Google's own clients (google-cloud-
compute, REST): workload policies and instance templates (immutable, 409 on a second insert,
400 resourceInUseByAnotherResource while a MIG uses them), a zonal MIG whose members are
instances of the book with their worker ids, the topology check, requestId, INDIVIDUAL and BULK
stockouts where Google shows them, deletion, and faults and rate quotas on the MIG paths.
Member loss, resize, regional MIGs and the options: test_mig_behaviour.py; SSH and metadata of
members: test_mig_hosts.py."""

from __future__ import annotations

import uuid

import pytest
from compute_support import MT, P, Z, call
from google.api_core import exceptions as gexc
from google.cloud import compute_v1
from mig_support import (
    MIGS,
    R,
    all_running,
    capacity,
    make_mig,
    make_policy,
    make_template,
    managed,
    mig_body,
    official,
    policy_body,
    template_body,
    until,
)

from tpucared_emulator.clock import ManualClock
from tpucared_emulator.projects import project_number

API = "https://www.googleapis.com/compute/v1"
GROUP = f"projects/{P}/zones/{Z}/instanceGroupManagers/iron-0"


async def test_policies_and_templates_are_made_read_listed_and_immutable() -> None:
    async with official() as c:
        await make_policy(c)
        policy = await call(c.policies.get, project=P, region=R, resource_policy="wp-2x2x4")
        assert policy.workload_policy.accelerator_topology == "2x2x4"
        assert policy.workload_policy.type_ == "HIGH_THROUGHPUT"
        assert policy.self_link == f"{API}/projects/{P}/regions/{R}/resourcePolicies/wp-2x2x4"
        with pytest.raises(gexc.Conflict):  # the same name again, even another topology
            await make_policy(c, topology="2x2x2")
        listed = await call(c.policies.list, project=P, region=R)
        assert [p.name for p in listed] == ["wp-2x2x4"]
        code, payload = await c.http(
            "POST", f"/compute/v1/projects/{P}/regions/{R}/resourcePolicies",
            {"name": "bad", "workloadPolicy": {"type": "HIGH_THROUGHPUT",
                                               "acceleratorTopology": "2by2"}},
        )  # fmt: skip
        assert code == 400
        assert payload["error"]["errors"][0]["reason"] == "invalid"

        await make_template(c)
        template = await call(c.templates.get, project=P, instance_template="tpl")
        assert template.properties.machine_type == MT
        assert template.properties.scheduling.provisioning_model == "SPOT"
        assert template.self_link == f"{API}/projects/{P}/global/instanceTemplates/tpl"
        assert [t.name for t in await call(c.templates.list, project=P)] == ["tpl"]
        with pytest.raises(gexc.Conflict):
            await make_template(c)
        broken = template_body("no-disks")
        del broken["properties"]["disks"]
        code, payload = await c.http(
            "POST", f"/compute/v1/projects/{P}/global/instanceTemplates", broken
        )
        assert code == 400
        assert payload["error"]["message"] == "Required field 'resource.disks' not specified"
        # Regional templates too.
        regional = f"/compute/v1/projects/{P}/regions/{R}/instanceTemplates"
        op = await c.http.ok("POST", regional, template_body("tpl-r"))
        assert op["status"] == "DONE"
        assert op["region"].endswith(f"/regions/{R}")
        assert (await c.http.ok("GET", f"{regional}/tpl-r"))["region"].endswith(R)

        operation = await call(c.templates.delete, project=P, instance_template="tpl")
        await call(operation.result, timeout=10)
        with pytest.raises(gexc.NotFound):
            await call(c.templates.get, project=P, instance_template="tpl")
        operation = await call(c.policies.delete, project=P, region=R, resource_policy="wp-2x2x4")
        await call(operation.result, timeout=10)
        with pytest.raises(gexc.NotFound):
            await call(c.policies.get, project=P, region=R, resource_policy="wp-2x2x4")


async def test_a_zonal_mig_is_done_at_once_and_its_members_are_instances_with_worker_ids() -> None:
    async with official() as c:
        await make_policy(c)
        await make_template(c)
        operation = await make_mig(c)
        assert operation.operation_type == "insert"
        assert operation.target_link == f"{API}/{GROUP}"
        members = await all_running(c, 4)
        names = [m["name"] for m in members]
        assert names == [f"iron-0-w-00{i}" for i in range(1, 5)]
        assert all(m["currentAction"] == "NONE" and m["id"] for m in members)

        mig = await call(c.migs.get, project=P, zone=Z, instance_group_manager="iron-0")
        assert mig.target_size == 4
        assert mig.description == "slot 0 of iron"
        assert mig.self_link == f"{API}/{GROUP}"
        assert mig.creation_timestamp
        assert mig.status.is_stable
        assert mig.status.current_instance_statuses.running == 4
        assert mig.current_actions.none == 4
        policy = mig.resource_policies.workload_policy
        assert policy.endswith(f"/regions/{R}/resourcePolicies/wp-2x2x4")
        assert mig.instance_lifecycle_policy.default_action_on_failure == "DO_NOTHING"
        assert [m.name for m in await call(c.migs.list, project=P, zone=Z)] == ["iron-0"]

        # Every member is an instance of the zone, with the template's properties and its id.
        listed = {vm.name: vm for vm in await call(c.instances.list, project=P, zone=Z)}
        assert sorted(listed) == names
        for worker, name in enumerate(names):
            vm = listed[name]
            assert vm.status == "RUNNING"
            assert vm.labels["tpucared-fleet"] == "iron"
            assert vm.scheduling.instance_termination_action == "STOP"
            assert vm.machine_type.endswith(f"/zones/{Z}/machineTypes/{MT}")
            metadata = {i.key: i.value for i in vm.metadata.items}
            # Google writes the project's number there, not the id (issue 39).
            number = project_number(P)
            assert (
                metadata["created-by"]
                == f"projects/{number}/zones/{Z}/instanceGroupManagers/iron-0"
            )
            assert number.isdigit()
            assert len(number) == 12
            assert metadata["agent-worker-number"] == str(worker)
            assert f"WORKER_ID: '{worker}'" in metadata["tpu-env"]
            assert metadata["enable-guest-attributes"] == "TRUE"
        # The control API sees them as it sees any instance: workers with addresses.
        control = await c.http.ok("GET", "/_emulator/v1/instances")
        assert sorted(i["name"] for i in control["instances"]) == names


async def test_what_a_mig_insert_refuses() -> None:
    async with official() as c:
        await make_template(c)
        with pytest.raises(gexc.NotFound):  # no such workload policy
            await make_mig(c)
        await make_policy(c)
        with pytest.raises(gexc.BadRequest) as wrong:  # 2x2x4 of tpu7x is 4 VMs
            await make_mig(c, size=2)
        assert "2x2x4" in str(wrong.value)
        assert "needs 4" in str(wrong.value)
        await make_policy(c, name="wp-3d", topology="3x3x3")
        with pytest.raises(gexc.BadRequest):  # not a topology of this machine type
            await make_mig(c, policy="wp-3d", size=27)
        with pytest.raises(gexc.NotFound):
            await make_mig(c, template="nope")
        for bad in ({"baseInstanceName": "Iron"}, {"targetSizePolicy": {"mode": "SOME"}},
                    {"instanceLifecyclePolicy": {"defaultActionOnFailure": "PANIC"}}):  # fmt: skip
            code, payload = await c.http("POST", MIGS, {**mig_body(), **bad})
            assert code == 400, payload
        await make_mig(c)
        with pytest.raises(gexc.Conflict):
            await make_mig(c)
        # Neither the template nor the policy goes while the group uses them.
        for path in (
            f"/compute/v1/projects/{P}/global/instanceTemplates/tpl",
            f"/compute/v1/projects/{P}/regions/{R}/resourcePolicies/wp-2x2x4",
        ):
            code, payload = await c.http("DELETE", path)
            assert code == 400
            assert payload["error"]["errors"][0]["reason"] == "resourceInUseByAnotherResource"
            assert GROUP in payload["error"]["message"]


async def test_a_mig_insert_with_a_request_id_is_done_once() -> None:
    async with official() as c:
        await make_policy(c)
        await make_template(c)
        rid = str(uuid.uuid4())
        first = await c.http.ok("POST", MIGS, mig_body(), requestId=rid)
        again = await c.http.ok("POST", MIGS, mig_body(), requestId=rid)
        assert again["name"] == first["name"]
        assert again["clientOperationId"] == rid
        assert first["status"] == "DONE"
        code, _ = await c.http("POST", MIGS, mig_body())  # without it: the name exists
        assert code == 409
        policy_rid = str(uuid.uuid4())
        path = f"/compute/v1/projects/{P}/regions/{R}/resourcePolicies"
        one = await c.http.ok("POST", path, policy_body("wp-x"), requestId=policy_rid)
        two = await c.http.ok("POST", path, policy_body("wp-x"), requestId=policy_rid)
        assert one["name"] == two["name"]
        ops = f"/compute/v1/projects/{P}/regions/{R}/operations"
        got = await c.http.ok("GET", f"{ops}/{one['name']}")
        assert got["status"] == "DONE"
        assert got["region"].endswith(f"/regions/{R}")


async def test_an_individual_mig_shows_a_stockout_per_member_and_retries() -> None:
    async with official() as c:
        await make_policy(c)
        await make_template(c)
        await capacity(c, 2)
        await make_mig(c)

        async def two_failing() -> list[dict[str, object]] | None:
            members = await managed(c)
            failing = [m for m in members if "lastAttempt" in m and "instanceStatus" not in m]
            running = [m for m in members if m.get("instanceStatus") == "RUNNING"]
            return failing if len(failing) == 2 and len(running) == 2 else None

        failing = await until(two_failing, "2 RUNNING, 2 failing")
        for member in failing:
            assert member["currentAction"] == "CREATING"
            [error] = member["lastAttempt"]["errors"]["errors"]  # type: ignore[index]
            assert error["code"] == "ZONE_RESOURCE_POOL_EXHAUSTED"
            assert "currently unavailable in the us-central1-c zone" in error["message"]
        mig = await c.http.ok("GET", f"{MIGS}/iron-0")
        assert not mig["status"]["isStable"]
        assert mig["currentActions"]["creating"] == 2
        await capacity(c, 4)  # the group tries again on its own
        members = await all_running(c, 4)
        assert not any("lastAttempt" in m for m in members)
        assert (await c.http.ok("GET", f"{MIGS}/iron-0"))["status"]["isStable"]


async def test_a_bulk_mig_creates_nothing_until_all_fit_then_everything() -> None:
    async with official() as c:
        await make_policy(c)
        await make_template(c, bound=True)
        await capacity(c, 3)
        operation = await make_mig(c, mode="BULK")
        assert operation.done()
        assert not operation.error_code

        async def checked() -> compute_v1.InstanceGroupManager | None:
            mig = await call(c.migs.get, project=P, zone=Z, instance_group_manager="iron-0")
            bulk = mig.status.bulk_instance_operation
            return mig if bulk.in_progress and bulk.last_progress_check.error.errors else None

        mig = await until(checked, "a progress check with its error")
        check = mig.status.bulk_instance_operation.last_progress_check
        assert check.timestamp
        assert check.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
        assert not mig.status.is_stable
        assert await managed(c) == []
        assert list(await call(c.instances.list, project=P, zone=Z)) == []
        await capacity(c, 4)
        await all_running(c, 4)
        mig = await call(c.migs.get, project=P, zone=Z, instance_group_manager="iron-0")
        assert not mig.status.bulk_instance_operation.in_progress
        assert mig.status.is_stable


async def test_deleting_a_mig_deletes_its_members_then_the_group() -> None:
    async with official() as c:
        await make_policy(c)
        await make_template(c)
        await make_mig(c)
        await all_running(c, 4)
        operation = await call(c.migs.delete, project=P, zone=Z, instance_group_manager="iron-0")
        assert operation.status != compute_v1.Operation.Status.DONE
        statuses = {vm.status for vm in await call(c.instances.list, project=P, zone=Z)}
        assert statuses == {"STOPPING"}
        assert {m["currentAction"] for m in await managed(c)} == {"DELETING"}
        await call(operation.result, timeout=10)
        assert list(await call(c.instances.list, project=P, zone=Z)) == []
        with pytest.raises(gexc.NotFound):
            await call(c.migs.get, project=P, zone=Z, instance_group_manager="iron-0")
        # Nothing uses the template now.
        done = await call(c.templates.delete, project=P, instance_template="tpl")
        await call(done.result, timeout=10)


async def test_faults_and_rate_quotas_cover_the_mig_paths() -> None:
    clock = ManualClock(start=1_800_000_030.0)  # half a minute in: no refill during the test
    # listManagedInstances counts against default_per_region (research §6.4), as writes do.
    async with official(compute_rate_limits={"default_per_region": 4}, clock=clock) as c:
        await make_policy(c)  # regions/us-central1: one of us-central1's four
        await make_template(c, bound=True)  # global: not us-central1's
        await make_mig(c, mode="BULK")  # two
        await c.http.ok("POST", f"{MIGS}/iron-0/listManagedInstances")  # three
        await c.http.ok("GET", f"{MIGS}/iron-0")  # a read
        await c.http.ok("POST", f"{MIGS}/iron-0/listManagedInstances")  # four
        code, payload = await c.http("POST", f"{MIGS}/iron-0/listManagedInstances")
        assert code == 403
        assert payload["error"]["errors"][0]["reason"] == "rateLimitExceeded"
        faults = {"paths": ["instanceGroupManagers"], "script": [{"kind": "permission"}]}
        await c.http.ok("PUT", "/_emulator/v1/faults", faults)
        code, payload = await c.http("GET", f"{MIGS}/iron-0")
        assert code == 403
        assert "compute.instanceGroupManagers.get" in payload["error"]["message"]
