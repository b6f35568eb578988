"""`TpuCloud`, the TPU API's implementation of the Cloud port, against the emulator: what the
runtime calls (observe, create, delete, poll, host keys) answers in the port's own types, with
the states' classes from the one table, and failures as `CloudError`s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from tpucared.core.model.observed import StateClass
from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, CapacityKind, ErrorKind
from tpucared.gcp.auth import NoAuth
from tpucared.gcp.tpu.cloud import TpuCloud
from tpucared.ports.cloud import Cloud, CloudError, NodeShape, OperationState
from tpucared_emulator import EmulatorServer

P = "emu-project"
ZONE = "us-central2-b"
SHAPE = NodeShape(
    accelerator_type="v4-8",
    extra={"runtime_version": "tpu-ubuntu2204-base"},
    capacity=CapacityKind.SPOT,
    labels={FLEET_LABEL: "sweep", OWNER_LABEL: "daemon-1"},
)


@pytest.fixture
async def cloud(emulator: EmulatorServer) -> AsyncIterator[Cloud]:
    tpu = TpuCloud.connect(emulator.url, token_source=NoAuth())
    yield tpu
    await tpu.aclose()


async def _until_done(cloud: Cloud, op: OperationState) -> OperationState:
    while not op.done:
        await asyncio.sleep(0.02)
        op = await cloud.poll(op.name)
    return op


async def test_a_node_through_the_port(cloud: Cloud) -> None:
    created = await _until_done(cloud, await cloud.create(P, ZONE, "port-0", SHAPE))
    assert created.error is None
    assert not created.failed
    listed = await cloud.observe(P, ZONE, datetime.now(UTC), queued_resources=False)
    assert listed.ok
    (node,) = listed.nodes
    assert (node.name, node.state, node.state_class) == ("port-0", "READY", StateClass.USABLE)
    keys = await cloud.host_keys(P, ZONE, "port-0")
    assert [k for k, _ in keys[0]] == ["ssh-ed25519"]

    with pytest.raises(CloudError) as exists:
        await cloud.create(P, ZONE, "port-0", SHAPE)
    assert exists.value.kind is ErrorKind.ALREADY_EXISTS

    deleted = await _until_done(cloud, await cloud.delete(P, ZONE, "port-0"))
    assert deleted.error is None
    assert (await cloud.observe(P, ZONE, datetime.now(UTC), queued_resources=False)).nodes == ()
    with pytest.raises(CloudError) as gone:
        await cloud.delete(P, ZONE, "port-0")
    assert gone.value.kind is ErrorKind.NOT_FOUND


async def test_a_failed_list_is_data(cloud: Cloud) -> None:
    listed = await cloud.observe(P, "mars-north1-a", datetime.now(UTC), queued_resources=True)
    assert not listed.ok
    assert listed.nodes == ()
    assert listed.error is ErrorKind.PERMISSION
