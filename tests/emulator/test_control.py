"""The control API (/_emulator/v1): node events, capacity, faults, timing, request log, reset."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from emulator_http import Http

from tpucared_emulator import EmulatorServer

P, Z, T = "ctl", "us-central2-b", "v4-8"
NODES = f"/v2/projects/{P}/locations/{Z}/nodes"
CONTROL_NODES = f"/_emulator/v1/projects/{P}/locations/{Z}/nodes"
SPEC = {"acceleratorType": T, "runtimeVersion": "tpu-vm-base", "schedulingConfig": {"spot": True}}


async def ready_node(http: Http, node_id: str) -> None:
    await http.ok("POST", NODES, SPEC, nodeId=node_id)
    for _ in range(100):
        if (await http.ok("GET", f"{NODES}/{node_id}"))["state"] == "READY":
            return
        await asyncio.sleep(0.02)
    raise AssertionError("node never became READY")


# -- node events ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "state", "health"),
    [("preempt", "PREEMPTED", None), ("terminate", "TERMINATED", None),
     ("unhealthy", "READY", "UNHEALTHY_MAINTENANCE")],
)  # fmt: skip
async def test_node_events(http: Http, action: str, state: str, health: str | None) -> None:
    await ready_node(http, "victim")
    internal = await http.ok("POST", f"{CONTROL_NODES}/victim:{action}")
    assert internal["state"] == state
    node = await http.ok("GET", f"{NODES}/victim")
    assert (node["state"], node.get("health")) == (state, health)


async def test_a_notice_then_the_preemption(http: Http) -> None:
    await ready_node(http, "warned")
    node = await http.ok("POST", f"{CONTROL_NODES}/warned:preempt", {"notice_seconds": 0.3})
    assert (node["state"], node["notice_at"] is not None) == ("READY", True)
    assert (await http.ok("GET", f"{NODES}/warned"))["state"] == "READY"
    await asyncio.sleep(0.5)
    assert (await http.ok("GET", f"{NODES}/warned"))["state"] == "PREEMPTED"


async def test_a_notice_never_reaches_a_node_recreated_under_the_same_name(http: Http) -> None:
    """The old node's preemption timer is stale for the new one, whatever their state
    counts: the daemon deletes a noticed node and recreates it before the notice runs out."""
    await ready_node(http, "again")
    await http.ok("POST", f"{CONTROL_NODES}/again:preempt", {"notice_seconds": 0.6})
    await http.ok("DELETE", f"{NODES}/again")
    for _ in range(100):
        if (await http("GET", f"{NODES}/again"))[0] == 404:
            break
        await asyncio.sleep(0.02)
    await ready_node(http, "again")
    await asyncio.sleep(0.8)
    node = await http.ok("GET", f"{NODES}/again")
    assert node["state"] == "READY"


async def test_vanish_leaves_no_trace(http: Http) -> None:
    await ready_node(http, "ghost")
    assert await http.ok("POST", f"{CONTROL_NODES}/ghost:vanish") == {}
    assert (await http("GET", f"{NODES}/ghost"))[0] == 404
    assert await http.ok("GET", NODES) == {}


async def test_node_event_errors(http: Http) -> None:
    assert (await http("POST", f"{CONTROL_NODES}/nobody:preempt"))[0] == 404
    await ready_node(http, "n")
    status, body = await http("POST", f"{CONTROL_NODES}/n:explode")
    assert status == 400
    assert "unknown node action" in body["error"]["message"]


async def test_internal_node_view_has_worker_addresses_and_host_keys(http: Http) -> None:
    await http.ok("POST", NODES, {**SPEC, "acceleratorType": "v4-32"}, nodeId="pod")
    (node,) = (await http.ok("GET", "/_emulator/v1/nodes"))["nodes"]
    assert (node["zone"], node["node_id"], node["state"]) == (Z, "pod", "CREATING")
    assert [w["index"] for w in node["workers"]] == [0, 1, 2, 3]
    assert all(w["host_key"].startswith("ssh-ed25519 AAAA") for w in node["workers"])
    assert len({w["ip"] for w in node["workers"]}) == 4


# -- capacity ------------------------------------------------------------------------------------


async def test_capacity_put_get_and_enforcement(http: Http) -> None:
    entry = await http.ok(
        "PUT", "/_emulator/v1/capacity", {"zone": Z, "accelerator_type": T, "available": 1}
    )
    assert entry == {"zone": Z, "accelerator_type": T, "available": 1, "in_use": 0}
    await ready_node(http, "first")
    await http.ok("POST", f"{CONTROL_NODES}/first:preempt")  # still holds its slot
    op = await http.ok("POST", NODES, SPEC, nodeId="second")
    op = await http.operation(op)
    assert op["error"]["code"] == 8
    assert "There is no more capacity in the zone" in op["error"]["message"]
    capacity = await http.ok("GET", "/_emulator/v1/capacity")
    assert capacity == {"capacity": [{"zone": Z, "accelerator_type": T, "available": 1,
                                      "in_use": 1}]}  # fmt: skip
    unlimited = {"zone": Z, "accelerator_type": T, "available": None}
    assert (await http.ok("PUT", "/_emulator/v1/capacity", unlimited))["available"] is None


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"zone": Z, "accelerator_type": T, "available": -1}, 400),
        ({"zone": Z, "available": 1}, 400),
        ({"zone": "nowhere-1a", "accelerator_type": T, "available": 1}, 403),
        ({"zone": Z, "accelerator_type": "v4-9", "available": 1}, 400),
    ],
)
async def test_capacity_validation(http: Http, body: dict[str, Any], status: int) -> None:
    assert (await http("PUT", "/_emulator/v1/capacity", body))[0] == status


# -- faults --------------------------------------------------------------------------------------


async def test_script_is_consumed_in_order_by_matching_requests(http: Http) -> None:
    await http.ok(
        "PUT",
        "/_emulator/v1/faults",
        {
            "paths": ["/nodes"],
            "script": [
                {"kind": "unavailable"},
                {"kind": "ok"},
                {"kind": "rate_limited", "retry_after_s": 3},
                {"kind": "quota"},
                {"kind": "conflict"},
                {"kind": "permission"},
            ],
        },
    )
    location = f"/v2/projects/{P}/locations/{Z}"
    assert (await http("GET", location))[0] == 200  # does not match `paths`: untouched
    assert (await http("GET", "/_emulator/v1/capacity"))[0] == 200  # control: never faulted
    results = [await http("GET", NODES) for _ in range(7)]
    assert [status for status, _ in results] == [503, 200, 429, 429, 409, 403, 200]
    rate_limited, quota, conflict, permission = (r[1]["error"] for r in results[2:6])
    assert rate_limited["status"] == "RESOURCE_EXHAUSTED"
    assert {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"} in (
        rate_limited["details"]
    )
    assert not any("QuotaFailure" in d["@type"] for d in rate_limited["details"])
    assert quota["message"] == (
        "Quota 'TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI' exhausted. Limit 20800 in "
        "region us-central2"
    )
    assert quota["details"][0]["@type"] == "type.googleapis.com/google.rpc.QuotaFailure"
    assert (conflict["status"], conflict["message"]) == ("ABORTED", "unable to queue the operation")
    assert permission["message"] == (
        f"Permission 'tpu.nodes.list' denied on 'projects/{P}/locations/{Z}/nodes'"
    )
    log = await http.ok("GET", "/_emulator/v1/requests")
    assert [r["fault"] for r in log] == [
        None, "unavailable", None, "rate_limited", "quota", "conflict", "permission", None,
    ]  # fmt: skip


async def test_rate_limited_sends_retry_after_header(emulator: EmulatorServer) -> None:
    async with aiohttp.ClientSession() as session:
        await session.put(
            f"{emulator.url}/_emulator/v1/faults",
            json={"script": [{"kind": "rate_limited", "retry_after_s": 2}]},
        )
        async with session.get(emulator.url + NODES) as response:
            assert response.status == 429
            assert response.headers["Retry-After"] == "2"


async def test_drop_closes_the_connection_without_a_response(
    emulator: EmulatorServer, http: Http
) -> None:
    await http.ok("PUT", "/_emulator/v1/faults", {"script": [{"kind": "drop"}]})
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ServerDisconnectedError):
            # POST: aiohttp does not silently retry it the way it retries an idempotent GET.
            await session.post(emulator.url + NODES, json=SPEC, params={"nodeId": "dropped"})
    (entry,) = await http.ok("GET", "/_emulator/v1/requests")
    assert (entry["status"], entry["fault"]) == (0, "drop")
    assert (await http("GET", f"{NODES}/dropped"))[0] == 404  # it never took effect


async def test_fault_after_the_request_took_effect(http: Http) -> None:
    await http.ok("PUT", "/_emulator/v1/faults", {"script": [{"kind": "internal", "after": True}]})
    status, body = await http("POST", NODES, SPEC, nodeId="lost-answer")
    assert (status, body["error"]["status"]) == (500, "INTERNAL")
    assert (await http("GET", f"{NODES}/lost-answer"))[0] == 200  # but the node exists
    status, body = await http("POST", NODES, SPEC, nodeId="lost-answer")
    assert (status, body["error"]["status"]) == (409, "ALREADY_EXISTS")


async def test_methods_filter(http: Http) -> None:
    await http.ok(
        "PUT", "/_emulator/v1/faults", {"methods": ["POST"], "script": [{"kind": "unavailable"}]}
    )
    assert (await http("GET", NODES))[0] == 200
    assert (await http("POST", NODES, SPEC, nodeId="x"))[0] == 503


async def test_random_faults_follow_the_seed(http: Http) -> None:
    async def statuses() -> list[int]:
        config = {"error_rate": 0.5, "kinds": ["unavailable", "internal"], "seed": 7}
        await http.ok("PUT", "/_emulator/v1/faults", config)
        return [(await http("GET", NODES))[0] for _ in range(20)]

    first = await statuses()
    assert set(first) == {200, 500, 503}
    assert await statuses() == first
    await http.ok("DELETE", "/_emulator/v1/faults")
    assert {(await http("GET", NODES))[0] for _ in range(5)} == {200}


async def test_latency(http: Http) -> None:
    await http.ok("PUT", "/_emulator/v1/faults", {"latency_ms": 60})
    start = time.monotonic()
    assert (await http("GET", NODES))[0] == 200
    assert time.monotonic() - start >= 0.06


@pytest.mark.parametrize(
    "config",
    [
        {"error_rate": 2},
        {"kinds": ["meteor"]},
        {"script": [{"kind": "meteor"}]},
        {"script": "unavailable"},
        {"latency_ms": -1},
        {"surprise": True},
    ],
)
async def test_fault_config_validation(http: Http, config: dict[str, Any]) -> None:
    status, body = await http("PUT", "/_emulator/v1/faults", config)
    assert status == 400
    assert body["error"]["status"] == "INVALID_ARGUMENT"


# -- timing, request log, reset ------------------------------------------------------------------


async def test_timing_changes_apply_to_new_operations(http: Http) -> None:
    timing = await http.ok("GET", "/_emulator/v1/timing")
    assert timing["create_seconds"] == 0.2
    updated = await http.ok("PUT", "/_emulator/v1/timing", {"create_seconds": 0.01})
    assert updated["create_seconds"] == 0.01
    assert updated["delete_seconds"] == 0.1
    await http.ok("POST", NODES, SPEC, nodeId="quick")
    await asyncio.sleep(0.05)
    assert (await http.ok("GET", f"{NODES}/quick"))["state"] == "READY"
    assert (await http("PUT", "/_emulator/v1/timing", {"create_seconds": "fast"}))[0] == 400
    assert (await http("PUT", "/_emulator/v1/timing", {"warp": 1}))[0] == 400


async def test_request_log_since_and_clear(http: Http) -> None:
    await http("GET", NODES, pageSize="2")
    mark = time.time()
    await asyncio.sleep(0.01)
    await http("GET", f"{NODES}/missing")
    log = await http.ok("GET", "/_emulator/v1/requests")
    assert [(r["method"], r["path"], r["status"]) for r in log] == [
        ("GET", NODES, 200),
        ("GET", f"{NODES}/missing", 404),
    ]
    assert log[0]["query"] == {"pageSize": "2"}
    assert log[0]["time"] <= mark < log[1]["time"]
    recent = await http.ok("GET", "/_emulator/v1/requests", since=str(mark))
    assert [r["path"] for r in recent] == [f"{NODES}/missing"]
    await http.ok("DELETE", "/_emulator/v1/requests")
    assert await http.ok("GET", "/_emulator/v1/requests") == []


async def test_reset_forgets_everything(http: Http) -> None:
    await ready_node(http, "n")
    await http.ok("PUT", "/_emulator/v1/capacity", {"zone": Z, "accelerator_type": T,
                                                     "available": 3})  # fmt: skip
    await http.ok("PUT", "/_emulator/v1/faults", {"script": [{"kind": "internal"}] * 3})
    await http.ok("POST", "/_emulator/v1/reset")
    assert await http.ok("GET", NODES) == {}
    assert await http.ok("GET", "/_emulator/v1/capacity") == {"capacity": []}
    assert (await http.ok("GET", "/_emulator/v1/faults"))["script_remaining"] == []
    assert len(await http.ok("GET", "/_emulator/v1/requests")) == 1  # the list above
