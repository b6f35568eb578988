"""The compute v1 surface over raw HTTP: compute's error envelope, insert validation, the
requestId rule, operations.wait, partial responses, machine types, guest attributes, and the
unconfirmed behaviours that are options (research section 9: stockout modes and codes, the
`items` of an empty page, the guest-attributes switch)."""

from __future__ import annotations

from typing import Any

import pytest
from compute_support import MT, ZONE, P, Z, body, emulator_with, running, wait_status
from emulator_http import Http

OP = ZONE + "/operations"


def envelope_of(payload: dict[str, Any]) -> tuple[int, str]:
    """(code, reason) of a compute envelope, checking its exact shape on the way."""
    error = payload["error"]
    assert set(error) == {"code", "message", "errors"}
    [detail] = error["errors"]
    assert set(detail) == {"reason", "message", "domain"}
    assert detail["message"] == error["message"]
    return error["code"], detail["reason"]


async def test_not_found_and_already_exists_in_computes_envelope(http: Http) -> None:
    code, payload = await http("GET", f"{ZONE}/instances/nope")
    assert code == 404
    assert envelope_of(payload) == (404, "notFound")
    resource = f"projects/{P}/zones/{Z}/instances/nope"
    assert payload["error"]["message"] == f"The resource '{resource}' was not found"
    assert (await http("DELETE", f"{ZONE}/instances/nope"))[0] == 404
    assert (await http("GET", f"{OP}/operation-1"))[0] == 404

    await http.ok("POST", f"{ZONE}/instances", body("vm-0"))
    code, payload = await http("POST", f"{ZONE}/instances", body("vm-0"))
    assert (code, envelope_of(payload)) == (409, (409, "alreadyExists"))
    assert "instances/vm-0' already exists" in payload["error"]["message"]

    code, payload = await http("GET", f"/compute/v1/projects/{P}/zones/mars-1a/instances")
    assert (code, envelope_of(payload)) == (404, (404, "notFound"))


@pytest.mark.parametrize(
    ("change", "reason", "words"),
    [
        ({"name": "Bad_Name"}, "invalid", "resource.name"),
        ({"name": None}, "required", "resource.name"),
        ({"machineType": None}, "required", "resource.machineType"),
        ({"machineType": "zones/us-east5-b/machineTypes/" + MT}, "invalid", "in zone"),
        ({"machineType": f"zones/{Z}/machineTypes/n1-standard-4"}, "invalid", "does not exist"),
        ({"disks": None}, "required", "resource.disks"),
        ({"disks": [{"boot": True, "initializeParams": {}}]}, "required", "sourceImage"),
        ({"scheduling": {"provisioningModel": "CHEAP"}}, "invalid", "provisioningModel"),
        ({"scheduling": {"onHostMaintenance": "MIGRATE"}}, "invalid", "terminate"),
        ({"scheduling": {"instanceTerminationAction": "EXPLODE"}}, "invalid", "Action"),
        ({"labels": {"Upper": "x"}}, "invalid", "Label keys"),
        ({"metadata": {"items": [{"key": "a b", "value": "x"}]}}, "invalid", "metadata"),
        ({"serviceAccounts": [{"email": "a"}, {"email": "b"}]}, "invalid", "one service"),
        ({"reservationAffinity": {"consumeReservationType": "SPECIFIC_RESERVATION"}},
         "invalid", "reservation-name"),
    ],
)  # fmt: skip
async def test_insert_validation(
    http: Http, change: dict[str, Any], reason: str, words: str
) -> None:
    sent = {k: v for k, v in {**body("vm-0"), **change}.items() if v is not None}
    code, payload = await http("POST", f"{ZONE}/instances", sent)
    assert code == 400, payload
    assert envelope_of(payload) == (400, reason)
    assert words in payload["error"]["message"]
    assert (await http("GET", f"{ZONE}/instances/vm-0"))[0] == 404  # nothing was made


