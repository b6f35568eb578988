"""Multislice queued resources through the gcp layer (issue 13): the request body
(`multisliceParams` instead of `nodeId`), the client's argument checks, the conversion of what
the API lists (`node_names` `{prefix}-{i}`, each node's `queuedResource`), and the whole
lifecycle through the real `TpuClient` against the emulator over loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from gcp_fakes import EmulatorControl

from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, CapacityKind
from tpucared.gcp.auth import NoAuth
from tpucared.gcp.errors import AlreadyExistsError, InvalidRequestError, NotFoundError
from tpucared.gcp.tpu import bodies, names
from tpucared.gcp.tpu.bodies import NodeShape
from tpucared.gcp.tpu.client import TpuClient
from tpucared.gcp.tpu.convert import MalformedResource, node_from_json, queued_resource_from_json
from tpucared.gcp.tpu.observe import observe_zone
from tpucared.gcp.tpu.states import NodeState, QueuedState
from tpucared_emulator import EmulatorServer

P, ZONE, TYPE = "ms-project", "us-central2-b", "v4-8"
PARENT = names.location(P, ZONE)
LABELS = {FLEET_LABEL: "sweep", OWNER_LABEL: "daemon-1"}
SHAPE = NodeShape(
    accelerator_type=TYPE,
    extra={"runtime_version": "tpu-ubuntu2204-base"},
    capacity=CapacityKind.SPOT,
    labels=LABELS,
)
POLL = 0.02


# -- the request body ----------------------------------------------------------------------------


def test_a_multislice_body_carries_multislice_params_instead_of_a_node_id() -> None:
    node = bodies.node_body(SHAPE.for_queue())
    body = bodies.queued_resource_body(
        P, ZONE, node=node, capacity=CapacityKind.SPOT, multislice_count=4, node_id_prefix="np"
    )
    assert body == {
        "tpu": {
            "nodeSpec": [
                {
                    "parent": PARENT,
                    "multisliceParams": {"nodeCount": 4, "nodeIdPrefix": "np"},
                    "node": node,
                }
            ]
        },
        "spot": {},
    }
    # Without a prefix the API uses the queued resource's id: none is sent.
    (spec,) = bodies.queued_resource_body(
        P, ZONE, node=node, capacity=CapacityKind.ON_DEMAND, multislice_count=2
    )["tpu"]["nodeSpec"]
    assert spec["multisliceParams"] == {"nodeCount": 2}
    assert "nodeId" not in spec


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"node_id": "n", "multislice_count": 2}, "not both"),
        ({}, "needs node_id .one node. or multislice_count"),
        ({"node_id": ""}, "needs node_id"),
        ({"multislice_count": 1}, r"must be > 1 \(MultisliceParams.nodeCount\), got 1"),
        ({"multislice_count": 0}, "must be > 1"),
        ({"multislice_count": True}, "must be an int"),
        ({"node_id": "n", "node_id_prefix": "np"}, "node_id_prefix goes with multislice_count"),
        ({"multislice_count": 2, "node_id_prefix": ""}, "must not be empty"),
    ],
)
async def test_the_client_refuses_a_spec_the_api_would_refuse_before_any_request(
    arguments: dict[str, Any], message: str
) -> None:
    # Nothing listens on port 9: a request would fail with a transport error, not this.
    async with TpuClient("http://127.0.0.1:9", token_source=NoAuth()) as client:
        with pytest.raises(ValueError, match=message):
            await client.create_queued_resource(P, ZONE, "q", shape=SHAPE, **arguments)
        assert not client.request_counts


# -- conversion ----------------------------------------------------------------------------------


def listed_qr(params: object, qr_id: str = "train") -> dict[str, Any]:
    spec = {"parent": PARENT, "multisliceParams": params, "node": {"labels": LABELS}}
    return {
        "name": f"{PARENT}/queuedResources/{qr_id}",
        "tpu": {"nodeSpec": [spec]},
        "state": {"state": "ACTIVE"},
    }


@pytest.mark.parametrize(
    ("params", "node_names"),
    [
        ({"nodeCount": 3, "nodeIdPrefix": "np"}, ("np-0", "np-1", "np-2")),
        ({"nodeCount": 2}, ("train-0", "train-1")),  # the default prefix: the id
        ({"nodeCount": "2", "nodeIdPrefix": ""}, ("train-0", "train-1")),  # int32 as a string
    ],
)
def test_node_names_of_a_multislice_queued_resource(
    params: dict[str, Any], node_names: tuple[str, ...]
) -> None:
    qr = queued_resource_from_json(ZONE, listed_qr(params))
    assert qr.node_names == node_names
    assert qr.owned_by("daemon-1")


@pytest.mark.parametrize(
    "params",
    [[2], {}, {"nodeCount": "two"}, {"nodeCount": 0}, {"nodeCount": 10**9},
     {"nodeCount": 2, "nodeIdPrefix": ["np"]}],
)  # fmt: skip
def test_an_unreadable_multislice_spec_is_malformed(params: object) -> None:
    with pytest.raises(MalformedResource, match="multisliceParams"):
        queued_resource_from_json(ZONE, listed_qr(params))


def test_a_multislice_node_names_its_queued_resource() -> None:
    data = {
        "name": f"{PARENT}/nodes/train-1",
        "state": "READY",
        "acceleratorType": TYPE,
        "labels": LABELS,
        "queuedResource": f"{PARENT}/queuedResources/train",
        "multisliceNode": True,
    }
    node = node_from_json(ZONE, data)
    assert (node.name, node.queued_resource) == ("train-1", f"{PARENT}/queuedResources/train")


# -- against the emulator ------------------------------------------------------------------------


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    # Long enough a PROVISIONING for a poll every 20 ms to see it on a busy machine.
    return {**emulator_options, "create_seconds": 0.6}


class Control(EmulatorControl):
    """The emulator's control API (/_emulator/v1)."""

    async def capacity(self, available: int) -> None:
        body = {"zone": ZONE, "accelerator_type": TYPE, "available": available}
        await self.send("PUT", "/capacity", body)

    async def preempt(self, node_id: str) -> dict[str, Any]:
        node: dict[str, Any] = await self.send("POST", f"/{PARENT}/nodes/{node_id}:preempt")
        return node


