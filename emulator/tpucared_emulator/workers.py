"""Workers of emulated nodes: their loopback addresses, SSH host keys, and the hosts hook.

Each network endpoint of a node is a `Worker` with its own address on 127.0.0.0/8 (never
127.0.0.1; unique among live nodes), so a simulated SSH server per worker can bind it and
clients see one host per worker exactly as on GCP. A worker's ed25519 host key is generated on
first use (creating 10,000 nodes must stay cheap) and published through getGuestAttributes
(`hostkeys/ssh-ed25519`), which is how clients pin host keys per node incarnation.

The hook that brings the workers' simulated hosts up and down is `host_hook.py`'s.
"""

from __future__ import annotations

import secrets

import asyncssh

TPU_RUNTIME_PORT = 8470  # NetworkEndpoint.port is the TPU runtime port, not SSH
HOST_KEY_TYPE = "ssh-ed25519"


class Worker:
    """One host of a slice (one NetworkEndpoint)."""

    __slots__ = ("_host_key", "index", "ip")

    def __init__(self, index: int, ip: str) -> None:
        self.index = index
        self.ip = ip
        self._host_key: asyncssh.SSHKey | None = None

    @property
    def host_key(self) -> asyncssh.SSHKey:
        """The private host key a simulated SSH server for this worker must present."""
        if self._host_key is None:
            self._host_key = asyncssh.generate_private_key(HOST_KEY_TYPE)
        return self._host_key

    @host_key.setter
    def host_key(self, key: asyncssh.SSHKey) -> None:
        self._host_key = key

    @property
    def host_public_key(self) -> str:
        """OpenSSH public key line without comment: `ssh-ed25519 AAAA...`."""
        exported: bytes = self.host_key.export_public_key("openssh")
        return " ".join(exported.decode().split()[:2])

    def host_keys(self) -> dict[str, str]:
        """Key type -> base64 key blob, as the guest agent publishes under `hostkeys/`."""
        key_type, blob = self.host_public_key.split()
        return {key_type: blob}


class LoopbackAllocator:
    """Hands out 127.x.y.z addresses (x in 1..63, z in 1..254), never two live ones alike.

    Addresses are handed out round-robin rather than lowest-free-first so a recreated node gets
    new addresses, as on GCP; stale clients talking to an old address then fail loudly. The
    round starts at a random point, so two emulators on one machine (two test processes, a
    demo beside a test run) do not both give their first worker 127.1.0.1 and fight over its
    SSH port. x stays below 64: the test suites' own sshd servers use 127.88/16 and the fan-out
    benchmark's 127.66/16."""

    _SPAN = 63 * 256 * 254  # x in 1..63, y in 0..255, z in 1..254

    def __init__(self, first: int | None = None) -> None:
        self._next = secrets.randbelow(self._SPAN) if first is None else first % self._SPAN
        self._in_use: set[str] = set()

    def _address(self, n: int) -> str:
        x, rest = divmod(n, 256 * 254)
        y, z = divmod(rest, 254)
        return f"127.{x + 1}.{y}.{z + 1}"

    def allocate(self) -> str:
        for _ in range(self._SPAN):
            address = self._address(self._next)
            self._next = (self._next + 1) % self._SPAN
            if address not in self._in_use:
                self._in_use.add(address)
                return address
        raise RuntimeError("no free loopback address left")

    def release(self, address: str) -> None:
        self._in_use.discard(address)

    def reserve(self, address: str) -> None:
        """Mark an address taken (restoring persisted state)."""
        self._in_use.add(address)
