"""Where one command goes: a worker VM of a slice, addressed for SSH.

Owns `Target`, the unit of the fan-out, and `targets_for_node()`, which turns the worker
endpoints the gcp layer observed (`core.model.WorkerEndpoint`) plus the host keys pinned for
this node incarnation into targets. The incarnation key keeps pooled connections and host-key
pins from leaking across recreations of a node with the same name and addresses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpucared.core.model.observed import WorkerEndpoint
from tpucared.ssh.hostkeys import parse_host_key


@dataclass(frozen=True)
class Target:
    worker: int  # TPUCARED_WORKER: index in the node's networkEndpoints
    host: str
    port: int = 22
    user: str = "tpucared"
    # OpenSSH public key lines ("ssh-ed25519 AAAA...") pinned for this incarnation. Empty means
    # trust on first use: the key seen is returned on the result for the caller to persist.
    pinned_host_keys: tuple[str, ...] = ()
    # Node incarnation (cloud id or createTime). A recreated node gets a fresh connection.
    incarnation: str | None = None

    def __post_init__(self) -> None:
        # A corrupt pin must fail where the target is built, not inside a fan-out.
        for line in self.pinned_host_keys:
            parse_host_key(line)

    @property
    def pool_key(self) -> tuple[str, int, str, str | None]:
        return (self.host, self.port, self.user, self.incarnation)

    def __str__(self) -> str:
        return f"worker {self.worker} ({self.user}@{self.host}:{self.port})"


def targets_for_node(
    endpoints: Sequence[WorkerEndpoint],
    *,
    user: str,
    port: int = 22,
    internal_ip: bool = False,
    pinned_host_keys: Mapping[int, Sequence[str]] | None = None,
    incarnation: str | None = None,
) -> list[Target]:
    """One target per worker, ordered by worker index.

    Uses the external IP unless `internal_ip` (as gcloud does). A worker without the requested
    address is an error rather than a silent fallback: the other address is usually unreachable
    from where the daemon runs and would only produce timeouts.
    """
    pins = pinned_host_keys or {}
    targets = []
    for endpoint in sorted(endpoints, key=lambda e: e.index):
        host = endpoint.internal_ip if internal_ip else endpoint.external_ip
        if not host:
            kind = "internal" if internal_ip else "external"
            raise ValueError(
                f"worker {endpoint.index} has no {kind} IP address"
                + ("" if internal_ip else " (set [ssh] internal_ip = true to use internal IPs)")
            )
        targets.append(
            Target(
                worker=endpoint.index,
                host=host,
                port=port,
                user=user,
                pinned_host_keys=tuple(pins.get(endpoint.index, ())),
                incarnation=incarnation,
            )
        )
    return targets
