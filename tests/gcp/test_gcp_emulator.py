"""TpuClient and observe_zone against the emulator: the real v2 paths, shapes and error envelopes.

Uses the shared `emulator` fixture (tests/conftest.py) and its control API under
/_emulator/v1 for capacity, scripted faults, preemption and the request log. Retry sleeps are
recorded, not slept; operation polling sleeps for real, briefly (the emulator's clock is real
time with fast timings).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from gcp_fakes import EmulatorControl, Sleeps

from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, CapacityKind, ErrorKind
from tpucared.gcp.errors import (
    AlreadyExistsError,
    ApiError,
    CapacityError,
    InvalidRequestError,
    NotFoundError,
)
from tpucared.gcp.tpu import names
from tpucared.gcp.tpu.bodies import NodeShape
from tpucared.gcp.tpu.client import TpuClient
from tpucared.gcp.tpu.observe import LIST_PAGE_SIZE, NODE_LIST_FIELDS, observe_zone
from tpucared.gcp.tpu.operation import Operation
from tpucared.gcp.tpu.states import NodeState, QueuedState

P = "emu-project"
ZONE = "us-central2-b"
TYPE = "v4-8"
RUNTIME = "tpu-ubuntu2204-base"
LABELS = {FLEET_LABEL: "sweep", OWNER_LABEL: "daemon-1"}
POLL = 0.02


class Control(EmulatorControl):
    """The emulator's control API (/_emulator/v1), over its own session."""

    async def faults(self, **config: Any) -> None:
        await self.send("PUT", "/faults", config)

    async def script(self, *kinds: str | dict[str, Any], paths: list[str] | None = None) -> None:
        entries = [{"kind": k} if isinstance(k, str) else k for k in kinds]
        config: dict[str, Any] = {"script": entries}
        if paths is not None:
            config["paths"] = paths
        await self.faults(**config)

    async def capacity(self, zone: str, accelerator_type: str, available: int) -> None:
        body = {"zone": zone, "accelerator_type": accelerator_type, "available": available}
        await self.send("PUT", "/capacity", body)

    async def preempt(self, node_id: str) -> None:
        await self.send("POST", f"/projects/{P}/locations/{ZONE}/nodes/{node_id}:preempt")

    async def reset(self) -> None:
        await self.send("POST", "/reset")

    async def requests(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self.send("GET", "/requests")
        return result

    async def reset_requests(self) -> None:
        await self.send("DELETE", "/requests")


@pytest.fixture
async def control(emulator: Any) -> AsyncIterator[Control]:
    async with aiohttp.ClientSession() as session:
        control = Control(emulator.url, session)
        # A clean cloud whatever the fixture's scope: no nodes, faults, limits or log.
        await control.reset()
        yield control


@pytest.fixture
def client_options(control: Control, sleeps: Sleeps) -> dict[str, Any]:
    # `control` first: the client meets a cloud it has reset.
    return {"sleep": sleeps, "rng": lambda: 0.5}


async def create(client: TpuClient, node_id: str, **options: Any) -> Operation:
    options.setdefault("accelerator_type", TYPE)
    options.setdefault("extra", {"runtime_version": RUNTIME})
    options.setdefault("capacity", CapacityKind.SPOT)
    options.setdefault("labels", LABELS)
    return await client.create_node(P, ZONE, node_id, NodeShape(**options))


async def wait(client: TpuClient, operation: Operation | str) -> Operation:
    return await client.wait_operation(
        operation, poll_interval=POLL, timeout=30, sleep=asyncio.sleep
    )


def v2_requests(log: list[dict[str, Any]], fragment: str = "") -> list[dict[str, Any]]:
    return [r for r in log if r["path"].startswith("/v2/") and fragment in r["path"]]


# -- lifecycle -----------------------------------------------------------------------------------


async def test_create_wait_get_list_delete(client: TpuClient, control: Control) -> None:
    operation = await create(client, "sweep-0")
    assert not operation.done
    assert operation.target == names.node_name(P, ZONE, "sweep-0")
    done = await wait(client, operation)
    assert done.done
    assert done.error is None
    assert done.response is not None

    node = await client.get_node(P, ZONE, "sweep-0")
    assert node["state"] == "READY"
    assert node["labels"] == LABELS
    assert node["schedulingConfig"] == {"spot": True}
    assert node["networkConfig"]["enableExternalIps"] is True
    assert node["networkEndpoints"][0]["accessConfig"]["externalIp"]

    listed = await client.list_nodes(P, ZONE)
    assert [n["name"] for n in listed] == [names.node_name(P, ZONE, "sweep-0")]

    deleted = await wait(client, await client.delete_node(P, ZONE, "sweep-0"))
    assert deleted.done
    assert deleted.error is None
    with pytest.raises(NotFoundError):
        await client.get_node(P, ZONE, "sweep-0")
    with pytest.raises(NotFoundError):
        await client.delete_node(P, ZONE, "sweep-0")  # gone: a delete that is already done
    assert await client.list_nodes(P, ZONE) == []


async def test_list_follows_pages_to_the_end(client: TpuClient, control: Control) -> None:
    ids = [f"page-{i:02d}" for i in range(12)]
    operations = await asyncio.gather(*(create(client, i) for i in ids))
    await asyncio.gather(*(wait(client, op) for op in operations))
    listed = await client.list_nodes(P, ZONE)
    assert sorted(names.short_name(n["name"]) for n in listed) == ids
    pages = [r for r in v2_requests(await control.requests()) if r["path"].endswith("/nodes")]
    list_calls = [r for r in pages if r["method"] == "GET"]
    assert len(list_calls) >= 3  # the emulator's default page is small
    assert "pageToken" not in list_calls[0]["query"]
    assert all("pageToken" in r["query"] for r in list_calls[1:])
    assert client.request_counts[("nodes.list", "200")] == len(list_calls)
    explicit = await client.list_nodes(P, ZONE, page_size=100)
    assert len(explicit) == 12


async def test_observe_asks_for_big_pages_and_follows_smaller_ones(
    client: TpuClient, control: Control, emulator: Any
) -> None:
    # A zone observation asks for LIST_PAGE_SIZE per page (the API default is small and
    # undocumented); a server whose maximum is lower coerces it (AIP-158) and the observer
    # still follows every page.
    ids = [f"big-{i}" for i in range(9)]
    operations = await asyncio.gather(*(create(client, i) for i in ids))
    await asyncio.gather(*(wait(client, op) for op in operations))
    emulator.state.options.max_page_size = 4
    await control.reset_requests()
    observation = await observe_zone(client, P, ZONE, datetime.now(UTC))
    assert observation.ok
    assert sorted(n.name for n in observation.nodes) == ids
    lists = [r for r in v2_requests(await control.requests(), "/nodes") if r["method"] == "GET"]
    assert len(lists) == 3  # 4 + 4 + 1
    assert {r["query"]["pageSize"] for r in lists} == {str(LIST_PAGE_SIZE)}
    assert {r["query"]["fields"] for r in lists} == {NODE_LIST_FIELDS}  # a partial response
    assert observation.nodes[0].endpoints  # ... that keeps what the planner reads


async def test_observe_reuses_unchanged_nodes_through_its_cache(
    client: TpuClient, control: Control
) -> None:
    operations = await asyncio.gather(*(create(client, f"c-{i}") for i in range(3)))
    await asyncio.gather(*(wait(client, op) for op in operations))
    cache: dict[str, Any] = {}
    first = await observe_zone(client, P, ZONE, datetime.now(UTC), cache=cache)
    await control.preempt("c-1")
    second = await observe_zone(client, P, ZONE, datetime.now(UTC), cache=cache)
    before = {n.name: n for n in first.nodes}
    after = {n.name: n for n in second.nodes}
    assert after["c-0"] is before["c-0"]
    assert after["c-2"] is before["c-2"]
    assert after["c-1"].state is NodeState.PREEMPTED
    assert after == {
        n.name: n for n in (await observe_zone(client, P, ZONE, first.observed_at)).nodes
    }
    # A failed list changes nothing in the cache.
    await control.script("permission")
    failed = await observe_zone(client, P, ZONE, datetime.now(UTC), cache=cache)
    assert failed.error is ErrorKind.PERMISSION
    assert {v[1].name: v[1] for v in cache.values()} == after


async def test_catalogue_lists(client: TpuClient) -> None:
    types = await client.list_accelerator_types(P, ZONE, page_size=2)
    assert TYPE in {t.get("type") for t in types}
    versions = await client.list_runtime_versions(P, ZONE)
    assert RUNTIME in {v.get("version") for v in versions}


async def test_patch_and_guest_attributes(client: TpuClient) -> None:
    await wait(client, await create(client, "keys-0"))
    name = names.node_name(P, ZONE, "keys-0")
    ssh_keys = "tpucared:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample tpucared"
    await wait(
        client, await client.patch_node(name, {"metadata": {"ssh-keys": ssh_keys}}, ["metadata"])
    )
    assert (await client.get_node(name))["metadata"] == {"ssh-keys": ssh_keys}
    attributes = await client.get_guest_attributes(name, "hostkeys/", [0])
    (worker,) = attributes["guestAttributes"]
    keys = {item["key"]: item["value"] for item in worker["queryValue"]["items"]}
    assert any(k.startswith("ssh-") for k in keys)


# -- errors --------------------------------------------------------------------------------------


async def test_already_exists(client: TpuClient) -> None:
    await create(client, "twice")
    with pytest.raises(AlreadyExistsError) as caught:
        await create(client, "twice")
    assert caught.value.http_status == 409
    assert caught.value.status == "ALREADY_EXISTS"


async def test_invalid_accelerator_type(client: TpuClient) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        await create(client, "bad-type", accelerator_type="v4-99999")
    assert caught.value.kind is ErrorKind.INVALID
    assert "v4-99999" in caught.value.message


async def test_unknown_zone_is_permission_not_vanished(client: TpuClient) -> None:
    with pytest.raises(ApiError) as caught:
        await client.list_nodes(P, "mars-north1-a")
    assert caught.value.kind is ErrorKind.PERMISSION
    observation = await observe_zone(client, P, "mars-north1-a", datetime.now(UTC))
    assert observation.error is ErrorKind.PERMISSION


async def test_no_capacity_fails_the_operation(client: TpuClient, control: Control) -> None:
    await control.capacity(ZONE, TYPE, 0)
    operation = await create(client, "starved")  # the POST itself succeeds
    with pytest.raises(CapacityError) as caught:
        await wait(client, operation)
    assert caught.value.code == 8
    assert "no more capacity" in caught.value.message
    assert caught.value.operation == operation.name


async def test_reserved_capacity_message(client: TpuClient, control: Control) -> None:
    await control.capacity(ZONE, TYPE, 0)
    operation = await create(client, "reserved-0", capacity=CapacityKind.RESERVED)
    with pytest.raises(CapacityError, match="Insufficient reserved capacity"):
        await wait(client, operation)


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        ("quota", ErrorKind.QUOTA),
        ("permission", ErrorKind.PERMISSION),
    ],
)
async def test_permanent_faults_surface_without_retry(
    client: TpuClient, control: Control, sleeps: Sleeps, fault: str, kind: ErrorKind
) -> None:
    await control.script(fault)
    with pytest.raises(ApiError) as caught:
        await create(client, "denied")
    assert caught.value.kind is kind
    assert caught.value.attempts == 1
    assert sleeps.delays == []
    assert len(v2_requests(await control.requests())) == 1