async def test_request_id_must_be_a_uuid_and_unknown_parameters_are_refused(http: Http) -> None:
    for bad in ("not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        code, payload = await http("POST", f"{ZONE}/instances", body("vm-0"), requestId=bad)
        assert (code, envelope_of(payload)[1]) == (400, "invalid")
    code, payload = await http("GET", f"{ZONE}/instances", pageSize="3")
    assert (code, envelope_of(payload)[1]) == (400, "badRequest")
    code, payload = await http("GET", f"{ZONE}/instances", maxResults="501")
    assert code == 400
    code, payload = await http("GET", f"{ZONE}/instances", pageToken="garbage")
    assert (code, envelope_of(payload)) == (400, (400, "invalidParameter"))


async def test_the_operation_and_instance_shapes(http: Http) -> None:
    op = await http.ok(
        "POST", f"{ZONE}/instances", body("vm-0"), requestId="1c8e8b0e-5a3c-4e1b-9d8e-2f0a6c1d7e90"
    )
    assert op["kind"] == "compute#operation"
    assert (op["operationType"], op["status"], op["progress"]) == ("insert", "RUNNING", 0)
    base = f"https://www.googleapis.com/compute/v1/projects/{P}/zones/{Z}"
    assert op["zone"] == base
    assert op["targetLink"] == f"{base}/instances/vm-0"
    assert op["selfLink"] == f"{base}/operations/{op['name']}"
    assert op["clientOperationId"] == "1c8e8b0e-5a3c-4e1b-9d8e-2f0a6c1d7e90"
    assert {"id", "targetId", "user", "insertTime", "startTime"} <= set(op)
    vm = await http.ok("GET", f"{ZONE}/instances/vm-0")
    assert vm["status"] in ("PROVISIONING", "STAGING")
    assert vm["id"] == op["targetId"]
    done = await http.ok("POST", f"{OP}/{op['name']}/wait")
    assert (done["status"], done["progress"]) == ("DONE", 100)
    assert "endTime" in done
    assert "error" not in done
    vm = await http.ok("GET", f"{ZONE}/instances/vm-0")
    assert vm["status"] == "RUNNING"
    assert vm["kind"] == "compute#instance"
    assert vm["machineType"] == f"{base}/machineTypes/{MT}"
    assert vm["networkInterfaces"][0]["network"].endswith("/global/networks/default")
    assert "natIP" in vm["networkInterfaces"][0]["accessConfigs"][0]
    assert vm["disks"][0]["boot"] is True
    assert "lastStartTimestamp" in vm


async def test_an_internal_ip_vm_has_no_nat_ip(http: Http) -> None:
    vm = await running(http, "vm-0", networkInterfaces=[{"network": "global/networks/default"}])
    assert "accessConfigs" not in vm["networkInterfaces"][0]
    assert vm["networkInterfaces"][0]["networkIP"].startswith("127.")


async def test_wait_is_bounded_and_may_return_early() -> None:
    async with emulator_with(create_seconds=5.0, compute_wait_max_seconds=0.1) as http:
        op = await http.ok("POST", f"{ZONE}/instances", body("vm-0"))
        assert (await http.ok("POST", f"{OP}/{op['name']}/wait"))["status"] == "RUNNING"
    async with emulator_with(compute_wait_early_return_probability=1.0) as http:
        op = await http.ok("POST", f"{ZONE}/instances", body("vm-0"))
        assert (await http.ok("POST", f"{OP}/{op['name']}/wait"))["status"] == "RUNNING"


async def test_partial_responses_and_empty_pages(http: Http) -> None:
    assert await http.ok("GET", f"{ZONE}/instances", fields="items(name)") == {}
    await running(http, "vm-0")
    page = await http.ok(
        "GET", f"{ZONE}/instances", fields="items(name,status,labels),nextPageToken"
    )
    labels = {"tpucared-fleet": "iron", "tpucared-owner": "test"}
    assert page == {"items": [{"name": "vm-0", "status": "RUNNING", "labels": labels}]}
    code, payload = await http("GET", f"{ZONE}/instances", fields="items(")
    assert (code, envelope_of(payload)) == (400, (400, "invalidParameter"))
    async with emulator_with(compute_empty_items_listed=True) as other:
        assert (await other.ok("GET", f"{ZONE}/instances"))["items"] == []


async def test_tpu_machine_types(http: Http) -> None:
    for name, chips in (("tpu7x-standard-4t", 4), ("ct6e-standard-1t", 1),
                        ("ct6e-standard-4t", 4), ("ct6e-standard-8t", 8),
                        ("ct5p-hightpu-4t", 4)):  # fmt: skip
        machine = await http.ok("GET", f"{ZONE}/machineTypes/{name}")
        assert machine["kind"] == "compute#machineType"
        assert (machine["name"], machine["zone"]) == (name, Z)
        assert machine["accelerators"][0]["guestAcceleratorCount"] == chips
        assert machine["guestCpus"] > 0
        assert machine["memoryMb"] > 0
    assert (await http.ok("GET", f"{ZONE}/machineTypes/ct5p-hightpu-4t"))["guestCpus"] == 208
    code, payload = await http("GET", f"{ZONE}/machineTypes/n1-standard-4")
    assert (code, envelope_of(payload)) == (404, (404, "notFound"))


async def test_host_keys_need_the_guest_attributes_switch(http: Http) -> None:
    path = f"{ZONE}/instances/{{}}/getGuestAttributes"
    await running(
        http, "keys", metadata={"items": [{"key": "enable-guest-attributes", "value": "TRUE"}]}
    )
    await running(http, "nokeys", metadata={"items": []})
    answer = await http.ok("GET", path.format("keys"), queryPath="hostkeys/")
    assert answer["kind"] == "compute#guestAttributes"
    assert answer["queryPath"] == "hostkeys/"
    [item] = answer["queryValue"]["items"]
    assert (item["namespace"], item["key"]) == ("hostkeys", "ssh-ed25519")
    one = await http.ok("GET", path.format("keys"), variableKey="hostkeys/ssh-ed25519")
    assert one["variableValue"] == item["value"]
    assert (await http("GET", path.format("nokeys"), queryPath="hostkeys/"))[0] == 404
    async with emulator_with(compute_guest_attributes_need_flag=False) as other:
        await running(other, "nokeys", metadata={"items": []})
        assert await other.ok("GET", path.format("nokeys"), queryPath="hostkeys/")


async def test_a_stockout_in_each_mode_and_code() -> None:
    capacity = {(Z, MT): 0}
    async with emulator_with(capacity=capacity) as http:  # the default: in the operation
        op = await http.ok("POST", f"{ZONE}/instances", body("vm-0"))
        assert op["status"] == "RUNNING"
        assert (await http.ok("GET", f"{ZONE}/instances/vm-0"))["status"] == "PROVISIONING"
        done = await http.ok("POST", f"{OP}/{op['name']}/wait")
        [error] = done["error"]["errors"]
        assert error["code"] == "ZONE_RESOURCE_POOL_EXHAUSTED"
        assert error["message"].startswith(
            f"A {MT} VM instance is currently unavailable in the {Z} zone."
        )
        assert (done["httpErrorStatusCode"], done["httpErrorMessage"]) == (
            503,
            "SERVICE UNAVAILABLE",
        )
        info = error["errorDetails"][2]["errorInfo"]
        assert (info["metadatas"]["vmType"], info["metadatas"]["zone"]) == (MT, Z)
        assert "us-east5-b" in info["metadatas"]["zonesAvailable"].split(",")
        assert (await http("GET", f"{ZONE}/instances/vm-0"))[0] == 404
    async with emulator_with(capacity=capacity, compute_stockout_mode="sync_http") as http:
        code, payload = await http("POST", f"{ZONE}/instances", body("vm-0"))
        assert (code, envelope_of(payload)) == (503, (503, "ZONE_RESOURCE_POOL_EXHAUSTED"))
        assert (await http("GET", f"{ZONE}/instances/vm-0"))[0] == 404
    async with emulator_with(
        capacity=capacity,
        compute_stockout_mode="born_done",
        compute_stockout_code="ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    ) as http:
        op = await http.ok("POST", f"{ZONE}/instances", body("vm-0"))
        assert op["status"] == "DONE"
        [error] = op["error"]["errors"]
        assert error["code"] == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
        assert error["message"] == (
            f"The zone 'projects/{P}/zones/{Z}' does not have enough resources available to "
            "fulfill the request.  '(resource type:compute)'."
        )
        assert op["httpErrorStatusCode"] == 503
        assert (await http("GET", f"{ZONE}/instances/vm-0"))[0] == 404


async def test_capacity_judged_when_the_insert_ends() -> None:
    async with emulator_with(
        capacity={(Z, MT): 0}, capacity_judged="end", create_seconds=0.4
    ) as http:
        op = await http.ok("POST", f"{ZONE}/instances", body("vm-0"))
        await http.ok(
            "PUT", "/_emulator/v1/capacity", {"zone": Z, "machine_type": MT, "available": 1}
        )
        done = await http.ok("POST", f"{OP}/{op['name']}/wait")
        assert "error" not in done
        await wait_status(http, "vm-0", "RUNNING")


async def test_delete_during_provisioning_and_a_repeated_delete(http: Http) -> None:
    op = await http.ok("POST", f"{ZONE}/instances", body("vm-0"))
    deleting = await http.ok("DELETE", f"{ZONE}/instances/vm-0")
    assert deleting["operationType"] == "delete"
    again = await http.ok("DELETE", f"{ZONE}/instances/vm-0")
    assert again["name"] == deleting["name"]  # the delete in flight
    assert (await http.ok("GET", f"{OP}/{op['name']}"))["status"] == "DONE"
    assert (await http.ok("POST", f"{OP}/{deleting['name']}/wait"))["status"] == "DONE"
    assert await wait_status(http, "vm-0", None) is None
