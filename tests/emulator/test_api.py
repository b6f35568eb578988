"""The v2 REST surface over real loopback HTTP: paths, paging, JSON encodings, error envelopes.

Raw aiohttp requests, so these tests see exactly the bytes a client would: omitted fields,
strings for int64, enum names, and the Google error envelope.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from emulator_http import Http

from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.errors import classify_http
from tpucared_emulator import EmulatorServer, running_emulator
from tpucared_emulator.clock import ManualClock
from tpucared_emulator.resources import Node

P, Z = "api-proj", "us-central2-b"
NODES = f"/v2/projects/{P}/locations/{Z}/nodes"
SPEC = {"acceleratorType": "v4-8", "runtimeVersion": "tpu-ubuntu2204-base"}


async def wait_done(http: Http, operation: dict[str, Any]) -> dict[str, Any]:
    for _ in range(200):
        status, op = await http("GET", f"/v2/{operation['name']}")
        assert status == 200
        if op.get("done"):
            return op  # type: ignore[no-any-return]
        await asyncio.sleep(0.02)
    raise AssertionError(f"operation never finished: {operation['name']}")


async def create(http: Http, node_id: str, **fields: Any) -> dict[str, Any]:
    status, op = await http("POST", NODES, {**SPEC, **fields}, nodeId=node_id)
    assert status == 200, op
    return op  # type: ignore[no-any-return]


async def test_create_then_get_shows_the_full_node(http: Http) -> None:
    op = await create(http, "full", labels={"team": "nlp"}, metadata={"k": "v"})
    assert op["name"].startswith(f"projects/{P}/locations/{Z}/operations/operation-")
    assert "done" not in op  # proto3 JSON omits false
    done = await wait_done(http, op)
    assert "error" not in done
    status, node = await http("GET", f"{NODES}/full")
    assert status == 200
    response = dict(done["response"])
    assert response.pop("@type") == "type.googleapis.com/google.cloud.tpu.v2.Node"
    assert node == response
    assert node["name"] == f"projects/{P}/locations/{Z}/nodes/full"
    assert isinstance(node["id"], str)
    assert int(node["id"]) > 0
    assert node["createTime"].endswith("Z")
    assert (node["state"], node["health"], node["apiVersion"]) == ("READY", "HEALTHY", "V2")
    assert node["labels"] == {"team": "nlp"}
    assert node["metadata"] == {"k": "v"}
    (endpoint,) = node["networkEndpoints"]
    assert endpoint["port"] == 8470
    assert "accessConfig" not in endpoint  # enableExternalIps defaults to false in the API
    assert "schedulingConfig" not in node


async def test_enums_by_number_and_snake_case_fields(http: Http) -> None:
    # As the official client sends them: integers for enums, ignored `$alt`.
    body = {
        "runtime_version": "tpu-vm-base",
        "accelerator_config": {"type": 11, "topology": "4x4"},
        "health": 1,
        "data_disks": [{"source_disk": "projects/p/zones/z/disks/d", "mode": 2}],
    }
    status, op = await http(
        "POST", NODES, body, node_id="by-number", **{"$alt": "json;enum-encoding=int"}
    )
    assert status == 200, op
    node = (await wait_done(http, op))["response"]
    assert node["acceleratorType"] == "v6e-16"
    assert node["acceleratorConfig"] == {"type": "V6E", "topology": "4x4"}
    assert node["dataDisks"] == [{"sourceDisk": "projects/p/zones/z/disks/d", "mode": "READ_ONLY"}]
    assert len(node["networkEndpoints"]) == 4


async def test_default_page_is_small_and_tokens_walk_every_node(http: Http) -> None:
    ids = [f"n-{i:02d}" for i in range(12)]
    for node_id in ids:
        await create(http, node_id)
    seen: list[str] = []
    sizes: list[int] = []
    token: str | None = None
    while True:
        status, page = await http("GET", NODES, **({"pageToken": token} if token else {}))
        assert status == 200
        sizes.append(len(page["nodes"]))
        seen += [n["name"].rsplit("/", 1)[1] for n in page["nodes"]]
        token = page.get("nextPageToken")
        if not token:
            break
        if len(seen) == 5:  # a node deleted between pages neither repeats nor shifts others
            await http("DELETE", f"{NODES}/n-02")
    assert sizes == [5, 5, 2]
    assert seen == ids
    _, everything = await http("GET", NODES, pageSize="100")
    assert len(everything["nodes"]) == 12
    assert "nextPageToken" not in everything
    _, clamped = await http("GET", NODES, page_size="100000")
    assert len(clamped["nodes"]) == 12


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"pageSize": "-1"}, "page_size"),
        ({"pageSize": "many"}, "page_size"),
        ({"pageToken": "garbage"}, "page token"),
        ({"filter": "state=READY"}, 'Unknown name "filter"'),
    ],
)
async def test_bad_list_parameters(http: Http, params: dict[str, str], needle: str) -> None:
    status, body = await http("GET", NODES, **params)
    assert status == 400
    assert body["error"]["status"] == "INVALID_ARGUMENT"
    assert needle in body["error"]["message"]


async def test_page_token_of_another_zone_is_rejected(http: Http) -> None:
    for i in range(6):
        await create(http, f"t-{i}")
    _, page = await http("GET", NODES)
    other = f"/v2/projects/{P}/locations/us-central1-a/nodes"
    status, _body = await http("GET", other, pageToken=page["nextPageToken"])
    assert status == 400


async def test_empty_zone_lists_as_empty_object(http: Http) -> None:
    assert await http("GET", NODES) == (200, {})


async def test_error_envelope(http: Http) -> None:
    status, body = await http("GET", f"{NODES}/ghost")
    assert status == 404
    error = body["error"]
    assert error["code"] == 404
    assert error["status"] == "NOT_FOUND"
    assert error["message"] == f"Resource 'projects/{P}/locations/{Z}/nodes/ghost' was not found"
    assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.ResourceInfo"

    status, body = await http("GET", "/v2/projects/p/locations/atlantis-1a/nodes")
    assert status == 403
    assert body["error"]["status"] == "PERMISSION_DENIED"
    assert body["error"]["message"] == (
        "Location atlantis-1a is not found or access is unauthorized."
    )

    await create(http, "dup")
    status, body = await http("POST", NODES, SPEC, nodeId="dup")
    assert (status, body["error"]["status"]) == (409, "ALREADY_EXISTS")

    status, body = await http("GET", "/v2/projects/p/nothing/here")
    assert (status, body["error"]["status"]) == (404, "NOT_FOUND")


async def test_malformed_json_body(emulator: EmulatorServer) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{emulator.url}{NODES}?nodeId=x", data=b"{not json") as response,
    ):
        assert response.status == 400
        body = await response.json()
    assert body["error"]["message"].startswith("Invalid JSON payload received.")


async def test_patch_labels_and_external_ips(http: Http) -> None:
    await wait_done(http, await create(http, "p"))
    status, op = await http(
        "PATCH",
        f"{NODES}/p",
        {"labels": {"a": "1"}, "networkConfig": {"enableExternalIps": True}},
        updateMask="labels,network_config.enable_external_ips",
    )
    assert status == 200
    assert op["done"] is True
    assert op["metadata"]["verb"] == "update"
    _, node = await http("GET", f"{NODES}/p")
    assert node["labels"] == {"a": "1"}
    endpoint = node["networkEndpoints"][0]
    assert endpoint["accessConfig"]["externalIp"] == endpoint["ipAddress"]
    status, body = await http("PATCH", f"{NODES}/p", {"schedulingConfig": {"spot": True}},
                              updateMask="schedulingConfig")  # fmt: skip
    assert status == 400
    assert "scheduling_config" in body["error"]["message"]


async def test_operations_get_and_list(http: Http) -> None:
    created = await create(http, "o")
    await wait_done(http, created)
    deleted = (await http("DELETE", f"{NODES}/o"))[1]
    assert deleted["metadata"]["verb"] == "delete"
    done = await wait_done(http, deleted)
    assert done["response"] == {"@type": "type.googleapis.com/google.protobuf.Empty"}
    status, listed = await http("GET", f"/v2/projects/{P}/locations/{Z}/operations")
    assert status == 200
    assert {o["name"] for o in listed["operations"]} == {created["name"], deleted["name"]}
    status, _body = await http("GET", f"/v2/projects/{P}/locations/{Z}/operations/operation-1-0")
    assert status == 404


async def test_catalog_endpoints(http: Http) -> None:
    body = await http.ok("GET", f"/v2/projects/{P}/locations")
    zones = {loc["locationId"] for loc in body["locations"]}
    assert {"us-central1-a", "us-central2-b", "europe-west4-a", "asia-northeast1-b"} <= zones
    location = await http.ok("GET", f"/v2/projects/{P}/locations/{Z}")
    assert location == {"name": f"projects/{P}/locations/{Z}", "locationId": Z}

    parent = f"projects/{P}/locations/{Z}"
    base = f"/v2/{parent}"
    page = await http.ok("GET", f"{base}/acceleratorTypes", pageSize="2")
    assert len(page["acceleratorTypes"]) == 2
    assert page["nextPageToken"]
    accelerator = await http.ok("GET", f"{base}/acceleratorTypes/v5litepod-16")
    assert accelerator == {
        "name": f"{parent}/acceleratorTypes/v5litepod-16",
        "type": "v5litepod-16",
        "acceleratorConfigs": [{"type": "V5LITE_POD", "topology": "4x4"}],
    }
    versions = await http.ok("GET", f"{base}/runtimeVersions")
    assert {"name": f"{parent}/runtimeVersions/tpu-ubuntu2204-base",
            "version": "tpu-ubuntu2204-base"} in versions["runtimeVersions"]  # fmt: skip
    assert (await http("GET", f"{base}/runtimeVersions/tpu-nope"))[0] == 404


class RecordingHosts:
    """A WorkerHosts that records what the emulator asked of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, list[str]]] = []
        self.closed = False

    async def start(self, node: Node) -> None:
        self.calls.append(("start", node.node_id, [w.ip for w in node.workers]))

    async def notice(self, node: Node) -> None:
        self.calls.append(("notice", node.node_id, [w.ip for w in node.workers]))

    async def stop(self, node: Node) -> None:
        self.calls.append(("stop", node.node_id, [w.ip for w in node.workers]))

    async def close(self) -> None:
        self.closed = True