async def test_rate_limited_honours_retry_after(
    client: TpuClient, control: Control, sleeps: Sleeps
) -> None:
    await control.script({"kind": "rate_limited", "retry_after_s": 2})
    assert await client.list_nodes(P, ZONE) == []
    assert len(sleeps.delays) == 1
    assert sleeps.delays[0] >= 2.0
    statuses = [r["status"] for r in v2_requests(await control.requests())]
    assert statuses == [429, 200]


@pytest.mark.parametrize("fault", ["unavailable", "internal", "deadline", "conflict"])
async def test_retryable_faults_then_success(
    client: TpuClient, control: Control, sleeps: Sleeps, fault: str
) -> None:
    await control.script(fault, fault)
    operation = await create(client, f"retry-{fault}")
    assert operation.target == names.node_name(P, ZONE, f"retry-{fault}")
    assert sleeps.delays == [0.25, 0.5]  # rng 0.5 x (0.5, 1.0)
    log = v2_requests(await control.requests())
    assert [r["fault"] for r in log] == [fault, fault, None]


async def test_dropped_connection_is_retried(
    client: TpuClient, control: Control, sleeps: Sleeps
) -> None:
    await control.script("drop")
    operation = await create(client, "dropped")
    assert operation.name
    assert [r["status"] for r in v2_requests(await control.requests())] == [0, 200]
    assert client.request_counts[("nodes.create", "error")] == 1
    assert len(sleeps.delays) == 1


