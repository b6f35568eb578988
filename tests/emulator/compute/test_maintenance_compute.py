"""Host maintenance happening to Compute Engine TPU VMs (emulator/compute/maintenance.py), over
loopback: a window's start terminates the VM and records the maintenance operation (found by an
operationType filter, as preemptions are); automaticRestart brings it back with the same id,
without it the VM stays TERMINATED; spot VMs per `compute_spot_maintenance`;
`instances.performMaintenance` starts the window now or is refused; `simulateMaintenanceEvent`;
the VM's `instance/maintenance-event` flips before the termination."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from compute_support import CONTROL, ZONE, P, Z, body, emulator_with, running, wait_status
from emulator_http import Http

from tpucared_emulator import EmulatorServer
from tpucared_emulator.hosts.metadata import MAINTENANCE_EVENT, MetadataServer

OPS = ZONE + "/operations"
TERMINATE_OP = "compute.instances.terminateOnHostMaintenance"
TIMING = {"maintenance_event_lead_seconds": 0.3, "maintenance_duration_seconds": 0.5}
# An on-demand VM (the default body is a spot one).
STANDARD = {"provisioningModel": "STANDARD", "onHostMaintenance": "TERMINATE"}


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    return {**emulator_options, **TIMING}


def window(start: float, duration: float = 0.5) -> dict[str, Any]:
    return {"start_in_seconds": start, "duration_seconds": duration, "type": "SCHEDULED"}


async def ops_of(http: Http, operation_type: str, name: str) -> list[dict[str, Any]]:
    link = f"https://www.googleapis.com/compute/v1/projects/{P}/zones/{Z}/instances/{name}"
    spelled = f'operationType="{operation_type}" AND targetLink="{link}"'
    return list((await http.ok("GET", OPS, filter=spelled)).get("items", []))


async def test_the_window_terminates_and_automatic_restart_brings_it_back(
    http: Http, emulator: EmulatorServer
) -> None:
    vm = await running(http, "vm-0", scheduling={**STANDARD, "automaticRestart": True})
    host = emulator.compute.instances[f"projects/{P}/zones/{Z}/instances/vm-0"].host
    meta = MetadataServer(host, "127.0.0.1")
    await meta.start()
    url = f"http://{meta.address}{MAINTENANCE_EVENT}"
    seen = []
    try:
        async with aiohttp.ClientSession() as session:
            await http.ok("POST", f"{CONTROL}/vm-0:schedule-maintenance", window(0.5))
            for _ in range(50):  # read before the window: the VM is warned
                async with session.get(url, headers={"Metadata-Flavor": "Google"}) as r:
                    seen.append(await r.text())
                if seen[-1] != "NONE":
                    break
                await asyncio.sleep(0.02)
    finally:
        await meta.close()
    assert seen[-1] == "TERMINATE_ON_HOST_MAINTENANCE"
    assert (await http.ok("GET", f"{ZONE}/instances/vm-0"))["status"] == "RUNNING"
    await wait_status(http, "vm-0", "TERMINATED")
    [seen_vm] = (await http.ok("GET", "/_emulator/v1/instances"))["instances"]
    assert (seen_vm["maintenance_down"], seen_vm["maintenance_event"]) == (
        True, "TERMINATE_ON_HOST_MAINTENANCE"
    )  # fmt: skip
    [op] = await ops_of(http, TERMINATE_OP, "vm-0")
    assert (op["user"], op["status"], op["targetId"]) == ("system", "DONE", vm["id"])
    assert await ops_of(http, "compute.instances.preempted", "vm-0") == []
    back = await wait_status(http, "vm-0", "RUNNING")
    assert back is not None
    assert back["id"] == vm["id"]
    assert host.host_maintenance is not None
    assert host.host_maintenance.event_value(0) == "NONE"


async def test_without_automatic_restart_it_stays_terminated(http: Http) -> None:
    await running(http, "vm-0", scheduling={**STANDARD, "automaticRestart": False})
    await http.ok("POST", f"{CONTROL}/vm-0:schedule-maintenance", window(0.1))
    await wait_status(http, "vm-0", "TERMINATED")
    await asyncio.sleep(0.8)
    assert (await http.ok("GET", f"{ZONE}/instances/vm-0"))["status"] == "TERMINATED"
    assert len(await ops_of(http, TERMINATE_OP, "vm-0")) == 1


async def test_a_spot_vm_is_preempted_by_default(http: Http) -> None:
    await running(http, "vm-0")  # spot, STOP
    await http.ok("POST", f"{CONTROL}/vm-0:schedule-maintenance", window(0.1))
    await wait_status(http, "vm-0", "TERMINATED")
    assert len(await ops_of(http, "compute.instances.preempted", "vm-0")) == 1
    assert await ops_of(http, TERMINATE_OP, "vm-0") == []


async def test_spot_and_operation_type_options() -> None:
    options = {
        **TIMING,
        "compute_spot_maintenance": "host_maintenance",
        "compute_maintenance_op_type": "compute.instances.hostMaintenance",
    }
    async with emulator_with(**options) as http:
        await running(http, "stop")
        await running(http, "gone", action="DELETE")
        for name in ("stop", "gone"):
            await http.ok("POST", f"{CONTROL}/{name}:schedule-maintenance", window(0.1))
        await wait_status(http, "stop", "TERMINATED")
        assert await wait_status(http, "gone", None) is None  # its termination action
        for name in ("stop", "gone"):
            assert len(await ops_of(http, "compute.instances.hostMaintenance", name)) == 1
            assert await ops_of(http, "compute.instances.preempted", name) == []
        await asyncio.sleep(0.8)  # a spot VM is never restarted
        assert (await http.ok("GET", f"{ZONE}/instances/stop"))["status"] == "TERMINATED"


async def test_perform_maintenance_starts_the_window_now(http: Http) -> None:
    await running(http, "vm-0", scheduling={**STANDARD, "automaticRestart": True})
    await http.ok("POST", f"{CONTROL}/vm-0:schedule-maintenance", window(3600))
    vm = await http.ok("GET", f"{ZONE}/instances/vm-0")
    assert vm["resourceStatus"]["upcomingMaintenance"]["canReschedule"] is True
    path = f"{ZONE}/instances/vm-0/performMaintenance"
    op = await http.ok("POST", path, requestId="4c0f1a2e-0000-4000-8000-000000000001")
    assert (op["operationType"], op["status"], op["user"] != "system") == (
        "performMaintenance", "DONE", True
    )  # fmt: skip
    again = await http.ok("POST", path, requestId="4c0f1a2e-0000-4000-8000-000000000001")
    assert again["name"] == op["name"]  # a retry replays, it does not start another
    block = (await http.ok("GET", f"{ZONE}/instances/vm-0"))["resourceStatus"][
        "upcomingMaintenance"
    ]
    assert (block["maintenanceStatus"], block["canReschedule"]) == ("ONGOING", False)
    await wait_status(http, "vm-0", "TERMINATED")  # after the lead, not in an hour
    assert len(await ops_of(http, TERMINATE_OP, "vm-0")) == 1
    await wait_status(http, "vm-0", "RUNNING")


async def test_perform_maintenance_refusals(http: Http) -> None:
    await running(http, "vm-0", scheduling={**STANDARD, "automaticRestart": True})
    status, error = await http("POST", f"{ZONE}/instances/vm-0/performMaintenance")
    assert (status, error["error"]["errors"][0]["reason"]) == (400, "badRequest")
    assert "no pending maintenance" in error["error"]["message"]
    status, error = await http("POST", f"{ZONE}/instances/vm-0/performMaintenance", {"x": 1})
    assert status == 400
    assert 'Unknown name "x"' in error["error"]["message"]
    assert (await http("POST", f"{ZONE}/instances/ghost/performMaintenance"))[0] == 404
    assert (await http("GET", f"{ZONE}/instances/vm-0/performMaintenance"))[0] == 404
    pinned = {**window(3600), "can_reschedule": False}
    await http.ok("POST", f"{CONTROL}/vm-0:schedule-maintenance", pinned)
    assert (await http("POST", f"{ZONE}/instances/vm-0/performMaintenance"))[0] == 400
    assert (await http.ok("GET", f"{ZONE}/instances/vm-0"))["status"] == "RUNNING"

    async with emulator_with(**TIMING, compute_perform_without_window="accept") as other:
        await running(other, "vm-1", scheduling={**STANDARD, "automaticRestart": True})
        op = await other.ok("POST", f"{ZONE}/instances/vm-1/performMaintenance")
        assert (op["operationType"], op["status"]) == ("performMaintenance", "DONE")
        await asyncio.sleep(0.5)
        assert (await other.ok("GET", f"{ZONE}/instances/vm-1"))["status"] == "RUNNING"


async def test_simulate_maintenance_event(http: Http) -> None:
    vm = await running(http, "vm-0", scheduling={**STANDARD, "automaticRestart": True})
    path = f"{ZONE}/instances/vm-0/simulateMaintenanceEvent"
    op = await http.ok("POST", path, withExtendedNotifications="false")
    assert (op["operationType"], op["status"]) == ("simulateMaintenanceEvent", "DONE")
    block = (await http.ok("GET", f"{ZONE}/instances/vm-0"))["resourceStatus"][
        "upcomingMaintenance"
    ]
    assert (block["type"], block["maintenanceStatus"]) == ("UNSCHEDULED", "ONGOING")
    await wait_status(http, "vm-0", "TERMINATED")
    back = await wait_status(http, "vm-0", "RUNNING")
    assert back is not None
    assert back["id"] == vm["id"]
    await http.ok("POST", f"{ZONE}/instances", body("vm-1"))
    assert (await http("POST", f"{ZONE}/instances/vm-1/simulateMaintenanceEvent"))[0] == 400
