"""Fixtures of the SSH layer's tests: the client key, a real OpenSSH sshd on loopback addresses
(ssh_sshd.py), asyncssh worker hosts (ssh_localhost.py), pools, and run directories whose
detached workloads are killed after the test."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import asyncssh
import pytest
from ssh_localhost import LocalWorkerHost
from ssh_sshd import OpenSshServer, generate_host_keys, require_sshd
from ssh_targets import targets_of

from tpucared.ssh import ConnectionPool, Target, ensure_client_key, openssh_public_key

# Loopback blocks of this test directory, away from other test suites' addresses.
SSHD_ADDRESSES = [f"127.88.0.{i}" for i in range(1, 7)]


@pytest.fixture(scope="session")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> asyncssh.SSHKey:
    return ensure_client_key(tmp_path_factory.mktemp("client") / "keys" / "id_ed25519")


@pytest.fixture(scope="session")
def host_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_sshd()
    return generate_host_keys(tmp_path_factory.mktemp("hostkeys"))


@pytest.fixture(scope="session")
def sshd(
    tmp_path_factory: pytest.TempPathFactory,
    client_key: asyncssh.SSHKey,
    host_keys: dict[str, Path],
) -> Iterator[OpenSshServer]:
    """One real sshd for the session, answering on six addresses (six workers)."""
    server = OpenSshServer(
        directory=tmp_path_factory.mktemp("sshd"),
        addresses=SSHD_ADDRESSES,
        authorized_keys=[openssh_public_key(client_key)],
        host_keys=host_keys,
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def sshd_factory(
    tmp_path: Path, client_key: asyncssh.SSHKey, host_keys: dict[str, Path]
) -> Iterator[Callable[[list[str]], OpenSshServer]]:
    """Make sshd servers (not started) of this test; all are stopped afterwards."""
    servers: list[OpenSshServer] = []

    def make(addresses: list[str]) -> OpenSshServer:
        server = OpenSshServer(
            directory=tmp_path / f"sshd{len(servers)}",
            addresses=addresses,
            authorized_keys=[openssh_public_key(client_key)],
            host_keys=host_keys,
        )
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def sshd_targets(sshd: OpenSshServer) -> list[Target]:
    return targets_of(sshd)


@pytest.fixture
async def local_hosts(
    client_key: asyncssh.SSHKey,
) -> AsyncIterator[Callable[..., Awaitable[LocalWorkerHost]]]:
    """Start asyncssh worker hosts of this test; all are stopped afterwards."""
    hosts: list[LocalWorkerHost] = []

    async def start(addresses: list[str], **kwargs: object) -> LocalWorkerHost:
        host = LocalWorkerHost(addresses=addresses, client_key=client_key, **kwargs)  # type: ignore[arg-type]
        await host.start()
        hosts.append(host)
        return host

    yield start
    for host in hosts:
        await host.stop()


@pytest.fixture
async def pool(client_key: asyncssh.SSHKey) -> AsyncIterator[ConnectionPool]:
    async with ConnectionPool(client_key, connect_timeout=5.0) as p:
        yield p


@pytest.fixture
def run_dirs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Run directories; any detached run still alive in them is killed after the test."""
    made: list[Path] = []

    def make(name: str) -> Path:
        path = tmp_path / "runs" / name
        made.append(path)
        return path

    yield make
    for path in made:
        pid_file = path / "pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
