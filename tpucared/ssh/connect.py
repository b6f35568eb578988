"""Opening one authenticated, host-key-checked SSH connection to one worker.

Owns `client_options()` (the daemon's asyncssh settings, built once and shared) and
`open_connection()`. The pool (`pool.py`) is its only caller in the daemon. Nothing from the
daemon's environment leaks in: no ~/.ssh/config, no ssh-agent, no ~/.ssh/known_hosts; the
only credential is the daemon's key and the only trust is the incarnation's pin (or TOFU).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import asyncssh

from tpucared.ssh.hostkeys import HostKeyMismatch, HostKeyPolicy, PinningClient, format_host_key
from tpucared.ssh.target import Target

# AES-GCM first: every TPU VM's CPU has AES-NI, while asyncssh's chacha20-poly1305 runs in
# Python and was ~30% of the client's CPU in a 256-worker fan-out (docs/benchmarks.md).
# chacha20 stays offered last, for servers that insist on it.
CIPHERS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
    "chacha20-poly1305@openssh.com",
)


@dataclass(frozen=True)
class Connection:
    target: Target
    conn: asyncssh.SSHClientConnection
    host_key: str  # the server's host key as seen on this connection ("ssh-ed25519 AAAA...")


def client_options(
    key: asyncssh.SSHKey,
    *,
    keepalive_interval: float = 15.0,
    keepalive_count_max: int = 4,
) -> asyncssh.SSHClientConnectionOptions:
    """asyncssh options for every worker connection.

    Keepalives make a pooled connection to a preempted worker fail within about a minute
    instead of hanging in the next command.
    """
    return asyncssh.SSHClientConnectionOptions(
        config=None,
        client_keys=[key],
        agent_path=None,
        x509_trusted_certs=None,
        password_auth=False,
        kbdint_auth=False,
        gss_auth=False,
        host_based_auth=False,
        keepalive_interval=keepalive_interval,
        keepalive_count_max=keepalive_count_max,
        encryption_algs=list(CIPHERS),
    )


async def open_connection(
    target: Target,
    options: asyncssh.SSHClientConnectionOptions,
    *,
    connect_timeout: float,
    on_lost: Callable[[], None] | None = None,
) -> Connection:
    """Connect, authenticate and check the host key within `connect_timeout` seconds;
    `on_lost` is called when the connection ends, from either side.

    Raises HostKeyMismatch when a pin exists and the server's key is not among the pins, or
    offers no key of a pinned type. Other failures raise asyncssh/OS errors for `classify`.
    """
    policy = HostKeyPolicy(target.pinned_host_keys)
    client = PinningClient(on_lost)
    try:
        async with asyncio.timeout(connect_timeout):
            conn, _ = await asyncssh.create_connection(
                lambda: client,
                target.host,
                target.port,
                options=options,
                config=None,
                username=target.user,
                **policy.connect_kwargs(),
            )
    except asyncssh.HostKeyNotVerifiable as exc:
        raise HostKeyMismatch(target.host, target.port, policy.pinned, client.rejected_key) from exc
    except asyncssh.KeyExchangeFailed as exc:
        if policy.pinned:
            raise HostKeyMismatch(
                target.host, target.port, policy.pinned, None, detail=str(exc)
            ) from exc
        raise
    server_key = conn.get_server_host_key()
    return Connection(target, conn, format_host_key(server_key) if server_key else "")
