"""Host maintenance happening to TPU API nodes (emulator/maintenance_tpu.py), over loopback:
a window's start takes the node down as `tpu_maintenance_node` says and brings it back after
the duration; a spot node ends TERMINATED; the v2alpha1 `performMaintenance` and
`simulateMaintenanceEvent` start one now, their refusals (no pending window, a v6e slice under
2x4, canReschedule false, a body with fields); `instance/maintenance-event` as a worker's
metadata server answers it, warned only after the VM has read the key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from emulator_http import Http

from tpucared_emulator import EmulatorServer, running_emulator
from tpucared_emulator.hosts.metadata import MAINTENANCE_EVENT, MetadataServer
from tpucared_emulator.server import build_parser

P, Z = "upkeep", "us-central2-b"
NODES = f"/v2/projects/{P}/locations/{Z}/nodes"
ALPHA = f"/v2alpha1/projects/{P}/locations/{Z}/nodes"
CONTROL = f"/_emulator/v1/projects/{P}/locations/{Z}/nodes"
FAST = {"create_seconds": 0.1, "delete_seconds": 0.05}
TIMING = {"maintenance_event_lead_seconds": 0.3, "maintenance_duration_seconds": 0.5}
HEADERS = {"Metadata-Flavor": "Google"}


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    return {**emulator_options, **FAST, **TIMING}


async def ready(http: Http, node_id: str, accelerator: str = "v4-8", **spec: Any) -> None:
    body = {"acceleratorType": accelerator, "runtimeVersion": "tpu-vm-base", **spec}
    await http.ok("POST", NODES, body, nodeId=node_id)
    await until(http, node_id, lambda n: n["state"] == "READY")


async def until(
    http: Http, node_id: str, check: Callable[[dict[str, Any]], bool], seconds: float = 5.0
) -> dict[str, Any]:
    """Poll nodes.get until `check` holds; the node then."""
    for _ in range(int(seconds / 0.02)):
        node: dict[str, Any] = await http.ok("GET", f"{NODES}/{node_id}")
        if check(node):
            return node
        await asyncio.sleep(0.02)
    raise AssertionError(f"{node_id} never got there: {node}")


def window(start: float, duration: float = 0.5, **extra: Any) -> dict[str, Any]:
    return {"start_in_seconds": start, "duration_seconds": duration, "type": "SCHEDULED", **extra}


@pytest.fixture
async def other() -> AsyncIterator[Callable[..., Any]]:
    """An emulator of its own with these options (the raw-HTTP helper on it)."""
    async with aiohttp.ClientSession() as session:
        servers: list[Any] = []

        async def make(**options: Any) -> Http:
            cm = running_emulator(**{**FAST, **TIMING, **options})
            server = await cm.__aenter__()
            servers.append(cm)
            return Http(server.url, session)

        try:
            yield make
        finally:
            for cm in reversed(servers):
                await cm.__aexit__(None, None, None)


def unhealthy(node: dict[str, Any]) -> bool:
    return node.get("health") == "UNHEALTHY_MAINTENANCE"


async def test_the_window_takes_the_node_down_and_back(http: Http) -> None:
    await ready(http, "kept")
    internal = await http.ok("POST", f"{CONTROL}/kept:schedule-maintenance", window(0.4))
    assert internal["maintenance"]["canReschedule"] is True  # v4: may start early
    down = await until(http, "kept", unhealthy)
    assert down["state"] == "READY"
    assert down["upcomingMaintenance"]["maintenanceStatus"] == "ONGOING"
    assert "maintenance event" in down["healthDescription"]
    back = await until(http, "kept", lambda n: n.get("health") == "HEALTHY")
    assert back["state"] == "READY"


@pytest.mark.parametrize(("mode", "during", "after"), [
    ("repairing", "REPAIRING", "READY"), ("terminated", "TERMINATED", "TERMINATED")
])  # fmt: skip
async def test_what_the_node_shows_is_an_option(
    other: Callable[..., Any], mode: str, during: str, after: str
) -> None:
    http = await other(tpu_maintenance_node=mode)
    await ready(http, "n")
    await http.ok("POST", f"{CONTROL}/n:schedule-maintenance", window(0.2))
    await until(http, "n", lambda n: n["state"] == during)
    await asyncio.sleep(0.7)  # past the duration
    assert (await http.ok("GET", f"{NODES}/n"))["state"] == after


async def test_a_spot_node_ends_terminated(http: Http) -> None:
    await ready(http, "cheap", schedulingConfig={"spot": True})
    await http.ok("POST", f"{CONTROL}/cheap:schedule-maintenance", window(0.2))
    await until(http, "cheap", lambda n: n["state"] == "TERMINATED")
    await asyncio.sleep(0.7)
    assert (await http.ok("GET", f"{NODES}/cheap"))["state"] == "TERMINATED"


async def test_perform_maintenance_starts_the_window_now(http: Http) -> None:
    await ready(http, "early")
    await http.ok("POST", f"{CONTROL}/early:schedule-maintenance", window(3600, 0.5))
    op = await http.ok("POST", f"{ALPHA}/early:performMaintenance", {})
    assert op["done"] is True
    assert op["metadata"]["verb"] == "performMaintenance"
    assert op["response"]["name"].endswith("/nodes/early")
    # An ordinary operation of the zone: v2's operations.get reads it.
    assert (await http.ok("GET", f"/v2/{op['name']}"))["done"] is True
    node = await http.ok("GET", f"{NODES}/early")
    block = node["upcomingMaintenance"]
    assert (block["maintenanceStatus"], block["canReschedule"]) == ("ONGOING", False)
    await until(http, "early", unhealthy, 2.0)  # after the lead, not in an hour
    await until(http, "early", lambda n: n.get("health") == "HEALTHY")


async def test_perform_maintenance_refusals(http: Http) -> None:
    await ready(http, "none")
    status, error = await http("POST", f"{ALPHA}/none:performMaintenance")
    assert (status, error["error"]["status"]) == (400, "FAILED_PRECONDITION")
    assert "no pending maintenance" in error["error"]["message"]

    await ready(http, "small", "v6e-4")  # v6e under 2x4 cannot start maintenance early
    internal = await http.ok("POST", f"{CONTROL}/small:schedule-maintenance", window(3600))
    assert internal["maintenance"]["canReschedule"] is False
    status, error = await http("POST", f"{ALPHA}/small:performMaintenance")
    assert (status, error["error"]["status"]) == (400, "FAILED_PRECONDITION")
    assert "2x4" in error["error"]["message"]

    await ready(http, "pinned", "v6e-8")
    body = window(3600, can_reschedule=False)
    await http.ok("POST", f"{CONTROL}/pinned:schedule-maintenance", body)
    status, error = await http("POST", f"{ALPHA}/pinned:performMaintenance")
    assert (status, error["error"]["status"]) == (400, "FAILED_PRECONDITION")

    await http.ok("POST", f"{CONTROL}/none:schedule-maintenance", window(3600))
    status, error = await http("POST", f"{ALPHA}/none:performMaintenance", {"name": "x"})
    assert (status, error["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert 'Unknown name "name"' in error["error"]["message"]
    assert (await http("POST", f"{ALPHA}/ghost:performMaintenance"))[0] == 404
    assert (await http("GET", f"{ALPHA}/none:performMaintenance"))[0] == 404
    assert (await http("POST", f"{ALPHA}/none:performMaintenance", None, force="1"))[0] == 400
    # Nothing of that started it.
    node = await http.ok("GET", f"{NODES}/none")
    assert node["upcomingMaintenance"]["maintenanceStatus"] == "PENDING"


async def test_simulate_maintenance_event(http: Http, emulator: EmulatorServer) -> None:
    await ready(http, "sim", "v4-16")  # two workers
    for bad in ({"workerIds": [1]}, {"workerIds": "1"}, {"workerIds": ["7"]}, {"x": 1}):
        assert (await http("POST", f"{ALPHA}/sim:simulateMaintenanceEvent", bad))[0] == 400
    node = emulator.state.get_node(P, Z, "sim")
    servers = [MetadataServer(node, "127.0.0.1", i) for i in range(2)]
    for server in servers:
        await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            for server in servers:  # each VM has read the key: it will be warned
                assert await event(session, server) == "NONE"
            op = await http.ok(
                "POST", f"{ALPHA}/sim:simulateMaintenanceEvent", {"workerIds": ["1"]}
            )
            assert op["metadata"]["verb"] == "simulateMaintenanceEvent"
            block = (await http.ok("GET", f"{NODES}/sim"))["upcomingMaintenance"]
            assert (block["type"], block["maintenanceStatus"]) == ("UNSCHEDULED", "ONGOING")
            await asyncio.sleep(0.05)
            # "A maintenance event will only be fired on the first specified worker ID."
            internal = (await http.ok("GET", "/_emulator/v1/nodes"))["nodes"]
            [sim] = [n for n in internal if n["node_id"] == "sim"]
            assert sim["maintenance_event"] == ["NONE", "TERMINATE_ON_HOST_MAINTENANCE"]
            assert [await event(session, s) for s in servers] == [
                "NONE", "TERMINATE_ON_HOST_MAINTENANCE"
            ]  # fmt: skip
    finally:
        for server in servers:
            await server.close()
    await until(http, "sim", unhealthy)
    [sim] = [
        n for n in (await http.ok("GET", "/_emulator/v1/nodes"))["nodes"] if n["node_id"] == "sim"
    ]
    assert sim["maintenance_down"] is True


async def event(session: aiohttp.ClientSession, server: MetadataServer, **query: str) -> str:
    url = f"http://{server.address}{MAINTENANCE_EVENT}"
    async with session.get(url, headers=HEADERS, params=query or None) as r:
        assert r.status == 200
        return await r.text()


async def test_maintenance_event_warns_only_a_vm_that_asked(
    http: Http, emulator: EmulatorServer
) -> None:
    await ready(http, "quiet")
    await ready(http, "asks")
    quiet = MetadataServer(emulator.state.get_node(P, Z, "quiet"), "127.0.0.1")
    asks = MetadataServer(emulator.state.get_node(P, Z, "asks"), "127.0.0.1")
    await quiet.start()
    await asks.start()
    try:
        async with aiohttp.ClientSession() as session:
            assert await event(session, asks) == "NONE"
            async with session.get(f"http://{asks.address}{MAINTENANCE_EVENT}") as r:
                assert r.status == 403  # without Metadata-Flavor
            for node_id in ("quiet", "asks"):
                await http.ok("POST", f"{CONTROL}/{node_id}:schedule-maintenance", window(0.5))
            # The notice comes 0.3 s before the start (a request waiting for the change is
            # woken through the worker hosts: tests/emulator/hosts/test_hosts_maintenance.py).
            seen = []
            for _ in range(40):
                seen.append(await event(session, asks))
                if seen[-1] != "NONE":
                    break
                await asyncio.sleep(0.02)
            assert seen[-1] == "TERMINATE_ON_HOST_MAINTENANCE"
            assert (await http.ok("GET", f"{NODES}/asks")).get("health") == "HEALTHY"
            quiet_run = emulator.state.get_node(P, Z, "quiet").host_maintenance
            assert quiet_run is not None
            assert not quiet_run.noticed
    finally:
        await quiet.close()
        await asks.close()
    await until(http, "asks", unhealthy)
    # Back up, the key says NONE again (the run's state; its workers are booted afresh).
    await until(http, "asks", lambda n: n.get("health") == "HEALTHY")
    run = emulator.state.get_node(P, Z, "asks").host_maintenance
    assert run is not None
    assert run.event_value(0) == "NONE"


def test_the_command_line_takes_the_maintenance_options() -> None:
    args = build_parser().parse_args(
        ["--maintenance-lead-seconds", "2", "--maintenance-duration-seconds", "5",
         "--tpu-maintenance-node", "repairing"]
    )  # fmt: skip
    assert (args.maintenance_lead_seconds, args.maintenance_duration_seconds) == (2.0, 5.0)
    assert args.tpu_maintenance_node == "repairing"
    defaults = build_parser().parse_args([])
    assert (defaults.maintenance_lead_seconds, defaults.maintenance_duration_seconds) == (
        60.0,
        None,
    )
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--tpu-maintenance-node", "gone"])
