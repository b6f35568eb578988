"""Fidelity proof: Google's own client library (google-cloud-tpu, REST transport) drives the
emulator through a node's whole life and gets every error as the right exception class.

The official client is synchronous; each test runs it in a worker thread (`asyncio.to_thread`)
while the emulator serves on the test's event loop. It sends integer enums
(`$alt=json;enum-encoding=int`), reads int64 as strings and follows the operation and page
token protocol exactly as against tpu.googleapis.com, so a pass here means the shapes match.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp
import pytest
from google.api_core import exceptions as gexc
from google.api_core.future import polling
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2

from tpucared_emulator import EmulatorServer

PROJECT = "fidelity"
ZONE = "us-central2-b"
PARENT = f"projects/{PROJECT}/locations/{ZONE}"
RUNTIME = "tpu-ubuntu2204-base"
FAST_POLLING = polling.DEFAULT_POLLING.with_delay(initial=0.02, maximum=0.1, multiplier=1.5)

T = TypeVar("T")


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    # A zone that offers a few types only, so an unoffered one fails the real way.
    return {**emulator_options, "offerings": {ZONE: ["v4-8", "v4-16", "v4-32"]}}


def official_client(emulator: EmulatorServer) -> tpu_v2.TpuClient:
    return tpu_v2.TpuClient(
        transport="rest",
        client_options={"api_endpoint": emulator.url},
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
    )


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking client call off the loop the emulator serves on."""
    return await asyncio.to_thread(fn, *args, **kwargs)


def spot_node(accelerator_type: str = "v4-8", **fields: Any) -> tpu_v2.Node:
    return tpu_v2.Node(
        accelerator_type=accelerator_type,
        runtime_version=RUNTIME,
        scheduling_config=tpu_v2.SchedulingConfig(spot=True),
        network_config=tpu_v2.NetworkConfig(enable_external_ips=True),
        labels={"tpucared-fleet": "proof", "tpucared-owner": "test"},
        **fields,
    )


async def control(emulator: EmulatorServer, method: str, path: str, body: Any = None) -> Any:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"{emulator.url}/_emulator/v1{path}", json=body) as response,
    ):
        assert response.status == 200, await response.text()
        return await response.json()


async def test_create_poll_get_list_delete(emulator: EmulatorServer) -> None:
    client = official_client(emulator)
    operation = await call(
        client.create_node, parent=PARENT, node_id="proof-0", node=spot_node("v4-32")
    )
    node = await call(operation.result, timeout=10, polling=FAST_POLLING)

    assert isinstance(node, tpu_v2.Node)
    assert node.name == f"{PARENT}/nodes/proof-0"
    assert node.state == tpu_v2.Node.State.READY
    assert node.health == tpu_v2.Node.Health.HEALTHY
    assert node.api_version == tpu_v2.Node.ApiVersion.V2
    assert node.id > 0  # int64 travelled as a string and parsed back
    assert node.scheduling_config.spot
    assert len(node.network_endpoints) == 4  # v4-32: 4 hosts
    ips = [e.ip_address for e in node.network_endpoints]
    assert len(set(ips)) == 4
    assert all(ip.startswith("127.") and ip != "127.0.0.1" for ip in ips)
    assert [e.access_config.external_ip for e in node.network_endpoints] == ips
    metadata = operation.metadata
    assert isinstance(metadata, tpu_v2.OperationMetadata)
    assert metadata.verb == "create"
    assert metadata.target == node.name

    got = await call(client.get_node, name=node.name)
    assert got.create_time == node.create_time
    assert dict(got.labels) == {"tpucared-fleet": "proof", "tpucared-owner": "test"}

    attributes = await call(
        client.get_guest_attributes,
        request=tpu_v2.GetGuestAttributesRequest(name=node.name, query_path="hostkeys/"),
    )
    assert len(attributes.guest_attributes) == 4
    keys = [a.query_value.items[0] for a in attributes.guest_attributes]
    assert {(k.namespace, k.key) for k in keys} == {("hostkeys", "ssh-ed25519")}
    assert len({k.value for k in keys}) == 4  # one host key per worker

    deleted = await call(client.delete_node, name=node.name)
    await call(deleted.result, timeout=10, polling=FAST_POLLING)
    with pytest.raises(gexc.NotFound, match="was not found"):
        await call(client.get_node, name=node.name)


async def test_pager_yields_every_node_across_pages(emulator: EmulatorServer) -> None:
    client = official_client(emulator)
    ids = [f"page-{i:02d}" for i in range(13)]  # > 2 default pages of 5
    for node_id in ids:
        await call(client.create_node, parent=PARENT, node_id=node_id, node=spot_node())

    pager = await call(client.list_nodes, parent=PARENT)
    listed = await call(lambda: [n.name.rsplit("/", 1)[1] for n in pager])
    assert listed == ids

    requests = await control(emulator, "GET", "/requests")
    pages = [r for r in requests if r["method"] == "GET" and r["path"].endswith("/nodes")]
    assert len(pages) == 3  # 5 + 5 + 3
    assert pages[0]["query"].get("$alt") == "json;enum-encoding=int"


async def test_integer_enums_in_request_bodies(emulator: EmulatorServer) -> None:
    # AcceleratorConfig.type travels as the integer 7 (V4), not as "V4".
    client = official_client(emulator)
    config = tpu_v2.AcceleratorConfig(type_=tpu_v2.AcceleratorConfig.Type.V4, topology="2x2x2")
    node = tpu_v2.Node(runtime_version=RUNTIME, accelerator_config=config)
    operation = await call(client.create_node, parent=PARENT, node_id="by-config", node=node)
    created = await call(operation.result, timeout=10, polling=FAST_POLLING)
    assert created.accelerator_type == "v4-16"
    assert created.accelerator_config.type_ == tpu_v2.AcceleratorConfig.Type.V4
    assert len(created.network_endpoints) == 2


