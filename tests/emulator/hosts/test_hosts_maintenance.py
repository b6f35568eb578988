"""Host maintenance on the emulator's real worker hosts (SSH servers with their metadata
servers): a request waiting on `instance/maintenance-event` hears TERMINATE_ON_HOST_MAINTENANCE
before the window, the run's own watcher stops the workload before the node goes down, and the
node comes back with its disk and the key NONE again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hosts_support import NODES, Cloud, eventually, hosts_options
from proc_support import listening

from tpucared.launch import RunState
from tpucared_emulator.hosts.metadata import MAINTENANCE_EVENT

HEADERS = {"Metadata-Flavor": "Google"}


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    timing = {"maintenance_event_lead_seconds": 0.5, "maintenance_duration_seconds": 0.5}
    return {**hosts_options(emulator_options, tmp_path), **timing}


async def metadata_host(cloud: Cloud, node_id: str) -> str:
    (result,) = await cloud.run(await cloud.targets(node_id), 'echo "$GCE_METADATA_HOST"')
    return result.stdout_tail.strip()


async def test_the_notice_wakes_a_waiting_request_and_the_node_comes_back(cloud: Cloud) -> None:
    await cloud.create("kept", "v4-8")
    targets = await cloud.targets("kept")
    await cloud.run(targets, "echo saved > ~/checkpoint")
    await cloud.launch(targets, "~/run", "sleep 600")
    url = f"http://{await metadata_host(cloud, 'kept')}{MAINTENANCE_EVENT}"
    async with aiohttp.ClientSession() as session:
        async with session.get(url, headers=HEADERS) as r:
            assert (await r.text(), "ETag" in r.headers) == ("NONE", True)
            etag = r.headers["ETag"]
        window = {"start_in_seconds": 1.0, "duration_seconds": 0.5, "type": "SCHEDULED"}
        await cloud.control("kept", "schedule-maintenance", window)
        loop = asyncio.get_running_loop()
        started = loop.time()
        params = {"wait_for_change": "true", "last_etag": etag, "timeout_sec": "5"}
        async with session.get(url, headers=HEADERS, params=params) as r:
            assert await r.text() == "TERMINATE_ON_HOST_MAINTENANCE"
            assert r.headers["ETag"] != etag
        assert loop.time() - started < 0.9  # woken by the notice, before the window's start
        node = await cloud.http.ok("GET", f"{NODES}/kept")
        assert node["upcomingMaintenance"]["maintenanceStatus"] == "PENDING"

    await until(cloud, "kept", "UNHEALTHY_MAINTENANCE")  # down: READY, workers off
    assert not await asyncio.to_thread(listening, targets[0].host, cloud.hosts.port)
    node = await until(cloud, "kept", "HEALTHY")
    await eventually(lambda: listening(targets[0].host, cloud.hosts.port), "booted again")
    (result,) = await cloud.run(targets, "cat ~/checkpoint")
    assert result.stdout_tail.strip() == "saved"  # the same disk
    # The run's own watcher heard the notice and stopped the workload before the host went
    # down (launch/sh/run.sh): it ended, recorded, rather than vanished with the host.
    assert await cloud.probe(targets, "~/run") == [RunState.EXITED]
    (kind,) = await cloud.run(targets, "cat ~/run/notice_kind")
    assert kind.stdout_tail.strip() == "maintenance"
    url = f"http://{await metadata_host(cloud, 'kept')}{MAINTENANCE_EVENT}"
    async with aiohttp.ClientSession() as session, session.get(url, headers=HEADERS) as r:
        assert await r.text() == "NONE"


async def until(cloud: Cloud, node_id: str, health: str) -> dict[str, Any]:
    for _ in range(250):
        node: dict[str, Any] = await cloud.http.ok("GET", f"{NODES}/{node_id}")
        if node.get("health") == health:
            assert node["state"] == "READY"
            return node
        await asyncio.sleep(0.02)
    raise AssertionError(f"{node_id} never {health}")
