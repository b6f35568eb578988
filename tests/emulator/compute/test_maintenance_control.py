"""`:schedule-maintenance` on both APIs' control paths (emulator/maintenance.py): the window in a
TPU node's `upcomingMaintenance` and a VM's `resourceStatus.upcomingMaintenance`, each answer
parsed strictly as Google's types (the discovery document's `Node`, google.cloud.compute_v1
`Instance`); PENDING, then ONGOING from its start, gone at its end; a body of the wrong shape
refused; a worker's metadata server showing `instance/upcoming-maintenance`."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime

import aiohttp
import pytest
from compute_support import CONTROL, ZONE, running
from emulator_http import Http
from official_answers_support import tpu_problems

from tpucared_emulator import EmulatorServer
from tpucared_emulator.compute import official
from tpucared_emulator.hosts.metadata import UPCOMING_MAINTENANCE, MetadataServer
from tpucared_emulator.maintenance import NONE_BODY

TP, TZ = "ctl", "us-central2-b"
NODES = f"/v2/projects/{TP}/locations/{TZ}/nodes"
TPU_CONTROL = f"/_emulator/v1/projects/{TP}/locations/{TZ}/nodes"
SPEC = {
    "acceleratorType": "v4-8",
    "runtimeVersion": "tpu-vm-base",
    "schedulingConfig": {"spot": True},
}
WINDOW = {"start_in_seconds": 0.6, "duration_seconds": 0.6, "type": "SCHEDULED"}


async def tpu_ready(http: Http, node_id: str) -> None:
    await http.ok("POST", NODES, SPEC, nodeId=node_id)
    for _ in range(200):
        if (await http.ok("GET", f"{NODES}/{node_id}"))["state"] == "READY":
            return
        await asyncio.sleep(0.02)
    raise AssertionError("node never became READY")


def span(block: dict[str, object]) -> float:
    start = datetime.fromisoformat(str(block["windowStartTime"]))
    return (datetime.fromisoformat(str(block["windowEndTime"])) - start).total_seconds()


async def test_a_tpu_node_s_window_pending_ongoing_then_gone(http: Http) -> None:
    await tpu_ready(http, "kept")
    internal = await http.ok("POST", f"{TPU_CONTROL}/kept:schedule-maintenance", WINDOW)
    assert internal["maintenance"]["maintenanceStatus"] == "PENDING"
    node = await http.ok("GET", f"{NODES}/kept")
    block = node["upcomingMaintenance"]
    # A v4 may start maintenance early: canReschedule while PENDING.
    assert (block["type"], block["maintenanceStatus"], block["canReschedule"]) == (
        "SCHEDULED", "PENDING", True
    )  # fmt: skip
    assert span(block) == pytest.approx(0.6, abs=1e-5)  # timestamps in microseconds
    assert tpu_problems("Node", node, partial=False) == []
    listed = await http.ok("GET", NODES, fields="nodes(name,upcomingMaintenance)")
    assert listed["nodes"] == [{"name": node["name"], "upcomingMaintenance": block}]
    await asyncio.sleep(0.7)
    node = await http.ok("GET", f"{NODES}/kept")
    assert node["upcomingMaintenance"]["maintenanceStatus"] == "ONGOING"
    # A spot node ends TERMINATED at the start (test_maintenance_tpu.py has the rest).
    assert node["state"] == "TERMINATED"
    await asyncio.sleep(0.6)
    assert "upcomingMaintenance" not in await http.ok("GET", f"{NODES}/kept")


async def test_a_vm_s_window_under_its_resource_status(http: Http) -> None:
    await running(http, "vm-0")
    await http.ok("POST", f"{CONTROL}/vm-0:schedule-maintenance", WINDOW)
    vm = await http.ok("GET", f"{ZONE}/instances/vm-0")
    block = vm["resourceStatus"]["upcomingMaintenance"]
    assert (block["type"], block["maintenanceStatus"]) == ("SCHEDULED", "PENDING")
    official.check("Instance", vm)  # raises on anything google.cloud.compute_v1 refuses
    await asyncio.sleep(0.7)
    vm = await http.ok("GET", f"{ZONE}/instances/vm-0")
    assert vm["resourceStatus"]["upcomingMaintenance"]["maintenanceStatus"] == "ONGOING"
    official.check("Instance", vm)  # raises on anything google.cloud.compute_v1 refuses
    await asyncio.sleep(0.6)
    assert "resourceStatus" not in await http.ok("GET", f"{ZONE}/instances/vm-0")


async def test_a_body_of_the_wrong_shape_is_refused(http: Http) -> None:
    await running(http, "vm-1")
    await tpu_ready(http, "asked")
    for bad in ({}, {"start_in_seconds": -1, "duration_seconds": 1},
                {"start_in_seconds": 1, "duration_seconds": "1h"},
                {"start_in_seconds": 1, "duration_seconds": 1, "type": "SOON"}):  # fmt: skip
        assert (await http("POST", f"{CONTROL}/vm-1:schedule-maintenance", bad))[0] == 400
        assert (await http("POST", f"{TPU_CONTROL}/asked:schedule-maintenance", bad))[0] == 400


async def test_the_worker_metadata_shows_the_window(http: Http, emulator: EmulatorServer) -> None:
    await tpu_ready(http, "meta")
    node = emulator.state.get_node(TP, TZ, "meta")
    server = MetadataServer(node, "127.0.0.1")
    await server.start()
    url = f"http://{server.address}{UPCOMING_MAINTENANCE}"
    headers = {"Metadata-Flavor": "Google"}
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url, headers=headers) as r:
                assert (r.status, await r.text()) == (200, NONE_BODY)
            await http.ok("POST", f"{TPU_CONTROL}/meta:schedule-maintenance", WINDOW)
            async with session.get(url, headers=headers) as r:
                block = json.loads(await r.text())
            async with session.get(url) as r:
                assert r.status == 403
    finally:
        await server.close()
    assert block == (await http.ok("GET", f"{NODES}/meta"))["upcomingMaintenance"]
