"""The control API on Compute Engine instances (preempt with both termination actions, with
and without a notice; terminate; vanish; capacity per machine type; reset), faults and the
request log on the compute paths, and instances surviving an emulator restart (state file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from compute_support import CONTROL, MT, ZONE, P, Z, body, emulator_with, running, wait_status
from emulator_http import Http

from tpucared_emulator import EmulatorServer
from tpucared_emulator.clock import ManualClock

OP = ZONE + "/operations"
PREEMPTED = 'operationType="compute.instances.preempted"'


async def preempted_ops(http: Http, name: str | None = None) -> list[dict[str, Any]]:
    spelled = PREEMPTED
    if name is not None:
        link = f"https://www.googleapis.com/compute/v1/projects/{P}/zones/{Z}/instances/{name}"
        spelled += f' AND targetLink="{link}"'
    return list((await http.ok("GET", OP, filter=spelled)).get("items", []))


async def test_capacity_takes_a_machine_type(http: Http) -> None:
    entry = await http.ok(
        "PUT", "/_emulator/v1/capacity", {"zone": Z, "machine_type": MT, "available": 1}
    )
    assert entry == {"zone": Z, "machine_type": MT, "available": 1, "in_use": 0}
    await running(http, "vm-0")
    capacity = await http.ok("GET", "/_emulator/v1/capacity")
    assert capacity == {"capacity": [{"zone": Z, "machine_type": MT, "available": 1, "in_use": 1}]}
    op = await http.ok("POST", f"{ZONE}/instances", body("vm-1"))
    assert "error" in await http.ok("POST", f"{OP}/{op['name']}/wait")
    await http.ok("DELETE", f"{ZONE}/instances/vm-0")
    await wait_status(http, "vm-0", None)
    await running(http, "vm-1")  # the capacity came back with the delete

    for bad in ({"zone": Z, "machine_type": "v4-8", "available": 1},
                {"zone": Z, "accelerator_type": MT, "available": 1},
                {"zone": "mars-1a", "machine_type": MT, "available": 1}):  # fmt: skip
        assert (await http("PUT", "/_emulator/v1/capacity", bad))[0] == 400


async def test_a_preempted_delete_vm_vanishes_with_its_operation(http: Http) -> None:
    await running(http, "vm-0", action="DELETE")
    seen = await http.ok("POST", f"{CONTROL}/vm-0:preempt")
    assert seen["termination_action"] == "DELETE"
    assert (await http.ok("GET", f"{ZONE}/instances/vm-0"))["status"] == "STOPPING"
    assert await wait_status(http, "vm-0", None) is None
    [op] = await preempted_ops(http, "vm-0")
    assert (op["user"], op["status"], op["statusMessage"]) == (
        "system", "DONE", "Instance was preempted."
    )  # fmt: skip
    assert [o["operationType"] for o in (await http.ok("GET", OP))["items"]] == [
        "insert", "compute.instances.preempted"
    ]  # fmt: skip


async def test_a_notice_first_then_the_preemption(http: Http) -> None:
    await running(http, "vm-0")
    seen = await http.ok("POST", f"{CONTROL}/vm-0:preempt", {"notice_seconds": 0.3})
    assert seen["notice_at"] is not None
    assert (await http.ok("GET", f"{ZONE}/instances/vm-0"))["status"] == "RUNNING"
    assert await preempted_ops(http) == []
    await wait_status(http, "vm-0", "TERMINATED")
    assert len(await preempted_ops(http, "vm-0")) == 1
    assert (await http("POST", f"{CONTROL}/vm-0:preempt", {"notice_seconds": -1}))[0] == 400


async def test_terminate_and_vanish_record_no_preemption(http: Http) -> None:
    await running(http, "vm-0")
    await running(http, "vm-1")
    assert (await http.ok("POST", f"{CONTROL}/vm-0:terminate"))["status"] == "TERMINATED"
    assert await http.ok("POST", f"{CONTROL}/vm-1:vanish") == {}
    assert (await http("GET", f"{ZONE}/instances/vm-1"))[0] == 404
    assert await preempted_ops(http) == []
    await http.ok("DELETE", f"{ZONE}/instances/vm-0")  # a TERMINATED VM is deleted as usual
    await wait_status(http, "vm-0", None)
    # Vanished while provisioning: its insert fails.
    op = await http.ok("POST", f"{ZONE}/instances", body("vm-2"))
    await http.ok("POST", f"{CONTROL}/vm-2:vanish")
    assert (await http.ok("GET", f"{OP}/{op['name']}"))["error"]["errors"]
    assert (await http("POST", f"{CONTROL}/vm-0:explode"))[0] == 400
    assert (await http("POST", f"{CONTROL}/gone:preempt"))[0] == 404


async def test_the_preemption_records_are_options() -> None:
    async with emulator_with(compute_preempt_records="preempted_plus_delete") as http:
        await running(http, "vm-0", action="DELETE")
        await http.ok("POST", f"{CONTROL}/vm-0:preempt")
        ops = (await http.ok("GET", OP, filter='user = "system"'))["items"]
        assert sorted(o["operationType"] for o in ops) == ["compute.instances.preempted", "delete"]
    async with emulator_with(compute_preempt_op_missing_probability=1.0) as http:
        await running(http, "vm-0")
        await http.ok("POST", f"{CONTROL}/vm-0:preempt")
        await wait_status(http, "vm-0", "TERMINATED")
        assert await preempted_ops(http) == []


async def test_faults_and_the_request_log_cover_the_compute_paths(http: Http) -> None:
    faults = {
        "paths": [f"zones/{Z}/instances"],
        "script": [{"kind": "unavailable"}, {"kind": "rate_limited", "retry_after_s": 2},
                   {"kind": "permission"}, {"kind": "quota"}],
    }  # fmt: skip
    await http.ok("PUT", "/_emulator/v1/faults", faults)
    await http.ok("DELETE", "/_emulator/v1/requests")
    answers = [await http("GET", f"{ZONE}/instances") for _ in range(4)]
    assert [code for code, _ in answers] == [503, 403, 403, 403]
    reasons = [payload["error"]["errors"][0]["reason"] for _, payload in answers]
    assert reasons == ["backendError", "rateLimitExceeded", "forbidden", "quotaExceeded"]
    assert "compute.instances.list" in answers[2][1]["error"]["message"]
    assert (await http("GET", OP))[0] == 200  # another path: not faulted
    assert (await http("GET", f"{ZONE}/instances"))[0] == 200  # the script is used up
    log = await http.ok("GET", "/_emulator/v1/requests")
    assert [(r["path"], r["status"], r["fault"]) for r in log][:2] == [
        (f"{ZONE}/instances", 503, "unavailable"),
        (f"{ZONE}/instances", 403, "rate_limited"),
    ]
    assert [r["path"] for r in log][-2:] == [OP, f"{ZONE}/instances"]


async def test_a_lost_response_still_inserted_and_the_retry_is_idempotent(http: Http) -> None:
    lose = {"methods": ["POST"], "script": [{"kind": "internal", "after": True}]}
    await http.ok("PUT", "/_emulator/v1/faults", lose)
    request_id = "0b7b4c8e-3f3e-4c55-9a57-6a1c1b2d3e4f"
    code, _ = await http("POST", f"{ZONE}/instances", body("vm-0"), requestId=request_id)
    assert code == 500
    op = await http.ok("POST", f"{ZONE}/instances", body("vm-0"), requestId=request_id)
    assert op["operationType"] == "insert"
    [listed] = [o for o in (await http.ok("GET", OP))["items"] if o["operationType"] == "insert"]
    assert listed["name"] == op["name"]


async def test_reset_forgets_the_instances(http: Http) -> None:
    await running(http, "vm-0")
    await http.ok("POST", "/_emulator/v1/reset")
    assert (await http("GET", f"{ZONE}/instances/vm-0"))[0] == 404
    assert await http.ok("GET", "/_emulator/v1/instances") == {"instances": []}
    await running(http, "vm-0")


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**emulator_options, "state_file": str(tmp_path / "state.json")}


async def test_instances_survive_a_restart(emulator: EmulatorServer, http: Http) -> None:
    vm = await running(http, "vm-0")
    await running(http, "vm-1")
    await http.ok("POST", f"{CONTROL}/vm-1:terminate")
    keys = (await http.ok("GET", "/_emulator/v1/instances"))["instances"]
    await emulator.stop()
    await emulator.start()
    http.base = emulator.url
    again = await http.ok("GET", f"{ZONE}/instances/vm-0")
    assert (again["id"], again["status"]) == (vm["id"], "RUNNING")
    assert again["networkInterfaces"][0]["networkIP"] == vm["networkInterfaces"][0]["networkIP"]
    assert (await http.ok("GET", f"{ZONE}/instances/vm-1"))["status"] == "TERMINATED"
    assert (await http.ok("GET", "/_emulator/v1/instances"))["instances"] == keys


async def test_hostile_answers_cover_the_instance_list(http: Http) -> None:
    await running(http, "vm-0")
    script = [
        {"kind": "malformed", "mode": "state", "value": 99},
        {"kind": "malformed", "mode": "duplicate"},
        {"kind": "malformed", "mode": "labels_list"},
        {"kind": "malformed", "mode": "endless_pages"},
        {"kind": "malformed", "mode": "error_envelope"},
    ]
    await http.ok("PUT", "/_emulator/v1/faults", {"script": script})
    path = f"{ZONE}/instances"
    assert [vm["status"] for vm in (await http.ok("GET", path))["items"]] == [99]
    duplicated = (await http.ok("GET", path))["items"]
    assert [(vm["name"], vm["status"]) for vm in duplicated] == [
        ("vm-0", "RUNNING"), ("vm-0", "TERMINATED")
    ]  # fmt: skip
    labels = (await http.ok("GET", path))["items"][0]["labels"]
    assert labels == ["tpucared-fleet=iron", "tpucared-owner=test"]
    assert (await http.ok("GET", path, pageToken="x"))["nextPageToken"]
    code, payload = await http("GET", path)
    assert code == 200
    assert payload["error"]["errors"][0]["reason"] == "backendError"
    log = await http.ok("GET", "/_emulator/v1/requests")
    assert [r["fault"] for r in log[-5:]] == ["malformed"] * 5


async def test_a_chip_quota_fails_inserts_sync_or_in_the_operation() -> None:
    quota = {"region": "us-central1", "family": "tpu7x", "chips": 4}
    async with emulator_with() as http:  # the default: the insert's own 403
        assert (await http.ok("PUT", "/_emulator/v1/quota", quota))["quota"][0]["in_use"] == 0
        await running(http, "vm-0")
        code, payload = await http("POST", f"{ZONE}/instances", body("vm-1"))
        assert code == 403
        error = payload["error"]
        assert (error["errors"][0]["reason"], error["errors"][0]["domain"]) == (
            "quotaExceeded", "usageLimits"
        )  # fmt: skip
        assert (
            error["message"] == "Quota 'TPU7X_CHIPS' exceeded.  Limit: 4.0 in region us-central1."
        )
        await http.ok("POST", f"{CONTROL}/vm-0:terminate")  # a TERMINATED VM holds no chips
        await running(http, "vm-1")
        assert (await http("PUT", "/_emulator/v1/quota", {**quota, "family": "v4"}))[0] == 400
    async with emulator_with(compute_quota_mode="operation") as http:
        await http.ok("PUT", "/_emulator/v1/quota", {**quota, "chips": 0})
        op = await http.ok("POST", f"{ZONE}/instances", body("vm-0"))
        done = await http.ok("POST", f"{OP}/{op['name']}/wait")
        assert done["error"]["errors"][0]["code"] == "QUOTA_EXCEEDED"
        assert (done["httpErrorStatusCode"], done["httpErrorMessage"]) == (403, "FORBIDDEN")
        assert await wait_status(http, "vm-0", None) is None


async def test_the_vms_own_notice_duration_comes_first(http: Http) -> None:
    notice = {"seconds": "1", "nanos": 0}
    spot = body("vm-0")["scheduling"]
    await running(http, "vm-0", scheduling={**spot, "preemptionNoticeDuration": notice})
    seen = await http.ok("POST", f"{CONTROL}/vm-0:preempt")
    assert seen["notice_at"] is not None
    assert (await http.ok("GET", f"{ZONE}/instances/vm-0"))["status"] == "RUNNING"
    await wait_status(http, "vm-0", "TERMINATED")
    standard = {"provisioningModel": "STANDARD", "preemptionNoticeDuration": notice}
    code, _ = await http("POST", f"{ZONE}/instances", body("vm-1", scheduling=standard))
    assert code == 400


async def test_spot_vms_die_at_random_with_a_mean_lifetime() -> None:
    async with emulator_with(spot_mean_lifetime_seconds=0.05, seed=3) as http:
        await http.ok("POST", f"{ZONE}/instances", body("vm-0"))
        await http.ok("POST", f"{ZONE}/instances", body("std-0", scheduling={}))
        await wait_status(http, "vm-0", "TERMINATED")
        assert len(await preempted_ops(http, "vm-0")) == 1
        assert (await http.ok("GET", f"{ZONE}/instances/std-0"))["status"] == "RUNNING"


async def test_rate_quotas_refill_at_the_minute() -> None:
    clock = ManualClock(start=1_800_000_030.0)  # half a minute in
    limits = {"writes_per_region": 2}
    async with emulator_with(compute_rate_limits=limits, clock=clock) as http:
        for name in ("vm-0", "vm-1"):
            await http.ok("POST", f"{ZONE}/instances", body(name))
        code, payload = await http("POST", f"{ZONE}/instances", body("vm-2"))
        assert code == 403
        assert payload["error"]["errors"][0]["reason"] == "rateLimitExceeded"
        assert (await http("GET", f"{ZONE}/instances"))[0] == 200  # reads: another metric
        east = f"/compute/v1/projects/{P}/zones/us-east5-b/instances"
        await http.ok("POST", east, body("vm-2", zone="us-east5-b"))  # another region
        clock.advance(30)  # the next minute: refilled
        await http.ok("POST", f"{ZONE}/instances", body("vm-2"))
