"""The emulator answers what Google answers (issue 39): every JSON answer it serves in a full
scenario, parsed strictly into Google's own types.

One emulator records every answer it serves on `/compute/v1/` and `/v2/` (a middleware in
front of its own: what a client received, whoever sent the request). The daemon's own adapters
(`ComputeCloud`, `TpuCloud`, with their bodies: bodies.py, shared.py, slices.py) drive a
scenario: a single-host spot VM created, observed, its host keys read, preempted and deleted; a
4-host slice (a MIG with its workload policy and template) made, observed, one member
preempted, deleted, the templates and policies swept; a flex-start VM waiting for capacity; a
TPU node and a queued resource through the TPU API, with operations, guest attributes and the
catalog reads. Then each 2xx answer is checked:

- Compute Engine: `google.cloud.compute_v1`'s message for that method, by the emulator's own
  strict walk (emulator/tpucared_emulator/compute/official.py: unknown names, JSON types, enum
  values)
  and `from_json(..., ignore_unknown_fields=False)`; plus the output fields Google always
  fills for that resource (kind, id as a decimal string, selfLink, creationTimestamp, ...).
- TPU API: the v2 discovery document's response schema and google-cloud-tpu's message
  (emulator/tpucared_emulator/official_tpu.py), long-running operations also as
  `google.longrunning.Operation` with their metadata and response `Any`s resolved.

Each type the scenario should produce must have been seen at least once, so a route that
stops being exercised fails here rather than passing by having nothing to check. The tables
and the checks: official_answers_support.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from official_answers_support import (
    COMPUTE,
    MACHINE,
    NOW,
    OPTIONS,
    OWNER,
    REGION,
    TPU,
    TPU_ZONE,
    ZONE,
    Answer,
    P,
    problems,
)

from tpucared.core.model.observed import StateClass
from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, CapacityKind
from tpucared.gcp import NoAuth
from tpucared.gcp.compute import ComputeClient, ComputeCloud
from tpucared.gcp.tpu import TpuClient
from tpucared.gcp.tpu.cloud import TpuCloud
from tpucared.ports.cloud import NodeShape, OperationState
from tpucared_emulator import EmulatorServer
from tpucared_emulator.options import EmulatorOptions


class RecordingEmulator(EmulatorServer):
    """The emulator, keeping every JSON answer of its two APIs as the client received it."""

    def __init__(self, options: EmulatorOptions) -> None:
        super().__init__(options)
        self.answers: list[Answer] = []

    def build_app(self) -> web.Application:
        app = super().build_app()

        @web.middleware
        async def record(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            response = await handler(request)
            if request.path.startswith(("/compute/v1/", "/v2/")) and isinstance(
                response, web.Response
            ):
                raw = response.body
                assert isinstance(raw, bytes), (request.path, type(raw))
                text = raw.decode()
                body = json.loads(text) if text.strip() else None
                partial = "fields" in request.query
                self.answers.append(
                    Answer(request.method, request.path, response.status, body, partial)
                )
            return response

        app.middlewares.insert(0, record)  # outermost: errors already rendered, as sent
        return app


@pytest.fixture
async def recording() -> AsyncIterator[RecordingEmulator]:
    server = RecordingEmulator(EmulatorOptions(**OPTIONS))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


# -- The scenario ------------------------------------------------------------------------------


def compute_shape(**overrides: Any) -> NodeShape:
    fields: dict[str, Any] = {
        "accelerator_type": MACHINE,
        "extra": {"runtime_version": ""},
        "capacity": CapacityKind.SPOT,
        "labels": {FLEET_LABEL: "iron", OWNER_LABEL: OWNER},
        "metadata": {"ssh-keys": "tpucared:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA tpucared"},
    }
    return NodeShape(**{**fields, **overrides})


async def finished(poll: Callable[[str], Awaitable[OperationState]], op: OperationState) -> None:
    for _ in range(500):
        if op.done:
            assert op.error is None, op.error
            return
        await asyncio.sleep(0.02)
        op = await poll(op.name)
    raise AssertionError(f"{op.name} never done")


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(400):
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never {what}")


class Control:
    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url, self.session = url, session

    async def __call__(self, method: str, path: str, body: Any = None) -> Any:
        async with self.session.request(method, self.url + path, json=body) as response:
            text = await response.text()
            assert response.status < 300, (method, path, response.status, text)
            return json.loads(text) if text.strip() else None


async def compute_scenario(cloud: ComputeCloud, call: Control) -> None:
    async def node(name: str) -> Any:
        seen = await cloud.observe(P, ZONE, NOW, queued_resources=False)
        assert seen.ok, seen.error_message
        return next((n for n in seen.nodes if n.name == name), None)

    async def usable(name: str) -> bool:
        found = await node(name)
        return found is not None and found.state_class is StateClass.USABLE

    control = f"/_emulator/v1/projects/{P}/zones/{ZONE}/instances"
    # A single-host spot VM: created, observed, its keys, preempted (its operation), deleted.
    await finished(cloud.poll, await cloud.create(P, ZONE, "iron-0", compute_shape()))
    await until(lambda: usable("iron-0"), "iron-0 usable")
    assert await cloud.host_keys(P, ZONE, "iron-0")
    await cloud.client.get_instance(P, ZONE, "iron-0")
    await call("POST", f"{control}/iron-0:preempt")
    await until(lambda: _gone_or(node, "iron-0", "TERMINATED"), "iron-0 preempted")
    assert await cloud.preemptions(P, ZONE, ["iron-0"])
    await finished(cloud.poll, await cloud.delete(P, ZONE, "iron-0"))
    # A 4-host slice: policy, template, MIG; observed whole; a member preempted; deleted; swept.
    slice_shape = compute_shape(topology="2x2x4", hosts=4)
    await finished(cloud.poll, await cloud.create(P, ZONE, "iron-1", slice_shape))
    await until(lambda: usable("iron-1"), "iron-1 usable")
    assert len(await cloud.host_keys(P, ZONE, "iron-1")) == 4
    members = await cloud.client.list_managed_instances(P, ZONE, "iron-1")
    member = str(members[0]["instance"]).rsplit("/", 1)[-1]
    await whole_reads(cloud.client, member)
    await call("POST", f"{control}/{member}:preempt")
    await until(lambda: _not_usable(node, "iron-1"), "iron-1 hit")
    assert await cloud.preemptions(P, ZONE, ["iron-1"])
    await finished(cloud.poll, await cloud.delete(P, ZONE, "iron-1"))
    await until(lambda: _gone_or(node, "iron-1", None), "iron-1 gone")
    assert await cloud.sweep(P, ZONE)
    # Flex-start: waits for capacity, then runs.
    await call(
        "PUT", "/_emulator/v1/capacity", {"zone": ZONE, "machine_type": MACHINE, "available": 0}
    )
    flex = compute_shape(capacity=CapacityKind.FLEX_START, max_run_duration_s=600)
    waiting = await cloud.create(P, ZONE, "iron-2", flex)  # may finish only once it runs
    await node("iron-2")
    await call(
        "PUT", "/_emulator/v1/capacity", {"zone": ZONE, "machine_type": MACHINE, "available": 8}
    )
    # Listed running first, as the daemon's ticks list it: a waiting flex-start slice is read
    # again only when its zone's MIG list shows it moved (gcp/compute/waiting.py).
    await until(lambda: usable("iron-2"), "iron-2 running")
    await finished(cloud.poll, waiting)
    for managed in await cloud.client.list_managed_instances(P, ZONE, "iron-2"):
        await cloud.client.get_instance(P, ZONE, str(managed["name"]))
    await finished(cloud.poll, await cloud.delete(P, ZONE, "iron-2"))


async def whole_reads(client: ComputeClient, member: str) -> None:
    """Reads without `fields` (the daemon's lists select a few), while a slice and its
    template and policy exist, so every resource is seen whole at least once."""
    zonal = f"{client.endpoint}/compute/v1/projects/{P}/zones/{ZONE}"
    await client.get_instance(P, ZONE, member)
    await client.request("machineTypes.get", "GET", f"{zonal}/machineTypes/{MACHINE}")
    for kind in ("instances", "operations", "instanceGroupManagers"):
        await client.request(f"{kind}.list", "GET", f"{zonal}/{kind}")
    [first, *_] = await client.list_operations(P, ZONE)
    await client.wait_operation(P, ZONE, first.name)
    await client.request(
        "instanceGroupManagers.get", "GET", f"{zonal}/instanceGroupManagers/iron-1"
    )
    regional = f"{client.endpoint}/compute/v1/projects/{P}/regions/{REGION}"
    [policy] = await client.list_policies(P, REGION)
    await client.get_policy(P, REGION, str(policy["name"]))
    await client.request("resourcePolicies.list", "GET", f"{regional}/resourcePolicies")
    templates = await client.list_templates(P)
    await client.get_template(P, str(templates[0]["name"]))
    await client.request(
        "instanceTemplates.list",
        "GET",
        f"{client.endpoint}/compute/v1/projects/{P}/global/instanceTemplates",
    )


async def _gone_or(node: Callable[[str], Awaitable[Any]], name: str, state: str | None) -> bool:
    found = await node(name)
    return found is None or found.state == state


async def _not_usable(node: Callable[[str], Awaitable[Any]], name: str) -> bool:
    found = await node(name)
    return found is None or found.state_class is not StateClass.USABLE


async def tpu_scenario(cloud: TpuCloud, client: TpuClient, call: Control) -> None:
    shape = NodeShape(
        accelerator_type="v4-8",
        extra={"runtime_version": "tpu-ubuntu2204-base"},
        capacity=CapacityKind.SPOT,
        labels={FLEET_LABEL: "sweep", OWNER_LABEL: OWNER},
    )
    await finished(cloud.poll, await cloud.create(P, TPU_ZONE, "tpu-0", shape))
    seen = await cloud.observe(P, TPU_ZONE, NOW, queued_resources=True)
    assert seen.ok
    assert await cloud.host_keys(P, TPU_ZONE, "tpu-0")
    await client.get_node(P, TPU_ZONE, "tpu-0")
    await call("POST", f"/_emulator/v1/projects/{P}/locations/{TPU_ZONE}/nodes/tpu-0:preempt")
    await client.get_node(P, TPU_ZONE, "tpu-0")
    await finished(cloud.poll, await cloud.delete(P, TPU_ZONE, "tpu-0"))
    # A queued resource: created, listed, read, deleted with its node.
    await finished(cloud.poll, await cloud.create(P, TPU_ZONE, "tpu-1", shape, queued="qr-1"))

    async def provisioned() -> bool:
        seen = await cloud.observe(P, TPU_ZONE, NOW, queued_resources=True)
        return any(n.name == "tpu-1" for n in seen.nodes)

    await until(provisioned, "tpu-1 made by its queued resource")
    base = f"{client.endpoint}/v2/projects/{P}/locations/{TPU_ZONE}"
    await client.request("queuedResources.get", "GET", f"{base}/queuedResources/qr-1")
    await client.request("queuedResources.list", "GET", f"{base}/queuedResources")
    await finished(cloud.poll, await cloud.delete(P, TPU_ZONE, "tpu-1", queued="qr-1"))
    await client.request("operations.list", "GET", f"{base}/operations")
    await client.request("locations.list", "GET", f"{client.endpoint}/v2/projects/{P}/locations")
    await client.request("locations.get", "GET", base)
    await client.list_accelerator_types(P, TPU_ZONE)
    await client.list_runtime_versions(P, TPU_ZONE)
    await client.request("acceleratorTypes.get", "GET", f"{base}/acceleratorTypes/v4-8")
    await client.request(
        "runtimeVersions.get", "GET", f"{base}/runtimeVersions/tpu-ubuntu2204-base"
    )
    await client.request(
        "generateServiceIdentity", "POST", f"{base}:generateServiceIdentity", body={}
    )


async def test_every_answer_of_a_full_scenario_is_googles_shape(
    recording: RecordingEmulator,
) -> None:
    async with aiohttp.ClientSession() as session:
        call = Control(recording.url, session)
        async with ComputeClient(recording.url, token_source=NoAuth()) as compute:
            await compute_scenario(ComputeCloud(compute, owner=OWNER), call)
        async with TpuClient(recording.url, token_source=NoAuth()) as tpu:
            await tpu_scenario(TpuCloud(tpu), tpu, call)
    seen: set[str] = set()
    found: list[str] = []
    for answer in recording.answers:
        for problem in problems(answer, seen):
            if problem not in found:
                found.append(problem)
    assert not found, "\n".join(found)
    expected = {f"{m} {p}" for m, p, _ in (*COMPUTE, *TPU)}
    assert not expected - seen, sorted(expected - seen)