@pytest.fixture
async def control(emulator: EmulatorServer) -> AsyncIterator[Control]:
    async with aiohttp.ClientSession() as session:
        yield Control(emulator.url, session)


async def qr_states_until(client: TpuClient, qr_id: str, last: str) -> list[str]:
    """Every state the queued resource shows, in order (repeats dropped), up to `last`."""
    seen: list[str] = []
    for _ in range(500):
        state = (await client.get_queued_resource(P, ZONE, qr_id))["state"]["state"]
        if not seen or seen[-1] != state:
            seen.append(state)
        if state == last:
            return seen
        await asyncio.sleep(POLL)
    raise AssertionError(f"{qr_id} went {seen}, never {last}")


async def test_a_two_slice_request_waits_for_both_then_provisions_them_together(
    client: TpuClient, control: Control
) -> None:
    await control.capacity(1)  # room for one slice of the type: not enough
    op = await client.create_queued_resource(
        P, ZONE, "ms", shape=SHAPE, multislice_count=2, node_id_prefix="slice"
    )
    assert op.done
    assert op.target == names.queued_resource_name(P, ZONE, "ms")
    await asyncio.sleep(0.5)  # well past queued_provision_seconds
    observed = await observe_zone(client, P, ZONE, datetime.now(UTC), queued_resources=True)
    assert observed.nodes == ()
    assert observed.queued_resources is not None
    (qr,) = observed.queued_resources
    assert (qr.state, qr.node_names) == (QueuedState.WAITING_FOR_RESOURCES, ("slice-0", "slice-1"))

    await control.capacity(2)  # the capacity control provisions at once: no WAITING after it
    assert await qr_states_until(client, "ms", "ACTIVE") == ["PROVISIONING", "ACTIVE"]

    raw = {n["name"]: n for n in await client.list_nodes(P, ZONE)}
    assert sorted(raw) == [names.node_name(P, ZONE, f"slice-{i}") for i in range(2)]
    assert all(n["multisliceNode"] is True for n in raw.values())
    spec = (await client.get_queued_resource(P, ZONE, "ms"))["tpu"]["nodeSpec"][0]
    assert spec["multisliceParams"] == {"nodeCount": 2, "nodeIdPrefix": "slice"}
    assert "nodeId" not in spec

    observed = await observe_zone(client, P, ZONE, datetime.now(UTC), queued_resources=True)
    qr_name = names.queued_resource_name(P, ZONE, "ms")
    assert [(n.name, n.state, n.queued_resource) for n in observed.nodes] == [
        ("slice-0", NodeState.READY, qr_name),
        ("slice-1", NodeState.READY, qr_name),
    ]
    assert all(n.owned_by("daemon-1") for n in observed.nodes)
    assert observed.queued_resources is not None
    (qr,) = observed.queued_resources
    assert (qr.name, qr.state, qr.node_names) == ("ms", QueuedState.ACTIVE, ("slice-0", "slice-1"))


async def test_one_slice_preempted_suspends_and_force_delete_removes_everything(
    client: TpuClient, control: Control
) -> None:
    await client.create_queued_resource(P, ZONE, "pre", shape=SHAPE, multislice_count=2)
    await qr_states_until(client, "pre", "ACTIVE")
    assert (await control.preempt("pre-0"))["state"] == "PREEMPTED"

    observed = await observe_zone(client, P, ZONE, datetime.now(UTC), queued_resources=True)
    assert observed.queued_resources is not None
    (qr,) = observed.queued_resources
    assert (qr.state, qr.node_names) == (QueuedState.SUSPENDED, ("pre-0", "pre-1"))
    states = {n.name: n.state for n in observed.nodes}
    assert states == {"pre-0": NodeState.PREEMPTED, "pre-1": NodeState.READY}

    name = names.queued_resource_name(P, ZONE, "pre")
    deleted = await client.wait_operation(
        await client.delete_queued_resource(name, force=True),
        poll_interval=POLL,
        timeout=30,
        sleep=asyncio.sleep,
    )
    assert deleted.error is None
    with pytest.raises(NotFoundError):
        await client.get_queued_resource(name)
    assert await client.list_nodes(P, ZONE) == []


async def test_the_emulator_refuses_what_the_api_refuses(client: TpuClient) -> None:
    # A prefix the API's regex allows, making node ids a node may not have.
    with pytest.raises(InvalidRequestError, match="nodeIdPrefix"):
        await client.create_queued_resource(
            P, ZONE, "bad", shape=SHAPE, multislice_count=2, node_id_prefix="Upper_Case"
        )
    await client.create_node(P, ZONE, "taken-1", SHAPE)
    with pytest.raises(AlreadyExistsError):
        await client.create_queued_resource(
            P, ZONE, "q", shape=SHAPE, multislice_count=2, node_id_prefix="taken"
        )
    assert await client.list_queued_resources(P, ZONE) == []
