"""`ComputeCloud.start_maintenance` (the Cloud port's early start of an announced host-maintenance
window, issue 41 item 2) against the emulator over loopback: a VM with a pending window ->
`instances.performMaintenance` (POST, no body, a `requestId`: compute/docs/reference/rest/v1/
instances/performMaintenance, "The request body must be empty") answers an operation and the
window turns ONGOING; a VM without one -> a `CloudError` of kind INVALID (Google's refusal is
not published; the emulator answers 400, `compute_perform_without_window = "refuse"`). A MIG
slice has no window of its own: each member (a host of its own) is asked, a member with
nothing pending is refused and skipped, and only a slice whose every member refuses is INVALID.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from gcp_fakes import FakeApi, Reply

from tpucared.core.model.observed import ObservedNode, StateClass
from tpucared.core.model.specs import CapacityKind, ErrorKind
from tpucared.gcp import NoAuth
from tpucared.gcp.compute import ComputeClient, ComputeCloud
from tpucared.ports.cloud import CloudError

from .support import ZONE, Control, P, finished, shape

NOW = datetime(2026, 11, 26, tzinfo=UTC)
SLICE = {"topology": "2x2x4", "hosts": 4}
FAST = {"create_seconds": 0.1, "delete_seconds": 0.05, "compute_mig_retry_seconds": 0.1}
# An hour ahead: nothing of it happens during the test unless it is started early.
WINDOW = {"start_in_seconds": 3600, "duration_seconds": 60, "type": "SCHEDULED"}
INSTANCES = f"/compute/v1/projects/{P}/zones/{ZONE}/instances/"


@pytest.fixture
def emulator_options() -> dict[str, Any]:
    return dict(FAST)


async def observe(cloud: ComputeCloud) -> dict[str, ObservedNode]:
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.ok, observation.error_message
    return {n.name: n for n in observation.nodes}


async def usable(cloud: ComputeCloud, name: str) -> ObservedNode:
    for _ in range(300):
        node = (await observe(cloud)).get(name)
        if node is not None and node.state_class is StateClass.USABLE:
            return node
        await asyncio.sleep(0.02)
    raise AssertionError(f"{name} never usable")


async def on_demand(cloud: ComputeCloud, name: str, **more: Any) -> None:
    op = await cloud.create(P, ZONE, name, shape(capacity=CapacityKind.ON_DEMAND, **more))
    done = await finished(cloud, op)
    assert done.error is None, done.error
    await usable(cloud, name)


def performed(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in log if r["path"].endswith("/performMaintenance")]


async def test_a_vm_with_a_window_starts_it_now(cloud: ComputeCloud, control: Control) -> None:
    await on_demand(cloud, "iron-0")
    await control.instance("iron-0", "schedule-maintenance", WINDOW)
    pending = (await observe(cloud))["iron-0"].maintenance
    assert pending is not None
    assert (pending.status, pending.can_reschedule) == ("PENDING", True)
    asked = len(await control.requests())

    op = await cloud.start_maintenance(P, ZONE, "iron-0")

    assert op.name.startswith(f"projects/{P}/zones/{ZONE}/operations/")
    done = await finished(cloud, op)
    assert done.error is None
    ongoing = (await observe(cloud))["iron-0"].maintenance
    assert ongoing is not None
    assert ongoing.status == "ONGOING"
    [call] = performed((await control.requests())[asked:])
    assert (call["method"], call["path"], call["status"]) == (
        "POST", INSTANCES + "iron-0/performMaintenance", 200
    )  # fmt: skip
    assert call["query"]["requestId"]  # a retry of the same call is the same request


async def test_a_vm_without_a_window_is_refused_as_invalid(
    cloud: ComputeCloud, control: Control
) -> None:
    await on_demand(cloud, "iron-0")
    with pytest.raises(CloudError) as refused:
        await cloud.start_maintenance(P, ZONE, "iron-0")
    assert refused.value.kind is ErrorKind.INVALID
    assert (await observe(cloud))["iron-0"].maintenance is None


async def test_a_missing_vm_is_not_found(cloud: ComputeCloud) -> None:
    with pytest.raises(CloudError) as gone:
        await cloud.start_maintenance(P, ZONE, "nobody")
    assert gone.value.kind is ErrorKind.NOT_FOUND


async def members(cloud: ComputeCloud, name: str) -> list[str]:
    listed = await cloud.client.list_managed_instances(P, ZONE, name)
    found = [str(m.get("instance") or "").rsplit("/", 1)[-1] for m in listed]
    assert len(found) == SLICE["hosts"], listed
    return sorted(found)


async def test_a_slice_starts_it_on_each_member_with_a_window_and_skips_the_rest(
    cloud: ComputeCloud, control: Control
) -> None:
    await on_demand(cloud, "iron-0", **SLICE)
    hosts = await members(cloud, "iron-0")
    with_window = hosts[:2]
    for member in with_window:
        await control.instance(member, "schedule-maintenance", WINDOW)
    asked = len(await control.requests())

    op = await cloud.start_maintenance(P, ZONE, "iron-0")

    assert (await finished(cloud, op)).error is None
    calls = performed((await control.requests())[asked:])
    # Every member asked once, each its own requestId; those with nothing pending refused.
    assert sorted(c["path"] for c in calls) == [
        INSTANCES + f"{m}/performMaintenance" for m in hosts
    ]
    assert all(c["method"] == "POST" and c["query"]["requestId"] for c in calls)
    assert len({c["query"]["requestId"] for c in calls}) == len(hosts)
    status = {c["path"].rsplit("/", 2)[-2]: c["status"] for c in calls}
    assert status == {m: 200 if m in with_window else 400 for m in hosts}
    shown = {i["name"]: i["maintenance"] for i in await instances(control)}
    for member in hosts:
        window = shown[member]
        if member in with_window:
            assert window is not None
            assert window["maintenanceStatus"] == "ONGOING", window
        else:
            assert not window, window


async def test_a_slice_whose_every_member_refuses_is_invalid(
    cloud: ComputeCloud, control: Control
) -> None:
    await on_demand(cloud, "iron-0", **SLICE)
    hosts = await members(cloud, "iron-0")
    asked = len(await control.requests())
    with pytest.raises(CloudError) as refused:
        await cloud.start_maintenance(P, ZONE, "iron-0")
    assert refused.value.kind is ErrorKind.INVALID
    calls = performed((await control.requests())[asked:])
    assert sorted(c["path"].rsplit("/", 2)[-2] for c in calls) == hosts
    assert {c["status"] for c in calls} == {400}


async def instances(control: Control) -> list[dict[str, Any]]:
    """The emulator's internal view of every instance (the control API's GET /instances)."""
    found: list[dict[str, Any]] = (await control.send("GET", "/instances"))["instances"]
    return found


async def test_the_request_has_no_body_and_a_uuid_request_id(fake_api: FakeApi) -> None:
    """The body on the wire, which the emulator's request log does not keep: none ("The
    request body must be empty"); `requestId` a UUID ("must be a valid UUID", the REST page)."""
    name = "operation-1"
    fake_api.push(Reply(body={"kind": "compute#operation", "name": name, "status": "DONE"}))
    async with ComputeClient(fake_api.url, token_source=NoAuth()) as client:
        op = await client.perform_maintenance(P, ZONE, "iron-0")
    assert op.name == name
    [seen] = fake_api.requests
    assert (seen.method, seen.path) == ("POST", INSTANCES + "iron-0/performMaintenance")
    assert seen.body == ""
    assert uuid.UUID(seen.query["requestId"])
