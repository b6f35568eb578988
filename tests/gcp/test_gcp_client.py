"""TpuClient's request path against a scripted loopback server: what goes on the wire, paging,
garbage, timeouts, dropped connections, operations, counters, session ownership."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from gcp_fakes import FakeApi, Reply

from tpucared import __version__
from tpucared.core.model.specs import CapacityKind, ErrorKind
from tpucared.gcp.errors import ApiError, CapacityError, OperationTimeout
from tpucared.gcp.retry import RetryPolicy
from tpucared.gcp.tpu import names
from tpucared.gcp.tpu.bodies import NodeShape
from tpucared.gcp.tpu.client import TpuClient
from tpucared.gcp.tpu.operation import Operation

P, Z = "my-project", "us-central2-b"
PARENT = f"projects/{P}/locations/{Z}"


class StaticToken:
    """A TokenSource with a fixed token (the protocol, not a stand-in for our code)."""

    def __init__(self, token: str = "t0k") -> None:
        self.token = token
        self.closed = False

    async def authorization(self) -> str | None:
        return f"Bearer {self.token}"

    async def invalidate(self, rejected: str | None = None) -> None:
        return None

    async def aclose(self) -> None:
        self.closed = True


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
async def make_client(fake_api: FakeApi) -> AsyncIterator[Callable[..., TpuClient]]:
    clients: list[TpuClient] = []

    def make(**options: Any) -> TpuClient:
        options.setdefault("token_source", StaticToken())
        options.setdefault("sleep", Sleeps())
        client = TpuClient(fake_api.url, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


def op(name: str = "operation-1", **fields: Any) -> dict[str, Any]:
    return {"name": f"{PARENT}/operations/{name}", **fields}


async def test_create_node_request_on_the_wire(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    fake_api.push(Reply(200, op(metadata={"verb": "create", "target": f"{PARENT}/nodes/n"})))
    client = make_client()
    operation = await client.create_node(
        P,
        Z,
        "sweep-0",
        NodeShape(
            accelerator_type="v4-8",
            extra={"runtime_version": "tpu-ubuntu2204-base"},
            capacity=CapacityKind.SPOT,
            labels={"tpucared-fleet": "sweep"},
        ),
    )
    assert operation == Operation(
        name=f"{PARENT}/operations/operation-1",
        done=False,
        metadata={"verb": "create", "target": f"{PARENT}/nodes/n"},
    )
    assert operation.target == f"{PARENT}/nodes/n"
    assert operation.verb == "create"
    (seen,) = fake_api.requests
    assert (seen.method, seen.path, seen.query) == (
        "POST",
        f"/v2/{PARENT}/nodes",
        {"nodeId": "sweep-0"},
    )
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.headers["Authorization"] == "Bearer t0k"
    assert seen.headers["User-Agent"] == f"tpucared/{__version__}"
    assert json.loads(seen.body) == {
        "acceleratorType": "v4-8",
        "runtimeVersion": "tpu-ubuntu2204-base",
        "networkConfig": {"enableExternalIps": True},
        "schedulingConfig": {"spot": True},
        "labels": {"tpucared-fleet": "sweep"},
    }


async def test_every_call_hits_its_documented_path(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    node = f"{PARENT}/nodes/n"
    qr = f"{PARENT}/queuedResources/q"
    fake_api.push(*[Reply(200, op()) for _ in range(10)])
    client = make_client()
    await client.get_node(P, Z, "n")
    await client.delete_node(node)
    await client.patch_node(node, {"metadata": {"ssh-keys": "k"}}, ["metadata", "labels"])
    await client.get_guest_attributes(node, "hostkeys/", [0, 1])
    await client.get_operation(f"{PARENT}/operations/operation-1")
    await client.create_queued_resource(
        P,
        Z,
        "q",
        node_id="n",
        shape=NodeShape(
            accelerator_type="v4-8", extra={"runtime_version": "rt"}, capacity=CapacityKind.SPOT
        ),
    )
    await client.get_queued_resource(qr)
    await client.delete_queued_resource(qr, force=True)
    await client.delete_queued_resource(P, Z, "q")
    await client.reset_queued_resource(qr)
    wire = [(r.method, r.path, r.query) for r in fake_api.requests]
    assert wire == [
        ("GET", f"/v2/{node}", {}),
        ("DELETE", f"/v2/{node}", {}),
        ("PATCH", f"/v2/{node}", {"updateMask": "metadata,labels"}),
        ("POST", f"/v2/{node}:getGuestAttributes", {}),
        ("GET", f"/v2/{PARENT}/operations/operation-1", {}),
        ("POST", f"/v2/{PARENT}/queuedResources", {"queuedResourceId": "q"}),
        ("GET", f"/v2/{qr}", {}),
        ("DELETE", f"/v2/{qr}", {"force": "true"}),
        ("DELETE", f"/v2/{qr}", {}),
        ("POST", f"/v2/{qr}:reset", {}),
    ]
    assert json.loads(fake_api.requests[3].body) == {
        "queryPath": "hostkeys/",
        "workerIds": ["0", "1"],
    }
    assert json.loads(fake_api.requests[5].body)["spot"] == {}
    assert all(r.headers["Content-Type"] == "application/json" for r in fake_api.requests)


async def test_list_follows_every_page(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    fake_api.push(
        Reply(200, {"nodes": [{"name": "a"}, {"name": "b"}], "nextPageToken": "p2"}),
        Reply(200, {"nodes": [{"name": "c"}], "nextPageToken": "p3"}),
        Reply(200, {"nodes": [{"name": "d"}], "nextPageToken": ""}),
    )
    client = make_client()
    nodes = await client.list_nodes(P, Z, page_size=2)
    assert [n["name"] for n in nodes] == ["a", "b", "c", "d"]
    assert [r.query for r in fake_api.requests] == [
        {"pageSize": "2"},
        {"pageSize": "2", "pageToken": "p2"},
        {"pageSize": "2", "pageToken": "p3"},
    ]
    assert client.request_counts == {("nodes.list", "200"): 3}


async def test_empty_list_and_other_collections(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    fake_api.push(
        Reply(200, {}),
        Reply(200, {"acceleratorTypes": [{"type": "v4-8"}]}),
        Reply(200, {"runtimeVersions": [{"version": "tpu-ubuntu2204-base"}]}),
        Reply(200, {"queuedResources": []}),
    )
    client = make_client()
    assert await client.list_nodes(P, Z) == []
    assert await client.list_accelerator_types(P, Z) == [{"type": "v4-8"}]
    assert await client.list_runtime_versions(P, Z) == [{"version": "tpu-ubuntu2204-base"}]
    assert await client.list_queued_resources(P, Z) == []
    assert [r.path for r in fake_api.requests] == [
        f"/v2/{PARENT}/nodes",
        f"/v2/{PARENT}/acceleratorTypes",
        f"/v2/{PARENT}/runtimeVersions",
        f"/v2/{PARENT}/queuedResources",
    ]


async def test_repeated_page_token_stops_instead_of_looping(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    fake_api.push(*[Reply(200, {"nodes": [], "nextPageToken": "same"}) for _ in range(3)])
    with pytest.raises(ApiError, match="repeated nextPageToken") as caught:
        await make_client().list_nodes(P, Z)
    assert caught.value.kind is ErrorKind.MALFORMED
    assert len(fake_api.requests) == 2


async def test_unreachable_makes_the_list_fail(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    fake_api.push(Reply(200, {"nodes": [{"name": "a"}], "unreachable": [Z]}))
    with pytest.raises(ApiError, match="unreachable") as caught:
        await make_client().list_nodes(P, Z)
    assert caught.value.kind is ErrorKind.TRANSIENT


@pytest.mark.parametrize(
    "garbage",
    ["<html>proxy</html>", '["a", "list"]', '{"nodes": "not a list"}'],
)
async def test_garbage_200_is_retried(
    fake_api: FakeApi, make_client: Callable[..., TpuClient], garbage: str
) -> None:
    fake_api.push(Reply(200, garbage), Reply(200, {"nodes": [{"name": "a"}]}))
    sleeps = Sleeps()
    client = make_client(sleep=sleeps, rng=lambda: 1.0)
    if garbage.startswith('{"nodes"'):
        # A well-formed object of the wrong shape is not a transport accident: surface it.
        with pytest.raises(ApiError, match="malformed"):
            await client.list_nodes(P, Z)
        return
    assert await client.list_nodes(P, Z) == [{"name": "a"}]
    assert sleeps.delays == [0.5]


async def test_timeouts_retry_then_surface_as_transient(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    fake_api.push(Reply(200, {}, delay=0.3), Reply(200, {}, delay=0.3))
    client = make_client(timeout=0.05, retry=RetryPolicy(max_attempts=2))
    with pytest.raises(ApiError, match="timed out") as caught:
        await client.get_node(P, Z, "n")
    assert caught.value.kind is ErrorKind.TRANSIENT
    assert caught.value.attempts == 2
    assert client.request_counts == {("nodes.get", "error"): 2}


async def test_dropped_connection_is_retried(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    # A POST: aiohttp itself silently re-sends idempotent requests once; this one is ours.
    fake_api.push(Reply(drop=True), Reply(200, {"guestAttributes": []}))
    client = make_client()
    assert await client.get_guest_attributes(f"{PARENT}/nodes/n") == {"guestAttributes": []}
    assert client.request_counts == {
        ("nodes.getGuestAttributes", "error"): 1,
        ("nodes.getGuestAttributes", "200"): 1,
    }
    assert len(fake_api.requests) == 2


async def test_connection_refused_is_transient() -> None:
    async with TpuClient(
        "http://127.0.0.1:9",
        token_source=StaticToken(),
        retry=RetryPolicy(max_attempts=2),
        sleep=Sleeps(),
    ) as client:
        with pytest.raises(ApiError) as caught:
            await client.list_nodes(P, Z)
    assert caught.value.kind is ErrorKind.TRANSIENT
    assert caught.value.attempts == 2


async def test_rate_limit_honours_retry_after(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    limited = {"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}}
    fake_api.push(Reply(429, limited, headers={"Retry-After": "3"}), Reply(200, {"nodes": []}))
    sleeps = Sleeps()
    client = make_client(sleep=sleeps, rng=lambda: 0.1)
    assert await client.list_nodes(P, Z) == []
    assert sleeps.delays == [3.0]


async def test_wait_operation_polls_until_done(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    node = {"name": f"{PARENT}/nodes/n", "state": "READY"}
    fake_api.push(
        Reply(200, op(done=False)),
        Reply(200, op()),  # `done` omitted, as proto3 JSON does: still running
        Reply(200, op(done=True, response=node)),
    )
    sleeps = Sleeps()
    client = make_client()
    result = await client.wait_operation(f"{PARENT}/operations/operation-1", sleep=sleeps)
    assert result.done
    assert result.response == node
    assert sleeps.delays == [1.0, 1.0]
    assert client.request_counts == {("operations.get", "200"): 3}


async def test_wait_operation_raises_the_classified_failure(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    message = 'There is no more capacity in the zone "us-central2-b"; you can try in another zone'
    fake_api.push(Reply(200, op(done=True, error={"code": 8, "message": message})))
    pending = Operation(name=f"{PARENT}/operations/operation-1")
    with pytest.raises(CapacityError) as caught:
        await make_client().wait_operation(pending, poll_interval=0.0)
    assert caught.value.kind is ErrorKind.CAPACITY
    assert caught.value.operation == pending.name
    assert caught.value.code == 8


async def test_wait_operation_times_out_on_the_injected_clock(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    fake_api.push(*[Reply(200, op(done=False)) for _ in range(10)])
    client = make_client(clock=lambda: now[0])
    with pytest.raises(OperationTimeout) as caught:
        await client.wait_operation(
            Operation(name=f"{PARENT}/operations/operation-1"),
            poll_interval=2.0,
            timeout=5.0,
            sleep=sleep,
        )
    assert caught.value.kind is ErrorKind.TRANSIENT
    assert caught.value.operation == f"{PARENT}/operations/operation-1"
    assert len(fake_api.requests) == 3  # polls at t=2, 4, 6; gives up at 6 >= 5


async def test_operation_without_a_name_is_malformed(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    fake_api.push(Reply(200, {"done": True}))
    with pytest.raises(ApiError, match="operation without a name"):
        await make_client(retry=RetryPolicy(max_attempts=1)).delete_node(P, Z, "n")


async def test_empty_body_is_an_empty_object(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    fake_api.push(Reply(200, ""))
    assert await make_client().get_guest_attributes(f"{PARENT}/nodes/n") == {}
    assert fake_api.requests[0].body == "{}"


async def test_on_request_hook_sees_every_request(
    fake_api: FakeApi, make_client: Callable[..., TpuClient]
) -> None:
    seen: list[tuple[str, str]] = []
    fake_api.push(
        Reply(503, {"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}}),
        Reply(200, {"nodes": []}),
    )
    client = make_client(on_request=lambda call, status, seconds: seen.append((call, status)))
    await client.list_nodes(P, Z)
    assert seen == [("nodes.list", "503"), ("nodes.list", "200")]


async def test_session_and_token_source_ownership(fake_api: FakeApi) -> None:
    fake_api.push(Reply(200, {"nodes": []}), Reply(200, {"nodes": []}))
    tokens = StaticToken()
    async with aiohttp.ClientSession() as shared:
        async with TpuClient(fake_api.url + "/", token_source=tokens, session=shared) as client:
            assert client.endpoint == fake_api.url
            await client.list_nodes(P, Z)
        assert not shared.closed  # injected: its owner closes it
        assert tokens.closed  # the client owns its token source
    async with TpuClient(fake_api.url, token_source=StaticToken()) as client:
        await client.list_nodes(P, Z)
        session = client._session
    assert session is not None
    assert session.closed


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="http"):
        TpuClient("tpu.googleapis.com", token_source=StaticToken())
    with pytest.raises(ValueError, match="node id"):
        names.node_name("p", "z", "a/b")
    with pytest.raises(ValueError, match="zone"):
        names.location("p", "")
    assert names.short_name(f"{PARENT}/nodes/n") == "n"
    assert names.zone_of(f"{PARENT}/nodes/n") == Z
    assert names.zone_of("n") is None


async def test_get_node_needs_one_or_three_parts(make_client: Callable[..., TpuClient]) -> None:
    with pytest.raises(TypeError, match="full resource name"):
        await make_client().get_node("p", "z")  # type: ignore[call-overload]
