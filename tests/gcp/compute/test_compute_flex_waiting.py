"""A waiting flex-start slice costs no MIG reads while its zone's list says it has not moved
(gcp/compute/waiting.py): through `ComputeCloud` against the emulator, requests counted by the
client. And `WaitingSlices`' rule alone, on a clock of our own."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from tpucared.core.model.specs import CapacityKind
from tpucared.gcp.compute import ComputeClient, ComputeCloud
from tpucared.gcp.compute.waiting import WaitingSlices, progress_of
from tpucared.ports.cloud import OperationState

from .support import FLEX_OPTIONS, OWNER, ZONE, Control, P, shape

READS = ("instanceGroupManagers.get", "instanceGroupManagers.listManagedInstances")
WAITING = {"targetSize": 1, "currentActions": {"creating": 1, "none": 0}, "status": {}}
MADE = {"targetSize": 1, "currentActions": {"creating": 0, "none": 1}, "status": {}}


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    return {**emulator_options, **FLEX_OPTIONS}


async def listed(cloud: ComputeCloud) -> None:
    """The daemon's tick: one observation of the zone (its MIG list among it)."""
    observation = await cloud.observe(P, ZONE, datetime.now(UTC), queued_resources=False)
    assert observation.ok, observation.error_message


def reads(client: ComputeClient) -> int:
    return sum(n for (call, _), n in client.request_counts.items() if call in READS)


async def waiting(cloud: ComputeCloud, control: Control) -> OperationState:
    """A flex-start slot created in a stocked-out zone, polled until its MIG was read once."""
    await control.capacity(0)
    flex = shape(capacity=CapacityKind.FLEX_START, max_run_duration_s=60)
    op = await cloud.create(P, ZONE, "iron-0", flex)
    for _ in range(100):
        op = await cloud.poll(op.name)
        assert not op.done
        assert op.error is None
        if reads(cloud.client):
            return op
        await asyncio.sleep(0.03)
    raise AssertionError("the MIG's insert never ended")


async def vm_made(client: ComputeClient) -> None:
    for _ in range(200):
        members = await client.list_managed_instances(P, ZONE, "iron-0")
        if [m for m in members if m.get("instanceStatus") == "RUNNING"]:
            return
        await asyncio.sleep(0.03)
    raise AssertionError("the flex-start VM was never made")


async def test_a_waiting_slice_is_read_when_its_list_moves_not_at_every_poll(
    cloud: ComputeCloud, client: ComputeClient, control: Control
) -> None:
    op = await waiting(cloud, control)
    read_once = reads(client)
    for _ in range(3):  # lists that show it still waiting: polls cost nothing
        await listed(cloud)
        for _ in range(5):
            op = await cloud.poll(op.name)
            assert not op.done
    assert reads(client) == read_once

    await control.capacity(1)
    await vm_made(client)
    before = reads(client)
    op = await cloud.poll(op.name)  # no list since: not read yet
    assert not op.done
    assert reads(client) == before
    await listed(cloud)
    op = await cloud.poll(op.name)  # the list shows it moved: read, and done
    assert op.done
    assert op.error is None
    assert reads(client) == before + 2


async def test_a_waiting_slice_unlisted_is_read_after_the_bound(
    client: ComputeClient, control: Control
) -> None:
    cloud = ComputeCloud(client, owner=OWNER, waiting_reread_s=0.3)
    op = await waiting(cloud, control)
    await control.capacity(1)
    await vm_made(client)
    started = asyncio.get_running_loop().time()
    while not op.done:  # never observed: only the bound brings the read
        op = await cloud.poll(op.name)
        await asyncio.sleep(0.05)
    assert op.error is None
    assert 0.0 < asyncio.get_running_loop().time() - started < 1.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_rule_reads_on_a_moved_or_missing_listing_or_after_the_bound() -> None:
    clock = Clock()
    slices = WaitingSlices(reread_s=60.0, clock=clock)
    where = ("p", "z")
    assert not slices.unchanged("op")  # never read: read
    slices.read("op", where, "m", WAITING)
    assert slices.unchanged("op")  # no list since the read
    slices.listed(where, {"m": progress_of(WAITING)})
    assert slices.unchanged("op")
    slices.listed(("p", "other"), {})  # another zone's list says nothing of it
    assert slices.unchanged("op")
    clock.now = 59.0
    assert slices.unchanged("op")
    clock.now = 60.0
    assert not slices.unchanged("op")  # the bound
    slices.read("op", where, "m", WAITING)
    slices.listed(where, {"m": progress_of(MADE)})
    assert not slices.unchanged("op")  # moved
    slices.read("op", where, "m", MADE)
    slices.listed(where, {})  # gone from the list: forgotten, so the next poll reads
    assert not slices.unchanged("op")
    slices.read("op", where, "m", WAITING)
    slices.forget("op")
    assert not slices.unchanged("op")


def test_progress_is_the_same_from_a_get_and_from_the_lists_partial_answer() -> None:
    got = {**WAITING, "name": "m", "fingerprint": "abc", "status": {"isStable": False}}
    listed = {
        "targetSize": 1,
        "currentActions": WAITING["currentActions"],
        "status": {
            "isStable": False,
            "bulkInstanceOperation": {"lastProgressCheck": {"timestamp": "t"}},
        },
    }
    assert progress_of(got) == progress_of(listed)
    assert progress_of(got) != progress_of({**got, "status": {"isStable": True}})
