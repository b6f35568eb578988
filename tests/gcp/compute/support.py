"""Helpers of the Compute Engine adapter's tests: the place and owner they use, a fleet's
NodeShape, following an operation to its end, and `Control`, the emulator's control API for
Compute Engine instances (conftest.py makes the fixtures)."""

from __future__ import annotations

import asyncio
from typing import Any

from gcp_fakes import EmulatorControl

from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, CapacityKind
from tpucared.gcp.compute import ComputeCloud
from tpucared.ports.cloud import NodeShape, OperationState

P = "lab-project"
ZONE = "us-central1-c"
OWNER = "lab"
# The emulator for flex-start tests: quick creates, one-second runs allowed (a test knob), the
# bulk MIG looking for capacity every 0.1 s, and no flex-start VM outside a MIG.
FLEX_OPTIONS: dict[str, Any] = {
    "create_seconds": 0.1,
    "delete_seconds": 0.05,
    "compute_flex_min_run_seconds": 1,
    "compute_mig_retry_seconds": 0.1,
    "compute_tpu_flex_instances": "refuse",
}
MACHINE = "tpu7x-standard-4t"


def shape(fleet: str = "iron", owner: str = OWNER, **overrides: Any) -> NodeShape:
    fields: dict[str, Any] = {
        "accelerator_type": MACHINE,
        "extra": {"runtime_version": ""},
        "capacity": CapacityKind.SPOT,
        "labels": {FLEET_LABEL: fleet, OWNER_LABEL: owner},
        "metadata": {"ssh-keys": "tpucared:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA tpucared"},
    }
    return NodeShape(**{**fields, **overrides})


async def finished(cloud: ComputeCloud, op: OperationState, within: float = 15.0) -> OperationState:
    """Poll `op` until it is done (the runtime's operation watcher does the same)."""
    deadline = asyncio.get_running_loop().time() + within
    while not op.done:
        assert asyncio.get_running_loop().time() < deadline, f"{op.name} still running"
        await asyncio.sleep(0.05)
        op = await cloud.poll(op.name)
    return op


class Control(EmulatorControl):
    """The emulator's control API (/_emulator/v1) for Compute Engine, over its own session."""

    async def capacity(self, available: int, zone: str = ZONE, machine: str = MACHINE) -> None:
        body = {"zone": zone, "machine_type": machine, "available": available}
        await self.send("PUT", "/capacity", body)

    async def instance(self, name: str, action: str, body: Any = None) -> Any:
        return await self.send(
            "POST", f"/projects/{P}/zones/{ZONE}/instances/{name}:{action}", body
        )

    async def faults(self, **config: Any) -> None:
        await self.send("PUT", "/faults", config)

    async def requests(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self.send("GET", "/requests")
        return result
