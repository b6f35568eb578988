"""Multislice queued resources over HTTP: a nodeSpec's `multisliceParams {nodeCount,
nodeIdPrefix}` makes nodeCount nodes `{prefix}-i`, provisioned, suspended, deleted and reset
together; `nodeId` and `multisliceParams` are a oneof."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from emulator_http import Http

P, Z, T = "ms", "us-central2-b", "v4-8"
PARENT = f"projects/{P}/locations/{Z}"
QRS = f"/v2/{PARENT}/queuedResources"
NODES = f"/v2/{PARENT}/nodes"
CONTROL = f"/_emulator/v1/{PARENT}/nodes"
NODE = {"acceleratorType": T, "runtimeVersion": "tpu-vm-base", "labels": {"team": "x"}}


def multislice(count: Any = 2, prefix: str | None = None, **spec: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"nodeCount": count}
    if prefix is not None:
        params["nodeIdPrefix"] = prefix
    node_spec = {"parent": PARENT, "multisliceParams": params, "node": NODE, **spec}
    return {"tpu": {"nodeSpec": [node_spec]}, "spot": {}}


async def wait_for_state(http: Http, qr_id: str, wanted: str) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for _ in range(200):
        state = (await http.ok("GET", f"{QRS}/{qr_id}"))["state"]
        if state["state"] == wanted:
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"{qr_id} stuck in {state}")


async def node_states(http: Http) -> dict[str, str]:
    listed = await http.ok("GET", NODES)
    return {n["name"].rsplit("/", 1)[1]: n["state"] for n in listed.get("nodes", [])}


async def set_capacity(http: Http, available: int | None) -> None:
    await http.ok(
        "PUT", "/_emulator/v1/capacity", {"zone": Z, "accelerator_type": T, "available": available}
    )


async def test_nodes_are_named_from_the_prefix_and_say_they_are_multislice(http: Http) -> None:
    op = await http.ok("POST", QRS, multislice(2, "np"), queuedResourceId="q")
    assert op["response"]["state"] == {"state": "WAITING_FOR_RESOURCES"}
    assert await wait_for_state(http, "q", "ACTIVE") == {"state": "ACTIVE", "activeData": {}}
    assert await node_states(http) == {"np-0": "READY", "np-1": "READY"}
    for node_id in ("np-0", "np-1"):
        node = await http.ok("GET", f"{NODES}/{node_id}")
        assert node["multisliceNode"] is True
        assert node["queuedResource"] == f"{PARENT}/queuedResources/q"
        assert node["schedulingConfig"] == {"spot": True}
        assert node["labels"] == {"team": "x"}
    # The request is echoed as sent: multisliceParams, no nodeId.
    (listed,) = (await http.ok("GET", QRS))["queuedResources"]
    (spec,) = listed["tpu"]["nodeSpec"]
    assert spec["multisliceParams"] == {"nodeCount": 2, "nodeIdPrefix": "np"}
    assert "nodeId" not in spec
    got = await http.ok("GET", f"{QRS}/q")
    assert got["tpu"] == listed["tpu"]


async def test_the_prefix_defaults_to_the_queued_resource_id(http: Http) -> None:
    # nodeCount as a string (int32 in proto3 JSON may be either) is echoed as a number.
    await http.ok("POST", QRS, multislice("3"), queuedResourceId="train")
    await wait_for_state(http, "train", "ACTIVE")
    assert await node_states(http) == {f"train-{i}": "READY" for i in range(3)}
    (spec,) = (await http.ok("GET", f"{QRS}/train"))["tpu"]["nodeSpec"]
    assert spec["multisliceParams"] == {"nodeCount": 3}


async def test_a_single_node_request_is_not_multislice(http: Http) -> None:
    body = {"tpu": {"nodeSpec": [{"parent": PARENT, "nodeId": "solo", "node": NODE}]}}
    await http.ok("POST", QRS, body, queuedResourceId="solo")
    await wait_for_state(http, "solo", "ACTIVE")
    node = await http.ok("GET", f"{NODES}/solo")
    assert "multisliceNode" not in node  # proto3 JSON omits false
    assert node["queuedResource"] == f"{PARENT}/queuedResources/solo"


async def test_capacity_for_one_slice_keeps_a_two_slice_request_waiting(http: Http) -> None:
    await set_capacity(http, 1)
    await http.ok("POST", QRS, multislice(2), queuedResourceId="big")
    await asyncio.sleep(0.4)  # well past queued_provision_seconds
    assert (await http.ok("GET", f"{QRS}/big"))["state"] == {"state": "WAITING_FOR_RESOURCES"}
    assert await node_states(http) == {}  # not one slice of it
    capacity = (await http.ok("GET", "/_emulator/v1/capacity"))["capacity"]
    assert [(c["available"], c["in_use"]) for c in capacity] == [(1, 0)]

    await set_capacity(http, 2)
    await wait_for_state(http, "big", "ACTIVE")
    assert await node_states(http) == {"big-0": "READY", "big-1": "READY"}
    capacity = (await http.ok("GET", "/_emulator/v1/capacity"))["capacity"]
    assert [(c["available"], c["in_use"]) for c in capacity] == [(2, 2)]


async def test_preempting_one_slice_suspends_and_force_delete_takes_both(http: Http) -> None:
    await http.ok("POST", QRS, multislice(2), queuedResourceId="s")
    await wait_for_state(http, "s", "ACTIVE")
    preempted = await http.ok("POST", f"{CONTROL}/s-1:preempt")
    assert preempted["state"] == "PREEMPTED"
    assert (await http.ok("GET", f"{QRS}/s"))["state"] == {
        "state": "SUSPENDED",
        "suspendedData": {},
        "stateInitiator": "SERVICE",
    }
    # The rest stay until deleted, as with one slice.
    assert await node_states(http) == {"s-0": "READY", "s-1": "PREEMPTED"}

    status, body = await http("DELETE", f"{QRS}/s")
    assert (status, body["error"]["status"]) == (400, "FAILED_PRECONDITION")
    op = await http.ok("DELETE", f"{QRS}/s", force="true")
    assert await node_states(http) == {"s-0": "DELETING", "s-1": "DELETING"}
    op = await http.operation(op)
    assert op["response"] == {"@type": "type.googleapis.com/google.protobuf.Empty"}
    assert (await http("GET", f"{QRS}/s"))[0] == 404
    assert await node_states(http) == {}


async def test_a_notice_keeps_it_active_until_the_slice_goes(http: Http) -> None:
    await http.ok("POST", QRS, multislice(2), queuedResourceId="n")
    await wait_for_state(http, "n", "ACTIVE")
    noticed = await http.ok("POST", f"{CONTROL}/n-0:preempt", {"notice_seconds": 0.3})
    assert (noticed["state"], noticed["notice_at"] is not None) == ("READY", True)
    assert (await http.ok("GET", f"{QRS}/n"))["state"]["state"] == "ACTIVE"
    await wait_for_state(http, "n", "SUSPENDED")
    assert await node_states(http) == {"n-0": "PREEMPTED", "n-1": "READY"}


async def test_a_vanished_slice_suspends_too(http: Http) -> None:
    await http.ok("POST", QRS, multislice(2), queuedResourceId="v")
    await wait_for_state(http, "v", "ACTIVE")
    await http.ok("POST", f"{CONTROL}/v-0:vanish")
    state = await http.ok("GET", f"{QRS}/v")
    assert (state["state"]["state"], state["state"]["stateInitiator"]) == ("SUSPENDED", "SERVICE")
    assert await node_states(http) == {"v-1": "READY"}


async def test_reset_recreates_every_slice(http: Http) -> None:
    await http.ok("POST", QRS, multislice(2, "r"), queuedResourceId="again")
    await wait_for_state(http, "again", "ACTIVE")
    old = {n: (await http.ok("GET", f"{NODES}/{n}"))["id"] for n in ("r-0", "r-1")}
    await http.ok("POST", f"{CONTROL}/r-0:terminate")
    await wait_for_state(http, "again", "SUSPENDED")
    await http.ok("POST", f"{QRS}/again:reset")
    await wait_for_state(http, "again", "ACTIVE")
    for node_id, old_id in old.items():
        node = await http.ok("GET", f"{NODES}/{node_id}")
        assert (node["state"], node["multisliceNode"]) == ("READY", True)
        assert node["id"] != old_id


async def test_both_node_id_and_multislice_params_is_a_oneof_error(http: Http) -> None:
    status, body = await http("POST", QRS, multislice(2, nodeId="one"), queuedResourceId="b")
    assert (status, body["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert body["error"]["message"] == (
        "Invalid value at 'queued_resource.tpu.node_spec[0]' (oneof), oneof field "
        "'name_strategy' is already set. Cannot set 'nodeId'"
    )
    # The name as sent, whichever spelling and order.
    spec = {"parent": PARENT, "node_id": "one", "multislice_params": {"node_count": 2},
            "node": NODE}  # fmt: skip
    status, body = await http("POST", QRS, {"tpu": {"nodeSpec": [spec]}}, queuedResourceId="b")
    assert status == 400
    assert body["error"]["message"].endswith("Cannot set 'multislice_params'")


@pytest.mark.parametrize(
    ("node_spec", "message"),
    [
        ({}, "node_spec[0] must set either node_id or multislice_params"),
        ({"multisliceParams": {"nodeCount": 1}}, "node_count must be > 1, got 1"),
        ({"multisliceParams": {}}, "node_count must be > 1, got 0"),
        ({"multisliceParams": {"nodeCount": 2, "nodeIdPrefix": "a/b"}}, "'^[A-Za-z0-9_.~+%-]+$'"),
        ({"multisliceParams": {"nodeCount": 2, "nodeIdPrefix": "Np"}}, "'Np-0' .. 'Np-1'"),
        ({"multisliceParams": {"nodeCount": 2, "nodeIdPrefix": "a" * 62}}, "at most 63"),
        ({"multisliceParams": {"nodeCount": 100_000}}, "node_count must be at most 1024"),
    ],
)
async def test_invalid_multislice_specs(
    http: Http, node_spec: dict[str, Any], message: str
) -> None:
    body = {"tpu": {"nodeSpec": [{"parent": PARENT, "node": NODE, **node_spec}]}}
    status, answer = await http("POST", QRS, body, queuedResourceId="bad")
    assert (status, answer["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert message in answer["error"]["message"]
    assert (await http("GET", f"{QRS}/bad"))[0] == 404


async def test_an_upper_case_queued_resource_id_cannot_be_the_prefix(http: Http) -> None:
    status, answer = await http("POST", QRS, multislice(2), queuedResourceId="Big")
    assert status == 400
    assert "'Big' (from queuedResourceId)" in answer["error"]["message"]
    await http.ok("POST", QRS, multislice(2, "big"), queuedResourceId="Big")


async def test_node_ids_must_not_repeat_across_node_specs(http: Http) -> None:
    spec = {"parent": PARENT, "multisliceParams": {"nodeCount": 2, "nodeIdPrefix": "d"},
            "node": NODE}  # fmt: skip
    other = {"parent": PARENT, "nodeId": "d-1", "node": NODE}
    status, answer = await http(
        "POST", QRS, {"tpu": {"nodeSpec": [spec, other]}}, queuedResourceId="dup"
    )
    assert status == 400
    assert "node ids must be unique, ['d-1'] repeat" in answer["error"]["message"]


async def test_a_taken_node_name_conflicts(http: Http) -> None:
    await http.ok("POST", NODES, NODE, nodeId="t-1")
    status, answer = await http("POST", QRS, multislice(2), queuedResourceId="t")
    assert (status, answer["error"]["status"]) == (409, "ALREADY_EXISTS")
    assert f"{PARENT}/nodes/t-1" in answer["error"]["message"]
    assert (await http("GET", f"{QRS}/t"))[0] == 404