async def test_worker_hosts_hook_follows_the_node_in_real_time() -> None:
    hosts = RecordingHosts()
    async with (
        running_emulator(worker_hosts=hosts, create_seconds=0.05, delete_seconds=0.05) as emu,
        aiohttp.ClientSession() as session,
    ):
        http = Http(emu.url, session)
        await create(http, "h", acceleratorType="v4-16")
        await asyncio.sleep(0.2)  # nobody polls: the driver alone makes it READY
        assert [c[:2] for c in hosts.calls] == [("start", "h")]
        assert len(hosts.calls[0][2]) == 2
        await http("DELETE", f"{NODES}/h")
        await asyncio.sleep(0.02)
        assert [c[:2] for c in hosts.calls] == [("start", "h"), ("stop", "h")]
    assert hosts.closed


async def test_creates_beyond_the_per_minute_quota_are_refused_until_the_next_minute(
    session: aiohttp.ClientSession,
) -> None:
    """`create_requests_per_minute` (research section 9 row 26): the reported TPU API
    refusal, 429 RESOURCE_EXHAUSTED "Maximum number of CreateNode requests per minute", per
    project and minute of the emulator's clock; tpucared classifies it as a rate limit."""
    clock = ManualClock(start=1_800_000_000.0)  # a minute's start
    async with running_emulator(clock=clock, create_requests_per_minute=2) as server:
        http = Http(server.url, session)
        assert [(await http("POST", NODES, SPEC, nodeId=f"q{i}"))[0] for i in range(2)] == [200] * 2
        status, body = await http("POST", NODES, SPEC, nodeId="q2")
        assert status == 429
        error = body["error"]
        assert error["status"] == "RESOURCE_EXHAUSTED"
        assert "Maximum number of CreateNode requests per minute" in error["message"]
        assert classify_http(status, body).kind is ErrorKind.RATE_LIMITED
        status, _ = await http("GET", f"{NODES}/q2")
        assert status == 404  # refused: nothing made
        # Another project has its own quota; the next minute has room again.
        other = NODES.replace(P, "other-proj")
        assert (await http("POST", other, SPEC, nodeId="q3"))[0] == 200
        clock.advance(60)
        assert (await http("POST", NODES, SPEC, nodeId="q2"))[0] == 200
