"""`ComputeCloud.wait` (the optional `OperationWaits` of ports/cloud.py) against the emulator:
one zoneOperations.wait answers an insert's end, held past the client's own read bound; a
slice's create is not waited on; the TPU API's cloud cannot wait at all."""

from __future__ import annotations

from typing import Any

import pytest

from tpucared.core.model.specs import ErrorKind
from tpucared.gcp import NoAuth
from tpucared.gcp.compute import ComputeClient, ComputeCloud
from tpucared.gcp.errors import ApiError
from tpucared.gcp.tpu import TpuClient, TpuCloud
from tpucared.ports.cloud import OperationWaits
from tpucared_emulator import EmulatorServer

from .support import MACHINE, OWNER, ZONE, P, shape


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    # An insert runs 3 s (its operation DONE when RUNNING); a wait is held until then.
    return {**emulator_options, "create_seconds": 3.0, "compute_wait_max_seconds": 10.0}


async def test_one_wait_answers_an_insert_held_past_the_clients_read_bound(
    emulator: EmulatorServer,
) -> None:
    # The client's own bounds (1 s total, 1 s per read) would cut a 3 s request: the wait's
    # own hold must replace them.
    async with ComputeClient(emulator.url, token_source=NoAuth(), timeout=1.0) as client:
        cloud = ComputeCloud(client, owner=OWNER)
        op = await cloud.create(P, ZONE, "iron-0", shape())
        assert cloud.abilities.operation_wait
        assert cloud.waits_on(op.name)
        done = await cloud.wait(op.name)
    assert done.done
    assert done.error is None
    assert done.verb == "create"
    calls = {call for call, _ in client.request_counts}
    assert calls == {"instances.insert", "zoneOperations.wait"}, client.request_counts


async def test_a_stockout_ends_the_wait_with_its_capacity_error(
    emulator: EmulatorServer, cloud: ComputeCloud
) -> None:
    emulator.state.set_capacity(ZONE, MACHINE, 0)
    op = await cloud.create(P, ZONE, "iron-0", shape())
    done = await cloud.wait(op.name)
    assert done.error is not None
    assert done.error.kind is ErrorKind.CAPACITY


async def test_a_slice_create_is_polled_not_waited(cloud: ComputeCloud) -> None:
    slice_op = f"projects/{P}/zones/{ZONE}/instanceGroupManagers/s/operations/operation-1"
    assert not cloud.waits_on(slice_op)
    with pytest.raises(ApiError) as caught:
        await cloud.wait(slice_op)
    assert caught.value.kind is ErrorKind.INVALID
    assert cloud.waits_on(f"projects/{P}/zones/{ZONE}/operations/operation-1")


async def test_the_tpu_api_cannot_wait(emulator: EmulatorServer) -> None:
    async with TpuClient(emulator.url, token_source=NoAuth()) as client:
        tpu = TpuCloud(client)
        assert not tpu.abilities.operation_wait
        assert not isinstance(tpu, OperationWaits)
