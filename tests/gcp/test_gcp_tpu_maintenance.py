"""`TpuCloud.start_maintenance` (the Cloud port's early start of an announced host-maintenance
window, issue 41 item 2) against the emulator: v2alpha1 `nodes:performMaintenance` with an empty
body, an operation back and the node's `upcomingMaintenance` ONGOING; refused as a `CloudError`
of kind INVALID where the API will not start one early (tpu/docs/manually-start-maintenance:
"canReschedule set to true and maintenanceStatus set to PENDING"; Limitations: any v4 or v5p,
v5e or v6e from 2x4 up), so the daemon's policy can say so and fall back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from gcp_fakes import FakeApi, Reply

from tpucared.core.model.observed import MaintenanceWindow, ObservedNode
from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, CapacityKind, ErrorKind
from tpucared.gcp.auth import NoAuth
from tpucared.gcp.tpu import TpuClient
from tpucared.gcp.tpu.cloud import TpuCloud
from tpucared.ports.cloud import CloudError, NodeShape, OperationState
from tpucared_emulator import EmulatorServer

P = "emu-project"
ZONE = "us-central2-b"
V6E_ZONE = "us-east5-a"
# A window an hour ahead: nothing of it happens during the test unless it is started early.
WINDOW = {"start_in_seconds": 3600, "duration_seconds": 60, "type": "SCHEDULED"}


def shape(accelerator_type: str) -> NodeShape:
    runtime = "v2-alpha-tpuv6e" if accelerator_type.startswith("v6e") else "tpu-ubuntu2204-base"
    return NodeShape(
        accelerator_type=accelerator_type,
        extra={"runtime_version": runtime},
        capacity=CapacityKind.ON_DEMAND,
        labels={FLEET_LABEL: "mend", OWNER_LABEL: "daemon-1"},
    )


@pytest.fixture
async def cloud(emulator: EmulatorServer) -> AsyncIterator[TpuCloud]:
    tpu = TpuCloud.connect(emulator.url, token_source=NoAuth())
    yield tpu
    await tpu.aclose()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def control(
    emulator: EmulatorServer, session: aiohttp.ClientSession, method: str, path: str,
    body: Any = None,
) -> Any:  # fmt: skip
    async with session.request(method, f"{emulator.url}/_emulator/v1{path}", json=body) as r:
        text = await r.text()
        assert r.status < 300, (method, path, r.status, text)
        return await r.json() if text.strip() else None


async def ready(cloud: TpuCloud, name: str, accelerator_type: str, zone: str = ZONE) -> None:
    op = await cloud.create(P, zone, name, shape(accelerator_type))
    while not op.done:
        await asyncio.sleep(0.02)
        op = await cloud.poll(op.name)
    assert op.error is None, op.error


async def observed(cloud: TpuCloud, name: str, zone: str = ZONE) -> ObservedNode:
    listed = await cloud.observe(P, zone, datetime.now(UTC), queued_resources=False)
    assert listed.ok, listed.error_message
    return next(n for n in listed.nodes if n.name == name)


async def announce(
    emulator: EmulatorServer, session: aiohttp.ClientSession, name: str, zone: str = ZONE
) -> None:
    path = f"/projects/{P}/locations/{zone}/nodes/{name}:schedule-maintenance"
    await control(emulator, session, "POST", path, WINDOW)


async def test_a_v4_node_with_a_window_starts_it_now(
    cloud: TpuCloud, emulator: EmulatorServer, session: aiohttp.ClientSession
) -> None:
    await ready(cloud, "mend-0", "v4-8")
    await announce(emulator, session, "mend-0")
    pending = (await observed(cloud, "mend-0")).maintenance
    assert isinstance(pending, MaintenanceWindow)
    assert (pending.status, pending.can_reschedule) == ("PENDING", True)
    await control(emulator, session, "DELETE", "/requests")

    op = await cloud.start_maintenance(P, ZONE, "mend-0")

    assert isinstance(op, OperationState)
    assert op.name.startswith(f"projects/{P}/locations/{ZONE}/operations/")
    assert op.error is None
    if not op.done:
        op = await cloud.poll(op.name)  # the zone's operation, read with v2 operations.get
    assert op.done
    assert op.error is None
    ongoing = (await observed(cloud, "mend-0")).maintenance
    assert ongoing is not None
    assert ongoing.status == "ONGOING"
    # The one call: v2alpha1 (only v2alpha1 has the method), POST, no query. The emulator
    # refuses any body field ("The request body must be empty"), so its 200 is the body's check.
    log = await control(emulator, session, "GET", "/requests")
    calls = [r for r in log if r["path"].endswith(":performMaintenance")]
    assert [(r["method"], r["path"], r["status"]) for r in calls] == [
        ("POST", f"/v2alpha1/projects/{P}/locations/{ZONE}/nodes/mend-0:performMaintenance", 200)
    ]
    assert calls[0]["query"] == {}


async def test_a_node_without_a_window_is_refused_as_invalid(cloud: TpuCloud) -> None:
    await ready(cloud, "mend-0", "v4-8")
    with pytest.raises(CloudError) as refused:
        await cloud.start_maintenance(P, ZONE, "mend-0")
    assert refused.value.kind is ErrorKind.INVALID
    assert (await observed(cloud, "mend-0")).maintenance is None


async def test_a_v6e_below_2x4_is_refused_as_invalid_even_with_a_window(
    cloud: TpuCloud, emulator: EmulatorServer, session: aiohttp.ClientSession
) -> None:
    await ready(cloud, "mend-0", "v6e-4", V6E_ZONE)
    await announce(emulator, session, "mend-0", V6E_ZONE)
    with pytest.raises(CloudError) as refused:
        await cloud.start_maintenance(P, V6E_ZONE, "mend-0")
    assert refused.value.kind is ErrorKind.INVALID
    window = (await observed(cloud, "mend-0", V6E_ZONE)).maintenance
    assert window is not None
    assert window.status == "PENDING"


async def test_a_missing_node_is_not_found(cloud: TpuCloud) -> None:
    with pytest.raises(CloudError) as gone:
        await cloud.start_maintenance(P, ZONE, "nobody")
    assert gone.value.kind is ErrorKind.NOT_FOUND


async def test_the_request_body_is_an_empty_object(fake_api: FakeApi) -> None:
    """The body on the wire, which the emulator's request log does not keep: `{}` (googleapis
    v2alpha1 cloud_tpu.proto: `post: "/v2alpha1/{name=...}:performMaintenance" body: "*"`,
    and the request's only field is the name in the URL)."""
    name = f"projects/{P}/locations/{ZONE}/operations/operation-1"
    fake_api.push(Reply(body={"name": name, "done": True}))
    async with TpuClient(fake_api.url, token_source=NoAuth()) as client:
        op = await client.perform_maintenance(P, ZONE, "mend-0")
    assert op.name == name
    [seen] = fake_api.requests
    assert (seen.method, seen.path) == (
        "POST", f"/v2alpha1/projects/{P}/locations/{ZONE}/nodes/mend-0:performMaintenance"
    )  # fmt: skip
    assert json.loads(seen.body) == {}
