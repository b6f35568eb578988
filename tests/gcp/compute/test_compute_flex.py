"""A single-host flex-start slot through `ComputeCloud` against the emulator: a one-VM bulk MIG
(issue 39: Google documents TPU flex-start on Compute Engine through MIGs), waiting (WAITING to
the planner) while the machine type has no capacity, RUNNING once it has, with `run_ends_at`
read from the member's `resourceStatus.scheduling.terminationTimestamp` (start +
maxRunDuration; never `scheduling.terminationTime`, an input), then gone when the run ends.
The emulator allows one-second runs here (`compute_flex_min_run_seconds`, a test knob) and
refuses flex-start instances (`compute_tpu_flex_instances`), so no VM is made outside a MIG."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tpucared.core.model.observed import ObservedNode, StateClass
from tpucared.core.model.specs import CapacityKind, ErrorKind
from tpucared.gcp.compute import ComputeClient, ComputeCloud
from tpucared.gcp.errors import ApiError
from tpucared.ports.cloud import OperationState

from .support import FLEX_OPTIONS, ZONE, Control, P, shape

NOW = datetime(2026, 11, 26, tzinfo=UTC)


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    return {**emulator_options, **FLEX_OPTIONS}


async def observed(cloud: ComputeCloud, name: str) -> ObservedNode | None:
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.ok, observation.error_message
    return next((n for n in observation.nodes if n.name == name), None)


async def until(cloud: ComputeCloud, name: str, state: str | None) -> ObservedNode | None:
    for _ in range(200):
        node = await observed(cloud, name)
        if (node.state if node else None) == state:
            return node
        await asyncio.sleep(0.03)
    raise AssertionError(f"{name} never {state or 'gone'}")


async def finished_observed(cloud: ComputeCloud, op: OperationState) -> OperationState:
    """Poll `op` until done, the zone observed between polls, as the daemon does: a waiting
    flex-start slice is read again when the zone's MIG list shows it moved (waiting.py)."""
    for _ in range(300):
        await observed(cloud, "-")
        op = await cloud.poll(op.name)
        if op.done:
            return op
        await asyncio.sleep(0.03)
    raise AssertionError(f"{op.name} still running")


async def test_a_flex_vm_waits_runs_with_its_end_and_ends(
    cloud: ComputeCloud, control: Control
) -> None:
    await control.capacity(0)
    flex = shape(capacity=CapacityKind.FLEX_START, max_run_duration_s=2)
    op = await cloud.create(P, ZONE, "iron-0", flex)
    for _ in range(10):  # a stockout is no failure: flex-start waits by design
        op = await cloud.poll(op.name)
        assert op.error is None, op.error
        assert not op.done
        await asyncio.sleep(0.02)
    node = await observed(cloud, "iron-0")
    assert node is not None
    assert node.state_class is StateClass.WAITING
    assert node.run_ends_at is None
    [group] = await cloud.client.list_migs(P, ZONE)
    assert (group["targetSize"], group["targetSizePolicy"]["mode"]) == (1, "BULK")
    assert "resourcePolicies" not in group  # one VM: no workload policy

    await control.capacity(1)
    done = await finished_observed(cloud, op)
    assert done.error is None
    running = await until(cloud, "iron-0", "RUNNING")
    assert running is not None
    assert running.state_class is StateClass.USABLE
    assert running.run_ends_at is not None
    # Read through the list's partial response (INSTANCE_LIST_FIELDS): start + 2 s.
    now = datetime.now(UTC)
    assert now < running.run_ends_at <= now + timedelta(seconds=2)
    # The run ended: the cloud deleted the VM, and the one-VM MIG (DO_NOTHING) is left
    # empty, a dead slot for the daemon to delete (its run's end, as run_ends_at says).
    ended = await until(cloud, "iron-0", "SLICE_INCOMPLETE")
    assert ended is not None
    assert ended.state_class is StateClass.DEAD


async def test_flex_without_a_run_duration_is_invalid_before_any_request(
    cloud: ComputeCloud, client: ComputeClient
) -> None:
    with pytest.raises(ApiError) as caught:
        await cloud.create(P, ZONE, "iron-0", shape(capacity=CapacityKind.FLEX_START))
    assert caught.value.kind is ErrorKind.INVALID
    assert not client.request_counts
