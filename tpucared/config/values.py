"""The frozen values a loaded config hands out: `Config` and its parts.

Everything here is already checked: paths are absolute, durations are seconds or
`timedelta`s, fleets are the core's `FleetSpec`s and the planner tunables a core `Policy`.
The runtime, the CLI and the demo read these; only `build.py` makes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tpucared.core.ledger.cost import Prices
from tpucared.core.model.specs import CapacityKind, FleetSpec
from tpucared.core.notify.spec import NotifySpec
from tpucared.core.vocab.policy import Policy


@dataclass(frozen=True)
class DaemonConfig:
    db: str  # an absolute path, or a SQLAlchemy URL as written
    poll_interval: float  # seconds
    http_host: str
    http_port: int
    owner: str  # the `tpucared-owner` label value
    events_retention: float | None = 30 * 86400.0  # seconds; None keeps every event
    lease: float = 15.0  # seconds: the leader lease (runtime/leader.py), > poll_interval
    start_checks: bool = True  # the preflight at start, logged (tpucared/preflight/)
    # The env var naming the page's token (runtime/page/auth.py); None: no token asked.
    http_token_env: str | None = None

    @property
    def db_url(self) -> str:
        return self.db if "://" in self.db else f"sqlite+aiosqlite:///{self.db}"


@dataclass(frozen=True)
class GcpConfig:
    project: str
    endpoint: str
    credentials: str  # "default" (ADC), "none" (emulators only) or an absolute key-file path


@dataclass(frozen=True)
class SshConfig:
    user: str
    port: int
    key: Path
    internal_ip: bool
    concurrency: int
    # Worker probes a second at most (core/workload/probes.py `probe_interval`).
    probe_rate: int = 200
    # OS Login (runtime/oslogin.py): the user is then the login profile's, not `user`.
    os_login: bool = False
    os_login_account: str | None = None  # default: the credentials' service account


@dataclass(frozen=True)
class GuardConfig:
    """Limits a config must stay within (e.g. a TRC grant), so a typo cannot spend money."""

    projects: frozenset[str] | None = None  # `[guard] project`: one project or a list
    zones: frozenset[str] | None = None
    accelerator_types: frozenset[str] | None = None  # TPU API fleets'
    machine_types: frozenset[str] | None = None  # Compute Engine fleets'
    capacity: frozenset[CapacityKind] | None = None
    max_nodes: int | None = None


@dataclass(frozen=True)
class Config:
    path: Path
    daemon: DaemonConfig
    gcp: GcpConfig
    ssh: SshConfig
    fleets: tuple[FleetSpec, ...]
    policy: Policy
    guard: GuardConfig | None = None
    notify: tuple[NotifySpec, ...] = ()
    prices: Prices = field(default_factory=Prices)  # `[prices]`, for `tpucared goodput`

    def fleet(self, name: str) -> FleetSpec:
        for spec in self.fleets:
            if spec.name == name:
                return spec
        raise KeyError(name)
