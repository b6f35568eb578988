"""Classification of SSH failures into the small set of kinds the daemon decides on.

Owns `SshErrorKind` and `classify()`. The fan-out (`fanout.py`) calls `classify()` on every
exception raised while connecting to or running a command on a worker, stores the kind on the
`WorkerResult`, and its `RetryPolicy` (`retry.py`) decides from the kind whether to try again.
Only I/O and SSH errors are classified; anything else is a bug and propagates.
"""

from __future__ import annotations

import socket
from enum import StrEnum

import asyncssh

from tpucared.ssh.hostkeys import HostKeyMismatch


class SshErrorKind(StrEnum):
    """Why a worker could not be reached or a command's outcome is unknown."""

    # Before the command started: safe to retry (nothing ran on the worker).
    REFUSED = "refused"  # TCP refused: sshd not listening yet (first boot) or gone
    TIMEOUT = "timeout"  # TCP connect + SSH handshake + auth did not finish in connect_timeout
    UNREACHABLE = "unreachable"  # no route, DNS failure, network down
    CLOSED = "closed"  # peer closed during banner/kex: sshd starting, MaxStartups storm
    AUTH = "auth"  # "Permission denied (publickey)": metadata keys still propagating
    CHANNEL = "channel"  # connected, but the server would not open a session channel
    HOST_KEY_MISMATCH = "host_key_mismatch"  # key differs from the pin of this incarnation
    PROTOCOL = "protocol"  # kex/protocol failure that retrying will not fix
    # After the command started: the outcome on the worker is unknown, never retried.
    COMMAND_TIMEOUT = "command_timeout"
    LOST = "lost"  # connection dropped while the command ran

    @property
    def before_command(self) -> bool:
        """True when the command certainly did not start, so running it again is safe."""
        return self not in (SshErrorKind.COMMAND_TIMEOUT, SshErrorKind.LOST)


# Kinds that clear by themselves during the first minutes of a node's life.
TRANSIENT_KINDS: frozenset[SshErrorKind] = frozenset(
    {
        SshErrorKind.REFUSED,
        SshErrorKind.TIMEOUT,
        SshErrorKind.UNREACHABLE,
        SshErrorKind.CLOSED,
        SshErrorKind.AUTH,
        SshErrorKind.CHANNEL,
    }
)

# The exceptions `classify` understands; callers catch exactly these.
CLASSIFIED_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncssh.Error,
    HostKeyMismatch,
)


def classify(exc: BaseException) -> SshErrorKind:
    """Map an exception from asyncssh or the socket layer to an `SshErrorKind`.

    Order matters: asyncssh's exceptions are subclasses of each other (all disconnects derive
    from DisconnectError) and of OSError in the socket layer (ConnectionRefusedError is one).
    """
    if isinstance(exc, HostKeyMismatch):
        return SshErrorKind.HOST_KEY_MISMATCH
    if isinstance(exc, asyncssh.PermissionDenied):
        return SshErrorKind.AUTH
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return SshErrorKind.HOST_KEY_MISMATCH
    if isinstance(exc, asyncssh.ChannelOpenError):
        return SshErrorKind.CHANNEL
    if isinstance(exc, asyncssh.KeyExchangeFailed | asyncssh.ProtocolError):
        return SshErrorKind.PROTOCOL
    if isinstance(exc, asyncssh.DisconnectError):
        # ConnectionLost and server-initiated disconnects ("too many connections").
        return SshErrorKind.CLOSED
    if isinstance(exc, ConnectionRefusedError):
        return SshErrorKind.REFUSED
    if isinstance(exc, TimeoutError):
        return SshErrorKind.TIMEOUT
    if isinstance(exc, ConnectionResetError | ConnectionAbortedError | BrokenPipeError):
        return SshErrorKind.CLOSED
    if isinstance(exc, socket.gaierror | OSError):
        return SshErrorKind.UNREACHABLE
    if isinstance(exc, asyncssh.Error):
        return SshErrorKind.PROTOCOL
    raise TypeError(f"not an SSH or network error: {exc!r}") from exc


def describe(exc: BaseException) -> str:
    """A one-line human message; asyncssh errors carry their reason in str()."""
    text = str(exc).strip() or repr(exc)
    return f"{type(exc).__name__}: {text}"
