"""The real daemon keeps a Compute Engine fleet's slot alive through `ComputeCloud`
(tpucared/gcp/compute) against the emulator's Compute Engine surface, whose instances are
simulated SSH worker hosts: the instance is created, the workload launched on it over real
SSH, the spot VM preempted with `instanceTerminationAction: STOP` (TERMINATED: dead) is
deleted and created again, and the workload relaunched with the next TPUCARED_ATTEMPT.

The config has no `api` / `machine_type` keys yet: the test gives the fleet its cloud and
machine type by replacing the loaded `FleetSpec`'s fields (the port reads a machine type in
`accelerator_type` and an image, "" for the default, in `runtime_version`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from runtime_support import PROJECT, ZONE, hosts_emulator_options, query, wait_for, write_config
from workload_harness import daemon_in_process, ssh_hosts

from tpucared.config import load_config
from tpucared.gcp import NoAuth
from tpucared.gcp.compute import ComputeClient, ComputeCloud
from tpucared.gcp.tpu import TpuClient, TpuCloud
from tpucared.runtime.daemon import Daemon
from tpucared_emulator import EmulatorServer

pytestmark = pytest.mark.timeout(120)

FLEET = "iron"
MACHINE = "tpu7x-standard-4t"
RUN = 'echo "$TPUCARED_ATTEMPT" >> "$HOME/attempts"; sleep 300'


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return hosts_emulator_options(emulator_options, tmp_path)


@contextlib.asynccontextmanager
async def daemon_on(emulator: EmulatorServer, tmp_path: Path) -> AsyncIterator[Daemon]:
    """The real daemon with both Google clouds, one slot of the compute fleet "iron"."""
    path = write_config(
        tmp_path, emulator.url, size=1, fleet=FLEET, poll="200ms", workload={"run": RUN}
    )
    config = load_config(path)
    config = replace(
        config,
        ssh=replace(config.ssh, port=emulator.state.options.ssh_port),
        fleets=tuple(
            replace(f, api="compute", accelerator_type=MACHINE, extra={"runtime_version": ""})
            for f in config.fleets
        ),
    )
    compute = ComputeCloud(
        ComputeClient(emulator.url, token_source=NoAuth()), owner=config.daemon.owner
    )
    clouds = {"tpu": TpuCloud(TpuClient(emulator.url, token_source=NoAuth())), "compute": compute}
    try:
        async with daemon_in_process(config, clouds, PROJECT) as daemon:
            yield daemon
    finally:
        for cloud in clouds.values():
            await cloud.aclose()


def attempts(emulator: EmulatorServer, name: str) -> list[int]:
    """TPUCARED_ATTEMPT of each launch on the instance's current worker."""
    book = emulator.compute
    key = f"projects/{PROJECT}/zones/{ZONE}/instances/{name}"
    inst = book.instances.get(key)
    if inst is None or inst.status != "RUNNING":
        return []
    path = ssh_hosts(emulator).home(inst.host, 0) / "attempts"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


async def test_the_daemon_keeps_a_compute_engine_slot_alive(
    emulator: EmulatorServer, tmp_path: Path
) -> None:
    node = f"{FLEET}-0"
    async with daemon_on(emulator, tmp_path) as daemon:
        run = asyncio.create_task(daemon.run(drain_timeout=2.0))

        async def launched(attempt: int) -> bool:
            assert not run.done(), "the daemon stopped"
            return attempts(emulator, node) == [attempt]

        await wait_for(lambda: launched(1), 40, "the first launch")
        emulator.compute.preempt(PROJECT, ZONE, node, None)
        await wait_for(lambda: launched(2), 40, "the relaunch on the new instance")
        daemon.stop.set()
        assert await run == 0

    db = tmp_path / "state.db"
    rows = query(db, "SELECT end_reason, cloud_state FROM nodes WHERE fleet = ? ORDER BY id", FLEET)
    # The dead status (STOPPING, then TERMINATED) does not say why: the preempted operation
    # does (core/nodes/preemption.py, runtime/nodes/preemptions.py).
    assert rows[0]["end_reason"] == "preempted"
    assert rows[1]["end_reason"] is None
    [slot] = query(db, "SELECT preemptions FROM slots WHERE fleet = ?", FLEET)
    assert slot["preemptions"] == 1
    assert rows[-1]["cloud_state"] == "RUNNING"
    numbers = query(
        db, "SELECT number FROM workload_attempts WHERE fleet = ? ORDER BY number", FLEET
    )
    assert [r["number"] for r in numbers] == [1, 2]
