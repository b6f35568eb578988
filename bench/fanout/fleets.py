"""The fleets of workers the fan-out benchmark reaches: OpenSSH sshd processes or the
tpucared emulator's hosts, all on loopback addresses of this machine."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import math
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import asyncssh

from bench import common
from tpucared.ssh import (
    Target,
    host_keys_from_guest_attributes,
    openssh_public_key,
    ssh_keys_metadata_entry,
)

SSHD = "/usr/sbin/sshd"
# sshd refuses more ListenAddress sockets than this (MAX_LISTEN_SOCKS in OpenSSH's sshd.c).
SSHD_MAX_LISTEN = 16
# Loopback block of the sshd fleet: 127.66.<i // 250>.<i % 250 + 1>; the emulator allocates
# from a random point of 127.1-127.63 (emulator/tpucared_emulator/workers.py), the test suites
# use 127.88.x.y.
SSHD_BLOCK = "127.66"
EMULATOR_PROJECT, EMULATOR_ZONE = "bench", "us-central2-b"
EMULATOR_USER = "bench"
EMULATOR_ACCELERATOR, EMULATOR_WORKERS_PER_NODE = "v4-32", 4


def _loopback(block: str, index: int) -> str:
    return f"{block}.{index // 250}.{index % 250 + 1}"


def _listening(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


async def _wait_listening(addresses: Sequence[str], port: int, what: str, patience: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    pending = list(addresses)
    while pending:
        if _listening(pending[0], port):
            pending.pop(0)
            continue
        if loop.time() > deadline:
            raise RuntimeError(f"{what}: nothing listens on {pending[0]}:{port} after {patience} s")
        await asyncio.sleep(0.02)


@dataclass
class Fleet:
    """Workers reachable over SSH, and what the OpenSSH-based tools need to reach them."""

    name: str
    description: str
    user: str
    port: int
    key_path: Path
    targets: list[Target]
    server_pids: list[int]
    details: dict[str, Any] = field(default_factory=dict)

    def server_cpu(self) -> float:
        return common.tree_cpu_seconds(self.server_pids)

    def openssh_options(self, kex: str | None = None, *, log_level: str = "ERROR") -> list[str]:
        """The same client settings for parallel-ssh and the ssh loop."""
        return [
            *(["-o", f"KexAlgorithms={kex}"] if kex else []),
            "-i", str(self.key_path),
            "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null",
            "-o", "BatchMode=yes",
            "-o", f"LogLevel={log_level}",
            "-p", str(self.port),
        ]  # fmt: skip


def _sshd_config(
    directory: Path,
    addresses: Sequence[str],
    port: int,
    host_keys: list[Path],
    authorized_keys: Path,
    home: Path,
) -> str:
    listen = "\n".join(f"ListenAddress {a}:{port}" for a in addresses)
    keys = "\n".join(f"HostKey {p}" for p in host_keys)
    return f"""\
{listen}
{keys}
PidFile {directory / "sshd.pid"}
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
PrintLastLog no
UseDNS no
# Defaults 10:30:100 and 10 would drop a burst of handshakes ("kex_exchange_identification:
# Connection closed by remote host"), which measures sshd's throttle, not the client.
MaxStartups 1000:30:1000
MaxSessions 1000
LogLevel ERROR
SetEnv HOME={home}
"""


def _start_sshds(
    workers: int, key: asyncssh.SSHKey, directory: Path
) -> tuple[list[subprocess.Popen[bytes]], list[str], int, str]:
    """Start the sshd processes (blocking: run in a thread). Returns (processes, addresses,
    port, host public key)."""
    if not os.access(SSHD, os.X_OK) or shutil.which("ssh-keygen") is None:
        raise RuntimeError(f"{SSHD} and ssh-keygen are needed: apt-get install -y openssh-server")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    directory.mkdir(parents=True, exist_ok=True)
    host_key = directory / "ssh_host_ed25519_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(host_key)], check=True
    )
    host_public = " ".join(host_key.with_suffix(".pub").read_text().split()[:2])
    authorized = directory / "authorized_keys"
    authorized.write_text(openssh_public_key(key) + "\n")
    # A clean home: bash sources ~/.bashrc for commands run by sshd, and a developer's rc
    # (pyenv, conda) would cost more than the fan-out itself.
    home = directory / "home"
    home.mkdir(exist_ok=True)
    addresses = [_loopback(SSHD_BLOCK, i) for i in range(workers)]
    port = common.free_port(*addresses)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with (directory / "sshd.log").open("ab") as log:
            for n, start in enumerate(range(0, workers, SSHD_MAX_LISTEN)):
                own = directory / f"sshd{n}"
                own.mkdir()
                config = own / "sshd_config"
                listen = addresses[start : start + SSHD_MAX_LISTEN]
                config.write_text(_sshd_config(own, listen, port, [host_key], authorized, home))
                processes.append(
                    subprocess.Popen(
                        [SSHD, "-D", "-e", "-f", str(config)],
                        stdout=log,
                        stderr=log,
                        stdin=subprocess.DEVNULL,
                    )
                )
    except BaseException:
        _stop_processes(processes)
        raise
    return processes, addresses, port, host_public


def _stop_processes(processes: Sequence[subprocess.Popen[bytes]], grace: float = 10.0) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL (blocking: run in a thread)."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(grace)


@contextlib.asynccontextmanager
async def sshd_fleet(
    workers: int, key: asyncssh.SSHKey, key_path: Path, directory: Path
) -> AsyncIterator[Fleet]:
    """`workers` loopback addresses served by ceil(workers / 16) OpenSSH sshd processes."""
    processes, addresses, port, host_public = await asyncio.to_thread(
        _start_sshds, workers, key, directory
    )
    try:
        try:
            await _wait_listening(addresses, port, "sshd", 30.0)
        except RuntimeError as exc:
            log = await asyncio.to_thread(read_text_or_empty, directory / "sshd.log")
            raise RuntimeError(f"{exc}; sshd log: {log[-2000:]}") from None
        user = getpass.getuser()
        targets = [
            Target(i, a, port, user, pinned_host_keys=(host_public,), incarnation="bench")
            for i, a in enumerate(addresses)
        ]
        yield Fleet(
            name="sshd",
            description=(
                f"OpenSSH sshd on loopback: {len(processes)} process(es) x <= {SSHD_MAX_LISTEN} "
                "ListenAddress each, MaxStartups 1000:30:1000, MaxSessions 1000, UsePAM no, "
                f"user {user}"
            ),
            user=user,
            port=port,
            key_path=key_path,
            targets=targets,
            server_pids=[p.pid for p in processes],
            details={"sshd_processes": len(processes), "addresses_per_process": SSHD_MAX_LISTEN},
        )
    finally:
        await asyncio.to_thread(_stop_processes, processes)


def _start_emulator(directory: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start `tpucared emulator` in its own process (blocking). Returns (process, API port,
    SSH port)."""
    directory.mkdir(parents=True, exist_ok=True)
    api_port = common.free_port()
    ssh_port = common.free_port("0.0.0.0")  # free on every address (only probed, never listened)
    argv = [
        sys.executable, "-c",
        "import sys; from tpucared_emulator.server import main; sys.exit(main(sys.argv[1:]))",
        "--port", str(api_port), "--ssh-port", str(ssh_port), "--create-seconds", "0.05",
        "--delete-seconds", "0.05", "--hosts-dir", str(directory / "hosts"),
    ]  # fmt: skip
    with (directory / "emulator.log").open("ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    return process, api_port, ssh_port


@contextlib.asynccontextmanager
async def emulator_fleet(
    workers: int, key: asyncssh.SSHKey, key_path: Path, directory: Path
) -> AsyncIterator[Fleet]:
    """ceil(workers / 4) v4-32 nodes of an emulator running in its own process."""
    process, api_port, ssh_port = await asyncio.to_thread(_start_emulator, directory)
    base = f"http://127.0.0.1:{api_port}/v2/projects/{EMULATOR_PROJECT}/locations/{EMULATOR_ZONE}"
    try:
        await _wait_listening(["127.0.0.1"], api_port, "emulator", 30.0)
        nodes = math.ceil(workers / EMULATOR_WORKERS_PER_NODE)
        entry = ssh_keys_metadata_entry(EMULATOR_USER, key)
        targets: list[Target] = []
        async with aiohttp.ClientSession(raise_for_status=True) as http:
            for i in range(nodes):
                body = {
                    "acceleratorType": EMULATOR_ACCELERATOR,
                    "runtimeVersion": "tpu-ubuntu2204-base",
                    "networkConfig": {"enableExternalIps": True},
                    "metadata": {"ssh-keys": entry},
                }
                async with http.post(f"{base}/nodes", json=body, params={"nodeId": f"w{i}"}):
                    pass
            for i in range(nodes):
                targets += await _emulator_targets(http, f"{base}/nodes/w{i}", ssh_port)
        targets = [replace(t, worker=i) for i, t in enumerate(targets[:workers])]
        await _wait_listening([t.host for t in targets], ssh_port, "emulator hosts", 60.0)
        yield Fleet(
            name="emulator",
            description=(
                f"tpucared emulator in its own process, {nodes} x {EMULATOR_ACCELERATOR} nodes, "
                "one asyncssh server per worker on its own 127.x address, user "
                f"{EMULATOR_USER} from ssh-keys metadata, host keys pinned from guest attributes"
            ),
            user=EMULATOR_USER,
            port=ssh_port,
            key_path=key_path,
            targets=targets,
            server_pids=[process.pid],
            details={"nodes": nodes, "accelerator_type": EMULATOR_ACCELERATOR},
        )
    finally:
        # SIGTERM: the emulator stops every simulated host and kills their processes.
        await asyncio.to_thread(_stop_processes, [process], 30.0)


async def _emulator_targets(http: aiohttp.ClientSession, node_url: str, port: int) -> list[Target]:
    for _ in range(500):  # READY within 0.05 s of emulator time; bounded at ~10 s
        async with http.get(node_url) as response:
            node = await response.json()
        if node.get("state") == "READY":
            break
        await asyncio.sleep(0.02)
    else:
        raise RuntimeError(f"{node_url} never became READY")
    async with http.post(
        f"{node_url}:getGuestAttributes", json={"queryPath": "hostkeys/"}
    ) as response:
        attributes = await response.json()
    targets = []
    for index, (endpoint, worker) in enumerate(
        zip(node["networkEndpoints"], attributes["guestAttributes"], strict=True)
    ):
        items = [(i["key"], i["value"]) for i in worker["queryValue"]["items"]]
        targets.append(
            Target(
                worker=index,
                host=endpoint["ipAddress"],
                port=port,
                user=EMULATOR_USER,
                pinned_host_keys=host_keys_from_guest_attributes(items),
                incarnation=node["id"],
            )
        )
    return targets


FLEETS: dict[str, Callable[..., contextlib.AbstractAsyncContextManager[Fleet]]] = {
    "sshd": sshd_fleet,
    "emulator": emulator_fleet,
}


def read_text_or_empty(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
