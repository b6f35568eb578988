"""What a MIG does on its own, and its options (docs/research/compute-engine.md §9 rows 11-14):
a member preempted, terminated or vanished is left (DO_NOTHING with compute_mig_on_member_loss
"leave"), or created again under its name (REPAIR, or "recreate_member"); resize refused unless
compute_mig_resize_supported; a regional BULK MIG with ANY_SINGLE_ZONE; the worker id keys and
order; a flex-start template's BULK MIG waits like any BULK MIG; groups, templates and
policies in the state file; the member-loss option on the command line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from compute_support import MT, P, Z, call
from google.api_core import exceptions as gexc
from google.cloud import compute_v1
from mig_support import (
    MIGS,
    RMIGS,
    Clients,
    R,
    all_running,
    capacity,
    insert,
    make_mig,
    make_policy,
    make_template,
    managed,
    mig_body,
    official,
    until,
)

from tpucared_emulator.server import build_parser

CONTROL = f"/_emulator/v1/projects/{P}/zones/{Z}/instances"


async def slice_of(c: Clients, *, action: str = "STOP", **mig: object) -> list[dict[str, object]]:
    await make_policy(c)
    await make_template(c, action=action)
    await make_mig(c, **mig)
    return await all_running(c, 4)


async def member(c: Clients, name: str) -> dict[str, object] | None:
    return next((m for m in await managed(c) if m["name"] == name), None)


async def test_do_nothing_leaves_a_preempted_member_terminated_or_gone() -> None:
    async with official() as c:
        await slice_of(c)
        await c.http.ok("POST", f"{CONTROL}/iron-0-w-002:preempt")

        async def terminated() -> bool:
            found = await member(c, "iron-0-w-002")
            return found is not None and found.get("instanceStatus") == "TERMINATED"

        await until(terminated, "iron-0-w-002 TERMINATED")
        await c.http.ok("POST", f"{CONTROL}/iron-0-w-003:terminate")
        await c.http.ok("POST", f"{CONTROL}/iron-0-w-004:vanish")
        await until(lambda: member(c, "iron-0-w-004"), "the vanished member listed")
        await asyncio.sleep(0.5)  # the group does nothing about them (it retries every 0.1 s)
        members = {m["name"]: m for m in await managed(c)}
        assert members["iron-0-w-001"]["instanceStatus"] == "RUNNING"
        assert members["iron-0-w-002"]["instanceStatus"] == "TERMINATED"
        assert members["iron-0-w-003"]["instanceStatus"] == "TERMINATED"
        assert "instanceStatus" not in members["iron-0-w-004"]  # gone: empty, still listed
        assert {m["currentAction"] for m in members.values()} == {"NONE"}
        mig = await c.http.ok("GET", f"{MIGS}/iron-0")
        assert mig["status"]["currentInstanceStatuses"] == {
            "running": 1, "terminated": 2, "nonExistent": 1
        }  # fmt: skip
        vm = await c.http.ok("GET", f"/compute/v1/projects/{P}/zones/{Z}/instances/iron-0-w-002")
        assert vm["status"] == "TERMINATED"


async def test_do_nothing_leaves_a_delete_preempted_member_gone() -> None:
    async with official() as c:
        await slice_of(c, action="DELETE")
        await c.http.ok("POST", f"{CONTROL}/iron-0-w-001:preempt")

        async def gone() -> bool:
            found = await member(c, "iron-0-w-001")
            return found is not None and "instanceStatus" not in found

        await until(gone, "iron-0-w-001 gone")
        found = await member(c, "iron-0-w-001")
        assert found is not None
        assert found["currentAction"] == "NONE"
        assert "id" not in found
        names = [vm.name for vm in await call(c.instances.list, project=P, zone=Z)]
        assert names == ["iron-0-w-002", "iron-0-w-003", "iron-0-w-004"]


@pytest.mark.parametrize(
    ("on_failure", "loss"), [("REPAIR", "leave"), ("DO_NOTHING", "recreate_member")]
)
async def test_repair_or_recreate_member_creates_a_lost_member_again(
    on_failure: str, loss: str
) -> None:
    async with official(compute_mig_on_member_loss=loss) as c:
        before = await slice_of(c, on_failure=on_failure)
        ids = {m["name"]: m["id"] for m in before}
        await c.http.ok("POST", f"{CONTROL}/iron-0-w-002:preempt")  # STOP: TERMINATED first
        await c.http.ok("POST", f"{CONTROL}/iron-0-w-003:vanish")

        async def renewed() -> list[dict[str, object]] | None:
            members = await managed(c)
            fresh = {
                m["name"]: m.get("id") for m in members if m.get("instanceStatus") == "RUNNING"
            }
            ok = len(fresh) == 4 and all(
                fresh[n] != ids[n] for n in ("iron-0-w-002", "iron-0-w-003")
            )
            return members if ok else None

        members = await until(renewed, "both members created again, RUNNING")
        assert [m["name"] for m in members] == [f"iron-0-w-00{i}" for i in range(1, 5)]
        assert {m["name"]: m["id"] for m in members}["iron-0-w-001"] == ids["iron-0-w-001"]
        vm = await call(c.instances.get, project=P, zone=Z, instance="iron-0-w-002")
        metadata = {i.key: i.value for i in vm.metadata.items}
        assert metadata["agent-worker-number"] == "1"  # the same worker as before


async def test_resize_is_refused_unless_the_option_allows_it() -> None:
    async with official() as c:
        await slice_of(c)
        with pytest.raises(gexc.BadRequest) as refused:
            await call(c.migs.resize, project=P, zone=Z, instance_group_manager="iron-0", size=0)
        assert "UNSUPPORTED_OPERATION" in str(refused.value)
    async with official(compute_mig_resize_supported=True) as c:
        before = await slice_of(c)
        operation = await call(
            c.migs.resize, project=P, zone=Z, instance_group_manager="iron-0", size=0
        )
        await call(operation.result, timeout=10)
        await until(lambda: _empty(c), "no member left")
        assert list(await call(c.instances.list, project=P, zone=Z)) == []
        operation = await call(
            c.migs.resize, project=P, zone=Z, instance_group_manager="iron-0", size=4
        )
        after = await all_running(c, 4)
        assert {m["name"] for m in after}.isdisjoint({m["name"] for m in before})
        assert (await c.http.ok("GET", f"{MIGS}/iron-0"))["targetSize"] == 4


async def _empty(c: Clients) -> bool:
    return await managed(c) == []


async def test_a_regional_bulk_mig_puts_every_member_in_one_zone_with_room() -> None:
    async with official() as c:
        await make_policy(c)
        await make_template(c, bound=True)
        await capacity(c, 0, zone="us-central1-a")
        body = mig_body(mode="BULK", distributionPolicy={"targetShape": "ANY_SINGLE_ZONE",
                        "zones": [{"zone": f"projects/{P}/zones/us-central1-a"},
                                  {"zone": f"projects/{P}/zones/{Z}"}]})  # fmt: skip
        operation = await insert(c.regional.insert, compute_v1.InstanceGroupManager,
                                 "instance_group_manager_resource", project=P, region=R,
                                 body=body)  # fmt: skip
        assert operation.done()

        async def running() -> list[dict[str, object]] | None:
            payload = await c.http.ok("POST", f"{RMIGS}/iron-0/listManagedInstances")
            members = payload.get("managedInstances", [])
            ok = len(members) == 4 and all(m.get("instanceStatus") == "RUNNING" for m in members)
            return list(members) if ok else None

        members = await until(running, "4 members RUNNING")
        assert all(f"/zones/{Z}/instances/" in str(m["instance"]) for m in members)
        mig = await call(c.regional.get, project=P, region=R, instance_group_manager="iron-0")
        assert mig.region.endswith(f"/regions/{R}")
        assert mig.distribution_policy.target_shape == "ANY_SINGLE_ZONE"
        assert mig.status.is_stable
        wrong = mig_body("iron-1", distributionPolicy={"targetShape": "EVEN"})
        code, _ = await c.http("POST", RMIGS, wrong)
        assert code == 400
        operation = await call(
            c.regional.delete, project=P, region=R, instance_group_manager="iron-0"
        )
        await call(operation.result, timeout=10)
        assert list(await call(c.instances.list, project=P, zone=Z)) == []


async def test_worker_ids_shuffled_and_in_tpu_env_only() -> None:
    options = {"compute_mig_worker_order": "shuffled", "compute_worker_id_source": "tpu-env"}
    async with official(seed=7, **options) as c:
        await make_policy(c, name="wp-8", topology="2x4x4")
        await make_template(c)
        await make_mig(c, policy="wp-8", size=8)
        await all_running(c, 8)
        ids = []
        for vm in sorted(await call(c.instances.list, project=P, zone=Z), key=lambda v: v.name):
            metadata = {i.key: i.value for i in vm.metadata.items}
            assert "agent-worker-number" not in metadata
            [line] = [x for x in metadata["tpu-env"].splitlines() if x.startswith("WORKER_ID")]
            ids.append(int(line.split("'")[1]))
            assert "TOPOLOGY: '2x4x4'" in metadata["tpu-env"]
        assert sorted(ids) == list(range(8))
        assert ids != list(range(8))  # seed 7 does not give the identity


async def test_a_flex_start_bulk_mig_waits_for_capacity_like_any_bulk_mig() -> None:
    async with official() as c:
        await make_policy(c)
        await make_template(c, action="DELETE", provisioningModel="FLEX_START",
                            maxRunDuration={"seconds": "3600"})  # fmt: skip
        await capacity(c, 0)
        await make_mig(c, mode="BULK")
        mig = await until(lambda: _checked(c), "a bulk progress check")
        assert mig["status"]["bulkInstanceOperation"]["inProgress"]
        assert await managed(c) == []
        await capacity(c, 4)
        await all_running(c, 4)
        vm = await call(c.instances.get, project=P, zone=Z, instance="iron-0-w-001")
        assert vm.scheduling.provisioning_model == "FLEX_START"
        assert vm.machine_type.endswith(MT)


async def _checked(c: Clients) -> dict[str, object] | None:
    mig = await c.http.ok("GET", f"{MIGS}/iron-0")
    check = mig["status"]["bulkInstanceOperation"].get("lastProgressCheck", {})
    return dict(mig) if "error" in check else None


def test_the_member_loss_option_is_on_the_command_line() -> None:
    assert build_parser().parse_args([]).compute_mig_on_member_loss == "leave"
    args = build_parser().parse_args(["--compute-mig-on-member-loss", "recreate_member"])
    assert args.compute_mig_on_member_loss == "recreate_member"


async def test_groups_templates_and_policies_survive_a_restart_with_a_state_file(
    tmp_path: Path,
) -> None:
    state_file = str(tmp_path / "emulator.json")
    async with official(state_file=state_file) as c:
        before = await slice_of(c)
    async with official(state_file=state_file) as c:
        members = await managed(c)
        assert [(m["name"], m["id"]) for m in members] == [(m["name"], m["id"]) for m in before]
        mig = await call(c.migs.get, project=P, zone=Z, instance_group_manager="iron-0")
        assert mig.status.is_stable
        code, _ = await c.http("DELETE", f"/compute/v1/projects/{P}/global/instanceTemplates/tpl")
        assert code == 400  # still in use
        await c.http.ok("POST", f"{CONTROL}/iron-0-w-001:terminate")  # still its member
        operation = await call(c.migs.delete, project=P, zone=Z, instance_group_manager="iron-0")
        await call(operation.result, timeout=10)
        assert list(await call(c.instances.list, project=P, zone=Z)) == []
        await make_mig(c, name="iron-1")  # the template and the policy came back too
        await all_running(c, 4, name="iron-1")
