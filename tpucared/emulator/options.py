"""EmulatorOptions: everything that configures one emulator instance, with test-friendly defaults.

Shared by the state (timing, catalog, paging, capacity), the server (request log size) and the
CLI (which maps flags onto these fields). Timing can also be changed at run time through
`PUT /_emulator/v1/timing`; capacity through `PUT /_emulator/v1/capacity`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tpucared.emulator.catalog import (
    DEFAULT_ACCELERATOR_TYPES,
    DEFAULT_RUNTIME_VERSIONS,
    DEFAULT_ZONES,
    Catalog,
)


@dataclass
class EmulatorOptions:
    # Lifecycle timing, in seconds of the emulator's clock.
    create_seconds: float = 2.0  # CREATING -> READY (or -> failed for lack of capacity)
    delete_seconds: float = 1.0  # DELETING -> gone; also STOPPING -> STOPPED
    queued_provision_seconds: float = 1.0  # least time a queued resource waits for resources
    preemptible_max_seconds: float = 24 * 3600.0  # preemptible (not spot) nodes die at 24 h
    # Mean lifetime of READY spot/preemptible nodes before a random preemption; None: never.
    spot_mean_lifetime_seconds: float | None = None
    # When a create meets a stockout. Nobody outside Google knows when the real API judges
    # capacity, so the daemon must do well under both: "post" (the create call takes capacity
    # or is doomed at once; its operation fails after create_seconds) or "end" (capacity is
    # judged when the operation ends: a create posted during a stockout succeeds if capacity
    # came back meanwhile).
    capacity_judged: str = "post"

    # What the cloud offers. `offerings` (zone -> accelerator types) overrides the other two.
    zones: Sequence[str] = DEFAULT_ZONES
    accelerator_types: Sequence[str] = DEFAULT_ACCELERATOR_TYPES
    offerings: Mapping[str, Sequence[str]] | None = None
    runtime_versions: Sequence[str] = DEFAULT_RUNTIME_VERSIONS

    # (zone, accelerator type) -> how many nodes of that type may exist at once. Absent: no limit.
    capacity: Mapping[tuple[str, str], int] = field(default_factory=dict)

    # nodes.list page size when the client sends none: small, so that a client ignoring
    # nextPageToken misses nodes in tests instead of in production.
    default_page_size: int = 5
    max_page_size: int = 1000

    # Simulated worker hosts (hosts/): every worker of a READY node is an SSH server running
    # commands as local processes. Off by default here (nothing binds ports unasked); the
    # `tpucared emulator` CLI turns it on.
    ssh_hosts: bool = False
    # Port the simulated SSH server of every worker listens on, at the worker's own loopback
    # address. Used by WorkerHosts implementations; the API itself never mentions SSH ports.
    ssh_port: int = 22
    # Where the simulated workers' home directories live; None: a temporary directory,
    # removed when the emulator stops.
    hosts_dir: str | None = None
    # OS Login enforced on every project (oslogin.py): workers accept only keys imported
    # through the OS Login API, for the profile's user, and ignore `ssh-keys` metadata.
    os_login: bool = False

    request_log_size: int = 100_000
    max_operations: int = 100_000  # finished operations kept for GET, oldest dropped first
    seed: int | None = None  # fixes node ids, random preemptions and random faults
    state_file: str | None = None  # JSON snapshot loaded at start and written at stop

    def catalog(self) -> Catalog:
        if self.offerings is not None:
            return Catalog(self.offerings, self.runtime_versions)
        return Catalog({zone: self.accelerator_types for zone in self.zones}, self.runtime_versions)