async def test_retries_exhausted_surfaces_transient(
    client: TpuClient, control: Control, sleeps: Sleeps
) -> None:
    await control.script(*["unavailable"] * 6)
    with pytest.raises(ApiError) as caught:
        await client.list_nodes(P, ZONE)
    assert caught.value.kind is ErrorKind.TRANSIENT
    assert caught.value.http_status == 503
    assert caught.value.attempts == 6
    assert len(sleeps.delays) == 5
    assert len(v2_requests(await control.requests())) == 6


async def test_lost_create_response_then_already_exists(
    client: TpuClient, control: Control
) -> None:
    # The create took effect but its answer was lost; the retry finds our own node. The
    # planner adopts it by its labels (DESIGN: ALREADY_EXISTS on create means adopt).
    await control.script({"kind": "unavailable", "after": True})
    with pytest.raises(AlreadyExistsError):
        await create(client, "lost-answer")
    node = await client.get_node(P, ZONE, "lost-answer")
    assert node["labels"] == LABELS


# -- observe_zone --------------------------------------------------------------------------------


async def test_observe_zone_sees_every_node_and_preemption(
    client: TpuClient, control: Control
) -> None:
    operations = await asyncio.gather(*(create(client, f"obs-{i}") for i in range(7)))
    await asyncio.gather(*(wait(client, op) for op in operations))
    await control.preempt("obs-3")
    now = datetime(2025, 4, 10, 12, tzinfo=UTC)
    observation = await observe_zone(client, P, ZONE, now)
    assert observation.ok
    assert observation.observed_at == now
    assert observation.queued_resources is None
    by_name = {n.name: n for n in observation.nodes}
    assert sorted(by_name) == [f"obs-{i}" for i in range(7)]
    assert by_name["obs-3"].state is NodeState.PREEMPTED
    ready = by_name["obs-0"]
    assert ready.state is NodeState.READY
    assert ready.owned_by("daemon-1")
    assert ready.zone == ZONE
    assert ready.accelerator_type == TYPE
    assert ready.endpoints
    assert ready.endpoints[0].external_ip
    assert ready.create_time is not None
    assert ready.create_time.tzinfo is UTC