async def test_patch_metadata_with_update_mask(emulator: EmulatorServer) -> None:
    client = official_client(emulator)
    operation = await call(client.create_node, parent=PARENT, node_id="patched", node=spot_node())
    node = await call(operation.result, timeout=10, polling=FAST_POLLING)
    key = "tpucared:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample tpucared"
    node.metadata["ssh-keys"] = key
    update = await call(client.update_node, node=node, update_mask={"paths": ["metadata"]})
    updated = await call(update.result, timeout=10, polling=FAST_POLLING)
    assert dict(updated.metadata) == {"ssh-keys": key}


async def test_no_capacity_fails_the_operation_with_code_8(emulator: EmulatorServer) -> None:
    await control(
        emulator, "PUT", "/capacity", {"zone": ZONE, "accelerator_type": "v4-8", "available": 0}
    )
    client = official_client(emulator)
    operation = await call(client.create_node, parent=PARENT, node_id="starved", node=spot_node())
    with pytest.raises(gexc.ResourceExhausted) as caught:
        await call(operation.result, timeout=10, polling=FAST_POLLING)
    assert caught.value.grpc_status_code is not None
    assert caught.value.grpc_status_code.value[0] == 8
    assert f'There is no more capacity in the zone "{ZONE}"' in caught.value.message
    assert "[EID: 0x" in caught.value.message
    with pytest.raises(gexc.NotFound):  # the node disappeared with the failed operation
        await call(client.get_node, name=f"{PARENT}/nodes/starved")


async def test_api_errors_map_to_api_core_exceptions(emulator: EmulatorServer) -> None:
    client = official_client(emulator)
    await call(client.create_node, parent=PARENT, node_id="exists", node=spot_node())

    with pytest.raises(gexc.NotFound):
        await call(client.get_node, name=f"{PARENT}/nodes/missing")
    with pytest.raises(gexc.Conflict) as exists:
        await call(client.create_node, parent=PARENT, node_id="exists", node=spot_node())
    assert "already exists" in exists.value.message
    unknown = f"the accelerator v4-128 was not found in zone {ZONE}"
    with pytest.raises(gexc.BadRequest, match=unknown):
        await call(client.create_node, parent=PARENT, node_id="bad", node=spot_node("v4-128"))
    with pytest.raises(gexc.BadRequest, match="nodeId"):
        await call(client.create_node, parent=PARENT, node_id="Not_RFC1035", node=spot_node())
    with pytest.raises(gexc.Forbidden, match="Location mars-north1-a is not found"):
        await call(client.list_nodes, parent=f"projects/{PROJECT}/locations/mars-north1-a")


@pytest.mark.parametrize(
    ("kind", "exception", "needle"),
    [
        ("quota", gexc.TooManyRequests, "Quota 'TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI'"),
        ("rate_limited", gexc.TooManyRequests, "Quota exceeded"),
        ("permission", gexc.Forbidden, "Permission 'tpu.nodes.list' denied"),
        ("conflict", gexc.Conflict, "unable to queue the operation"),
        ("unavailable", gexc.ServiceUnavailable, "unavailable"),
        ("internal", gexc.InternalServerError, "Internal error"),
        ("deadline", gexc.GatewayTimeout, "deadline"),
    ],
)
async def test_injected_faults_map_to_api_core_exceptions(
    emulator: EmulatorServer, kind: str, exception: type[Exception], needle: str
) -> None:
    await control(emulator, "PUT", "/faults", {"script": [{"kind": kind}]})
    client = official_client(emulator)
    with pytest.raises(exception, match=needle) as caught:
        await call(lambda: list(client.list_nodes(parent=PARENT)))
    if kind == "quota":
        details = caught.value.details  # type: ignore[attr-defined]
        assert any("QuotaFailure" in d.get("@type", "") for d in details)


async def test_queued_resource_lifecycle(emulator: EmulatorServer) -> None:
    client = official_client(emulator)
    node = tpu_v2.Node(accelerator_type="v4-8", runtime_version=RUNTIME)
    request = tpu_v2.QueuedResource(
        tpu=tpu_v2.QueuedResource.Tpu(
            node_spec=[
                tpu_v2.QueuedResource.Tpu.NodeSpec(parent=PARENT, node_id="queued", node=node)
            ]
        ),
        spot=tpu_v2.QueuedResource.Spot(),
    )
    operation = await call(
        client.create_queued_resource,
        parent=PARENT,
        queued_resource_id="qr-0",
        queued_resource=request,
    )
    accepted = await call(operation.result, timeout=10, polling=FAST_POLLING)
    waiting = tpu_v2.QueuedResourceState.State.WAITING_FOR_RESOURCES
    assert accepted.state.state == waiting

    active = tpu_v2.QueuedResourceState.State.ACTIVE
    for _ in range(100):
        got = await call(client.get_queued_resource, name=f"{PARENT}/queuedResources/qr-0")
        if got.state.state == active:
            break
        await asyncio.sleep(0.02)
    assert got.state.state == active
    slice_node = await call(client.get_node, name=f"{PARENT}/nodes/queued")
    assert slice_node.queued_resource == got.name
    assert slice_node.scheduling_config.spot

    listed = await call(lambda: list(client.list_queued_resources(parent=PARENT)))
    assert [q.name for q in listed] == [got.name]
    deleted = await call(
        client.delete_queued_resource,
        request=tpu_v2.DeleteQueuedResourceRequest(name=got.name, force=True),
    )
    await call(deleted.result, timeout=10, polling=FAST_POLLING)
    with pytest.raises(gexc.NotFound):
        await call(client.get_queued_resource, name=got.name)
