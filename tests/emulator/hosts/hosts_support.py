"""The emulator's worker hosts as the tests drive them: a `Cloud` (the v2 and control APIs,
targets with pinned host keys, launch and probe), its fixtures, and /proc checks.

Used by the test modules of this folder; conftest.py makes their fixtures from these.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncssh
from emulator_http import Http
from proc_support import alive, group_members, listening  # noqa: F401 (theirs too)

from bench.common import free_port
from tpucared.launch import (
    LaunchState,
    ProbeResult,
    RunState,
    launch_script,
    parse_launch,
    parse_probe,
    probe_script,
)
from tpucared.ssh import (
    RetryPolicy,
    Target,
    WorkerResult,
    host_keys_from_guest_attributes,
    run_on_all,
    sh_command,
    ssh_keys_metadata_entry,
)
from tpucared_emulator import EmulatorServer
from tpucared_emulator.hosts import SshWorkerHosts

P, Z = "hosts", "us-central2-b"
NODES = f"/v2/projects/{P}/locations/{Z}/nodes"
CONTROL = f"/_emulator/v1/projects/{P}/locations/{Z}/nodes"
USER = "tester"
# The servers come up just after READY (as sshd does after boot): retry refusals, quickly.
FAST_RETRY = RetryPolicy(attempts=50, initial_delay=0.02, max_delay=0.1, jitter=0.0)


def is_dir(path: str) -> bool:
    return Path(path).is_dir()


def read(path: str) -> bytes:
    return Path(path).read_bytes()


async def eventually(check: Callable[[], bool], what: str, seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


def hosts_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The test's emulator options with the simulated worker hosts on (a module's
    `emulator_options` fixture returns this)."""
    return {
        **emulator_options,
        "create_seconds": 0.1,
        "delete_seconds": 0.05,
        "ssh_hosts": True,
        "ssh_port": free_port("0.0.0.0"),
        "hosts_dir": str(tmp_path / "hosts"),
    }


class Cloud:
    """The v2 and control APIs, as the daemon and a test harness use them."""

    def __init__(self, emulator: EmulatorServer, http: Http, key: asyncssh.SSHKey) -> None:
        self.emulator = emulator
        self.http = http
        self.key = key
        hosts = emulator.worker_hosts
        assert isinstance(hosts, SshWorkerHosts)
        self.hosts = hosts

    async def create(self, node_id: str, accelerator: str = "v4-32", **spec: Any) -> dict[str, Any]:
        metadata = {"ssh-keys": ssh_keys_metadata_entry(USER, self.key)}
        body = {"acceleratorType": accelerator, "runtimeVersion": "tpu-ubuntu2204-base",
                "metadata": metadata, **spec}  # fmt: skip
        await self.http.ok("POST", NODES, body, nodeId=node_id)
        node = await self.wait_state(node_id, "READY")
        # The servers start just after READY, as sshd does after boot.
        addresses = [endpoint["ipAddress"] for endpoint in node["networkEndpoints"]]
        await eventually(lambda: all(listening(a, self.hosts.port) for a in addresses), "up")
        return node

    async def wait_state(self, node_id: str, state: str) -> dict[str, Any]:
        for _ in range(250):
            node: dict[str, Any] = await self.http.ok("GET", f"{NODES}/{node_id}")
            if node["state"] == state:
                return node
            await asyncio.sleep(0.02)
        raise AssertionError(f"{node_id} never became {state}")

    async def targets(self, node_id: str, *, user: str = USER) -> list[Target]:
        """One target per worker, host keys pinned from the guest attributes."""
        node = await self.http.ok("GET", f"{NODES}/{node_id}")
        attributes = await self.http.ok(
            "POST", f"{NODES}/{node_id}:getGuestAttributes", {"queryPath": "hostkeys/"}
        )
        targets = []
        for index, (endpoint, worker) in enumerate(
            zip(node["networkEndpoints"], attributes["guestAttributes"], strict=True)
        ):
            items = [(i["key"], i["value"]) for i in worker["queryValue"]["items"]]
            targets.append(
                Target(
                    worker=index,
                    host=endpoint["ipAddress"],
                    port=self.hosts.port,
                    user=user,
                    pinned_host_keys=host_keys_from_guest_attributes(items),
                    incarnation=node["id"],
                )
            )
        return targets

    async def run(
        self,
        targets: list[Target],
        command: str,
        *,
        key: asyncssh.SSHKey | None = None,
        retry: RetryPolicy = FAST_RETRY,
    ) -> list[WorkerResult]:
        return await run_on_all(
            targets, command, key=key or self.key, retry=retry, connect_timeout=5.0
        )

    async def launch(self, targets: list[Target], run_dir: str, command: str) -> list[int]:
        results = await self.run(targets, sh_command(launch_script(run_dir, command, env={})))
        launched = [parse_launch(r.stdout_tail) for r in results]
        assert all(r.state is LaunchState.STARTED for r in launched), launched
        return [r.pid for r in launched if r.pid is not None]

    async def probe(self, targets: list[Target], run_dir: str) -> list[RunState]:
        results = await self.run(targets, sh_command(probe_script(run_dir)))
        return [parse_probe(r.stdout_tail).state for r in results]

    async def exited(self, targets: list[Target], run_dir: str = "~/run") -> list[ProbeResult]:
        """Every worker's probe of `run_dir`, polled every 50 ms (100 times at most) until each
        run has EXITED: the last probes."""
        for _ in range(100):
            results = await self.run(targets, sh_command(probe_script(run_dir)))
            probes = [parse_probe(r.stdout_tail) for r in results]
            if all(p.state is RunState.EXITED for p in probes):
                break
            await asyncio.sleep(0.05)
        return probes

    async def control(self, node_id: str, action: str, body: Any = None) -> Any:
        return await self.http.ok("POST", f"{CONTROL}/{node_id}:{action}", body)


@contextlib.asynccontextmanager
async def cloud_of(emulator: EmulatorServer, key: asyncssh.SSHKey) -> AsyncIterator[Cloud]:
    """A `Cloud` on `emulator` (a module's `cloud` fixture yields this)."""
    async with aiohttp.ClientSession() as session:
        yield Cloud(emulator, Http(emulator.url, session), key)