async def test_observe_zone_failure_is_an_error_observation(
    client: TpuClient, control: Control
) -> None:
    await wait(client, await create(client, "hidden"))
    await control.script(*["unavailable"] * 6)
    now = datetime(2025, 4, 10, 12, tzinfo=UTC)
    observation = await observe_zone(client, P, ZONE, now)
    assert not observation.ok
    assert observation.error is ErrorKind.TRANSIENT
    assert observation.nodes == ()  # not "the zone is empty"
    assert observation.error_message
    assert "unavailable" in observation.error_message.lower()


async def test_observe_zone_fails_whole_when_the_second_page_fails(
    client: TpuClient, control: Control, emulator: Any
) -> None:
    operations = await asyncio.gather(*(create(client, f"pg-{i}") for i in range(7)))
    await asyncio.gather(*(wait(client, op) for op in operations))
    emulator.state.options.max_page_size = 5  # the observer asks for more: make a second page
    await control.script("ok", *["permission"])
    observation = await observe_zone(client, P, ZONE, datetime.now(UTC))
    assert observation.error is ErrorKind.PERMISSION
    assert observation.nodes == ()


# -- queued resources ----------------------------------------------------------------------------


async def test_queued_resource_lifecycle(client: TpuClient) -> None:
    created = await client.create_queued_resource(
        P,
        ZONE,
        "queued-0",
        node_id="queued-0",
        shape=NodeShape(
            accelerator_type=TYPE,
            extra={"runtime_version": RUNTIME},
            capacity=CapacityKind.SPOT,
            labels=LABELS,
        ),
    )
    await wait(client, created)
    name = names.queued_resource_name(P, ZONE, "queued-0")
    state = ""
    for _ in range(500):
        state = (await client.get_queued_resource(name))["state"]["state"]
        if state == "ACTIVE":
            break
        await asyncio.sleep(POLL)
    assert state == "ACTIVE"
    node = await client.get_node(P, ZONE, "queued-0")
    assert node["schedulingConfig"] == {"spot": True}
    listed = await client.list_queued_resources(P, ZONE)
    assert [q["name"] for q in listed] == [name]

    observation = await observe_zone(client, P, ZONE, datetime.now(UTC), queued_resources=True)
    assert observation.queued_resources is not None
    (qr,) = observation.queued_resources
    assert (qr.name, qr.state, qr.node_names) == ("queued-0", QueuedState.ACTIVE, ("queued-0",))
    assert qr.owned_by("daemon-1")

    await wait(client, await client.delete_queued_resource(name, force=True))
    for _ in range(500):
        try:
            await client.get_queued_resource(name)
        except NotFoundError:
            break
        await asyncio.sleep(POLL)
    else:
        pytest.fail("the queued resource was never deleted")
    with pytest.raises(NotFoundError):
        await client.get_node(P, ZONE, "queued-0")
