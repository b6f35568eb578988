"""Queued resources over HTTP: WAITING_FOR_RESOURCES -> PROVISIONING -> ACTIVE, SUSPENDED on
preemption, FAILED when capacity never comes, force delete, reset, multislice."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from emulator_http import Http

P, Z, T = "qr", "us-central2-b", "v4-8"
PARENT = f"projects/{P}/locations/{Z}"
QRS = f"/v2/{PARENT}/queuedResources"


def request_body(node_id: str = "slice-0", **extra: Any) -> dict[str, Any]:
    node = {"acceleratorType": T, "runtimeVersion": "tpu-vm-base", "labels": {"team": "x"}}
    return {
        "tpu": {"nodeSpec": [{"parent": PARENT, "nodeId": node_id, "node": node}]},
        "spot": {},
        **extra,
    }


async def qr_state(http: Http, qr_id: str) -> dict[str, Any]:
    state: dict[str, Any] = (await http.ok("GET", f"{QRS}/{qr_id}"))["state"]
    return state


async def wait_for_state(http: Http, qr_id: str, wanted: str) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for _ in range(150):
        state = await qr_state(http, qr_id)
        if state["state"] == wanted:
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"{qr_id} stuck in {state}")


async def set_capacity(http: Http, available: int | None) -> None:
    body = {"zone": Z, "accelerator_type": T, "available": available}
    await http.ok("PUT", "/_emulator/v1/capacity", body)


async def test_waits_for_capacity_then_provisions_and_activates(http: Http) -> None:
    await set_capacity(http, 0)
    op = await http.ok("POST", QRS, request_body(), queuedResourceId="q1")
    assert op["done"] is True
    assert op["response"]["@type"] == "type.googleapis.com/google.cloud.tpu.v2.QueuedResource"
    assert op["response"]["state"] == {"state": "WAITING_FOR_RESOURCES"}
    await asyncio.sleep(0.3)  # well past queued_provision_seconds: still no capacity
    assert await qr_state(http, "q1") == {"state": "WAITING_FOR_RESOURCES"}
    assert (await http("GET", f"/v2/{PARENT}/nodes/slice-0"))[0] == 404

    await set_capacity(http, 1)
    provisioning = await wait_for_state(http, "q1", "PROVISIONING")
    assert provisioning == {"state": "PROVISIONING", "provisioningData": {}}
    assert await wait_for_state(http, "q1", "ACTIVE") == {"state": "ACTIVE", "activeData": {}}
    node = await http.ok("GET", f"/v2/{PARENT}/nodes/slice-0")
    assert node["state"] == "READY"
    assert node["queuedResource"] == f"{PARENT}/queuedResources/q1"
    assert node["schedulingConfig"] == {"spot": True}
    assert node["labels"] == {"team": "x"}
    listed = await http.ok("GET", QRS)
    assert [q["name"] for q in listed["queuedResources"]] == [f"{PARENT}/queuedResources/q1"]
    assert listed["queuedResources"][0]["tpu"]["nodeSpec"][0]["nodeId"] == "slice-0"


async def test_preemption_suspends_and_delete_needs_force(http: Http) -> None:
    await http.ok("POST", QRS, request_body(), queuedResourceId="q2")
    await wait_for_state(http, "q2", "ACTIVE")
    await http.ok("POST", f"/_emulator/v1/{PARENT}/nodes/slice-0:preempt")
    assert await qr_state(http, "q2") == {
        "state": "SUSPENDED",
        "suspendedData": {},
        "stateInitiator": "SERVICE",
    }

    status, body = await http("DELETE", f"{QRS}/q2")
    assert status == 400
    assert body["error"]["status"] == "FAILED_PRECONDITION"
    op = await http.ok("DELETE", f"{QRS}/q2", force="true")
    assert op["metadata"]["verb"] == "delete"
    assert (await http.ok("GET", f"/v2/{PARENT}/nodes/slice-0"))["state"] == "DELETING"
    op = await http.operation(op)
    assert op["response"] == {"@type": "type.googleapis.com/google.protobuf.Empty"}
    assert (await http("GET", f"{QRS}/q2"))[0] == 404
    assert (await http("GET", f"/v2/{PARENT}/nodes/slice-0"))[0] == 404


async def test_reset_brings_a_suspended_request_back(http: Http) -> None:
    await http.ok("POST", QRS, request_body("again"), queuedResourceId="q3")
    await wait_for_state(http, "q3", "ACTIVE")
    old_id = (await http.ok("GET", f"/v2/{PARENT}/nodes/again"))["id"]
    status, _body = await http("POST", f"{QRS}/q3:reset")
    assert status == 400  # ACTIVE cannot be reset
    await http.ok("POST", f"/_emulator/v1/{PARENT}/nodes/again:terminate")
    await http.ok("POST", f"{QRS}/q3:reset")
    await wait_for_state(http, "q3", "ACTIVE")
    node = await http.ok("GET", f"/v2/{PARENT}/nodes/again")
    assert node["state"] == "READY"
    assert node["id"] != old_id


async def test_fails_when_capacity_never_comes(http: Http) -> None:
    await set_capacity(http, 0)
    body = request_body(queueingPolicy={"validUntilDuration": "0.3s"})
    await http.ok("POST", QRS, body, queuedResourceId="q4")
    state = await wait_for_state(http, "q4", "FAILED")
    assert state["failedData"]["error"]["code"] == 8
    assert "no more capacity" in state["failedData"]["error"]["message"]
    await http.ok("DELETE", f"{QRS}/q4")  # no nodes: no force needed


async def test_multislice_provisions_every_slice_together(http: Http) -> None:
    node = {"acceleratorType": T, "runtimeVersion": "tpu-vm-base"}
    spec = {"parent": PARENT, "multisliceParams": {"nodeCount": 3}, "node": node}
    await http.ok("POST", QRS, {"tpu": {"nodeSpec": [spec]}}, queuedResourceId="ms")
    await wait_for_state(http, "ms", "ACTIVE")
    names = [
        n["name"].rsplit("/", 1)[1] for n in (await http.ok("GET", f"/v2/{PARENT}/nodes"))["nodes"]
    ]
    assert names == ["ms-0", "ms-1", "ms-2"]


@pytest.mark.parametrize(
    ("qr_id", "body", "status"),
    [
        (None, request_body(), 400),
        ("bad id!", request_body(), 400),
        ("ok", {"tpu": {"nodeSpec": []}}, 400),
        ("ok", request_body("Bad_Node"), 400),
        ("ok", {"tpu": {"nodeSpec": [{"parent": "projects/x/locations/y", "nodeId": "a",
                                      "node": {"acceleratorType": T, "runtimeVersion": "r"}}]}},
         400),
        ("ok", {**request_body(), "queueingPolicy": {"validUntilDuration": "soon"}}, 400),
    ],
)  # fmt: skip
async def test_create_validation(
    http: Http, qr_id: str | None, body: dict[str, Any], status: int
) -> None:
    params = {"queuedResourceId": qr_id} if qr_id else {}
    assert (await http("POST", QRS, body, **params))[0] == status


async def test_duplicate_names_conflict(http: Http) -> None:
    await http.ok("POST", QRS, request_body("n-1"), queuedResourceId="dup")
    assert (await http("POST", QRS, request_body("n-2"), queuedResourceId="dup"))[0] == 409
    await wait_for_state(http, "dup", "ACTIVE")
    assert (await http("POST", QRS, request_body("n-1"), queuedResourceId="other"))[0] == 409
