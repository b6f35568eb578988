"""An asyncssh server that runs commands as local processes: a simulated worker host.

The model for the emulator's worker hosts (which own their production version): each exec
request runs `sh -c COMMAND` as a local subprocess, with stdin/stdout/stderr piped over the
channel and the exit status sent back. For the tests it also counts sessions in flight, and can
misbehave the way a fresh TPU VM does: refuse the key for the first connections (ssh-keys
metadata still propagating) or drop connections during the handshake (sshd's MaxStartups).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field

import asyncssh

from bench.common import free_port


@dataclass
class LocalWorkerHost:
    addresses: list[str]
    client_key: asyncssh.SSHKey
    host_key: asyncssh.SSHKey = field(
        default_factory=lambda: asyncssh.generate_private_key("ssh-ed25519")
    )
    port: int = 0
    deny_auth_connections: int = 0  # refuse the key on this many next connections
    drop_connections: int = 0  # close this many next connections before authentication
    connections: int = 0
    active: int = 0
    max_active: int = 0
    server: asyncssh.SSHAcceptor | None = None
    _procs: set[asyncio.subprocess.Process] = field(default_factory=set)
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)
    _conns: set[asyncssh.SSHServerConnection] = field(default_factory=set)

    async def start(self) -> None:
        if not self.port:
            self.port = free_port(*self.addresses)
        self.server = await asyncssh.create_server(
            lambda: _Server(self),
            self.addresses,
            self.port,
            server_host_keys=[self.host_key],
            process_factory=self._handle,
            encoding=None,
            allow_scp=False,
        )

    async def stop(self) -> None:
        """Like a preempted VM: stop listening, kill every command, drop every connection."""
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
        for proc in list(self._procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for conn in list(self._conns):
            conn.abort()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await asyncio.gather(*(c.wait_closed() for c in list(self._conns)), return_exceptions=True)

    def public_host_key(self) -> str:
        algorithm, blob = self.host_key.export_public_key("openssh").decode().split()[:2]
        return f"{algorithm} {blob}"

    async def _handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            process.command or "",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # so stop() can kill the command's whole group
        )
        assert proc.stdin
        assert proc.stdout
        assert proc.stderr
        self._procs.add(proc)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await asyncio.gather(
                _pump_in(process.stdin, proc.stdin),
                _pump_out(proc.stdout, process.stdout),
                _pump_out(proc.stderr, process.stderr),
            )
            process.exit(await proc.wait())
        finally:
            self._procs.discard(proc)
            self.active -= 1


async def _pump_in(src: asyncssh.SSHReader[bytes], dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        while chunk := await src.read(65536):
            dst.write(chunk)
            await dst.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
        dst.close()


async def _pump_out(src: asyncio.StreamReader, dst: asyncssh.SSHWriter[bytes]) -> None:
    with contextlib.suppress(asyncssh.Error, BrokenPipeError):
        while chunk := await src.read(65536):
            dst.write(chunk)
            await dst.drain()


class _Server(asyncssh.SSHServer):
    def __init__(self, host: LocalWorkerHost) -> None:
        self.host = host
        self.deny = False
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.host.connections += 1
        self.host._conns.add(conn)
        self.conn = conn
        if self.host.drop_connections > 0:
            self.host.drop_connections -= 1
            conn.abort()
            return
        if self.host.deny_auth_connections > 0:
            self.host.deny_auth_connections -= 1
            self.deny = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.host._conns.discard(self.conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return not self.deny and key.public_data == self.host.client_key.public_data
