"""Host key pinning per node incarnation.

Owns `HostKeyPolicy` (what asyncssh is told to trust for one connection), `HostKeyMismatch`,
and the conversions between key objects, stored pin strings and the node's guest attributes.

Every recreation of a node gets new host keys under the same name and often the same address,
so keys are pinned per incarnation, never per name. The pins come from the node's guest
attributes (`hostkeys/ssh-ed25519`, written by the guest agent and read by gcloud the same way)
or, failing those, from the first connection to that incarnation (trust on first use): the
fan-out returns the key it saw and the caller stores it with the worker record. Within one
incarnation a different key is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import asyncssh

from tpucared.ssh.keys import openssh_public_key

# Preference when nothing is pinned. asyncssh's default order offers RSA first; ed25519 is what
# the guest agent publishes and what a later pin from guest attributes will name.
TOFU_HOST_KEY_ALGS: tuple[str, ...] = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "rsa-sha2-512",
    "rsa-sha2-256",
)

# The order pins are listed in, preferred first.
_KEY_TYPE_ORDER = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
)


class HostKeyMismatch(Exception):
    """The server presented a host key other than the one pinned for this node incarnation."""

    def __init__(
        self, host: str, port: int, pinned: Sequence[str], seen: str | None, detail: str = ""
    ) -> None:
        self.host = host
        self.port = port
        self.pinned = tuple(pinned)
        self.seen = seen
        expected = ", ".join(fingerprint(k) for k in self.pinned) or "none"
        presented = fingerprint(seen) if seen else "no key of a pinned type"
        super().__init__(
            f"host key of {host}:{port} does not match the key pinned for this node incarnation "
            f"(pinned {expected}; server presented {presented}){': ' + detail if detail else ''}. "
            "Refusing to connect: within one incarnation a new key means another machine answers "
            "at this address."
        )


def format_host_key(key: asyncssh.SSHKey) -> str:
    """`ssh-ed25519 AAAA...` (no comment), the form stored in WorkerRecord.host_keys."""
    return openssh_public_key(key)


def parse_host_key(line: str) -> asyncssh.SSHKey:
    """Parse one OpenSSH public key line; a trailing comment is allowed."""
    try:
        return asyncssh.import_public_key(line.strip())
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise ValueError(f"not an OpenSSH public key: {line[:40]!r}...: {exc}") from exc


def fingerprint(line: str) -> str:
    """SHA256 fingerprint as OpenSSH prints it, for messages; the input if unparseable."""
    try:
        return str(parse_host_key(line).get_fingerprint("sha256"))
    except ValueError:
        return line[:40]


def host_keys_from_guest_attributes(
    items: Mapping[str, str] | Iterable[tuple[str, str]],
) -> tuple[str, ...]:
    """Pins from one worker's guest attributes under queryPath `hostkeys/`.

    The guest agent writes key `ssh-ed25519` with the base64 blob as value (some images write
    the whole `type blob` line); both are accepted. Returned ed25519 first, each validated.
    """
    pairs = items.items() if isinstance(items, Mapping) else items
    keys: dict[str, str] = {}
    for key_type, value in pairs:
        fields = value.split()
        if not fields:
            continue
        line = f"{fields[0]} {fields[1]}" if len(fields) > 1 else f"{key_type} {fields[0]}"
        keys[key_type] = format_host_key(parse_host_key(line))

    def rank(key_type: str) -> int:
        return _KEY_TYPE_ORDER.index(key_type) if key_type in _KEY_TYPE_ORDER else 99

    return tuple(keys[t] for t in sorted(keys, key=lambda t: (rank(t), t)))


@dataclass(frozen=True)
class HostKeyPolicy:
    """What one connection trusts: the pinned keys, or anything (trust on first use)."""

    pinned: tuple[str, ...] = ()

    @property
    def trust_on_first_use(self) -> bool:
        return not self.pinned

    def connect_kwargs(self) -> dict[str, object]:
        """Keyword arguments for asyncssh.connect / create_connection.

        Pinned: known_hosts is the list of pinned keys (asyncssh then also asks the server only
        for those key types, so a server with several host keys presents the pinned one).
        TOFU: validation is off and the key is read back from the connection afterwards.
        """
        if self.trust_on_first_use:
            return {"known_hosts": None, "server_host_key_algs": list(TOFU_HOST_KEY_ALGS)}
        keys = [parse_host_key(line) for line in self.pinned]
        return {"known_hosts": (keys, [], [])}


class PinningClient(asyncssh.SSHClient):
    """asyncssh client callback that remembers a host key asyncssh refused, and tells
    `on_lost` when the connection ends (whoever ended it).

    asyncssh checks the pinned keys itself and calls validate_host_public_key only for a key
    that is not among them; answering False makes it fail the handshake, and the key kept here
    lets the caller name it in HostKeyMismatch.
    """

    def __init__(self, on_lost: Callable[[], None] | None = None) -> None:
        self.rejected_key: str | None = None
        self._on_lost = on_lost

    def connection_lost(self, exc: Exception | None) -> None:
        if self._on_lost is not None:
            self._on_lost()

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        self.rejected_key = format_host_key(key)
        return False
