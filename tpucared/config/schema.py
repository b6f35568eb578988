"""The shape of the TOML file: one pydantic model per table, with its defaults.

Pass one of the validation: strict types, unknown keys refused, and the per-value rules of
`syntax.py` (durations, names, zones, accelerator types, label syntax) plus ranges. Rules
across keys are not here but in `build.py`. `ConfigFile` is the whole file; the README's
"Configuration" section documents each key and default, and must agree with this module.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from tpucared.config.node_options import (
    AccountEmail,
    DiskSource,
    Metadata,
    Network,
    Reservation,
    Scope,
    ServiceAccount,
    Subnetwork,
    Tags,
)
from tpucared.config.prices import PricesTable
from tpucared.config.syntax import (
    AcceleratorType,
    Api,
    Duration,
    DurationOrNever,
    EnvName,
    FleetName,
    Image,
    LabelKey,
    LabelValue,
    MachineTypeName,
    NonEmpty,
    OnPreemption,
    Owner,
    Project,
    RuntimeVersion,
    StopSignal,
    Topology,
    UserName,
    Zone,
    one_or_more,
    unique_list,
)
from tpucared.core.model.specs import (
    CapacityKind,
    DiskMode,
    OnMaintenance,
    OnSuccess,
    Provisioning,
    RestartPolicy,
)
from tpucared.core.notify.spec import NotifyFormat, NotifyOn

DEFAULT_ENDPOINT = "https://tpu.googleapis.com"


def _lax() -> Any:
    # Enums come from TOML as strings; strict mode would only accept enum instances.
    return Field(strict=False)


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class DaemonTable(Table):
    db: NonEmpty
    poll_interval: Duration = timedelta(seconds=10)
    http: NonEmpty = "127.0.0.1:9464"
    # The NAME of an environment variable holding the token the page and /v1 need (never the
    # token itself: a config file is not a secret store).
    http_token_env: EnvName | None = None
    owner: Owner = "default"
    # Events older than this are pruned, a small batch at a time off the tick.
    events_retention: DurationOrNever = timedelta(days=30)
    # The leader lease: a standby takes over at most this long (+ a third) after a leader died.
    # None: core/leadership/lease.py `default_lease` (15 s, or a poll and a half when longer).
    lease: Duration | None = None
    # `tpucared run` runs `tpucared check`'s checks in the background at start and logs them.
    start_checks: bool = True


class GcpTable(Table):
    project: Project
    endpoint: NonEmpty = DEFAULT_ENDPOINT
    credentials: NonEmpty = "default"


class SshTable(Table):
    user: UserName = "tpucared"
    port: int = Field(default=22, ge=1, le=65535)
    key: NonEmpty | None = None
    internal_ip: bool = False
    concurrency: int = Field(default=64, ge=1, le=1024)
    # Worker probes a second at most: past it the probe interval grows with the fleet.
    probe_rate: int = Field(default=200, ge=1, le=100_000)
    os_login: bool = False
    os_login_account: AccountEmail | None = None


class SecretTable(Table):
    env: EnvName


class WorkloadTable(Table):
    run: NonEmpty
    repository: NonEmpty | None = None
    ref: NonEmpty | None = None
    setup: NonEmpty | None = None
    env: dict[EnvName, str] = Field(default_factory=dict)
    secrets: dict[EnvName, SecretTable] = Field(default_factory=dict)
    files: dict[NonEmpty, NonEmpty] = Field(default_factory=dict)
    restart: Annotated[RestartPolicy, _lax()] = RestartPolicy.ON_FAILURE
    max_failures: int = Field(default=10, ge=0)
    hang_timeout: Duration | None = None
    stop_signal: StopSignal = "TERM"
    stop_grace: Duration = timedelta(seconds=25)
    on_success: Annotated[OnSuccess, _lax()] = OnSuccess.DELETE
    health_check: NonEmpty | None = None
    health_check_timeout: Duration = timedelta(seconds=60)
    max_bad_hosts: int = Field(default=3, ge=0)
    on_maintenance: Annotated[OnMaintenance, _lax()] = OnMaintenance.CHECKPOINT
    maintenance_lead: Duration = timedelta(minutes=5)


class DataDiskTable(Table):
    source: DiskSource
    mode: Annotated[DiskMode, _lax()] = DiskMode.READ_WRITE


class FleetTable(Table):
    name: FleetName
    project: Project | None = None  # default: gcp.project
    zones: Annotated[list[Zone], unique_list("at least one zone")]
    # Which cloud API keeps the nodes. "tpu": nodes of the Cloud TPU API, named by
    # accelerator_type and runtime_version; "compute": Compute Engine TPU VMs, named by
    # machine_type, image, on_preemption, topology and, for flex-start, max_run_duration
    # (build.py requires the right ones).
    api: Api = "tpu"
    accelerator_type: AcceleratorType | None = None
    runtime_version: RuntimeVersion | None = None
    machine_type: MachineTypeName | None = None
    image: Image | None = None  # default: the machine type's generation's (core/model/machines.py)
    on_preemption: OnPreemption | None = None  # spot only; default "stop"
    topology: Topology | None = None  # compute only: a multi-host slice; omitted: one VM
    max_run_duration: Duration | None = None  # compute, capacity "flex-start" only (required)
    size: int = Field(ge=0, le=10000)
    capacity: Annotated[CapacityKind, _lax()] = CapacityKind.SPOT
    provisioning: Annotated[Provisioning, _lax()] = Provisioning.DIRECT
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=62)
    workload: WorkloadTable | None = None
    # How the nodes are made (config/node_options.py checks them across keys).
    network: Network | None = None
    subnetwork: Subnetwork | None = None
    service_account: ServiceAccount | None = None
    service_account_scopes: list[Scope] = Field(default_factory=list)
    tags: Tags = Field(default_factory=list)
    metadata: Metadata = Field(default_factory=dict)
    data_disks: list[DataDiskTable] = Field(default_factory=list)
    reservation: Reservation | None = None
    # compute, capacity "reserved": the reservation is a calendar-mode (future) reservation,
    # whose VMs must be RESERVATION_BOUND (config/apis.py).
    reservation_bound: bool | None = None
    # Multislice: each slot is `slices` slices running one job (README "Multislice").
    slices: int = Field(default=1, ge=1, le=256)
    multislice_hold: Duration = timedelta(minutes=30)


class PolicyTable(Table):
    creates_per_minute: int = Field(default=60, ge=1)
    max_creates: int = Field(default=256, ge=1)
    max_creates_per_fleet: int = Field(default=256, ge=1)
    capacity_backoff: Duration = timedelta(seconds=4)
    capacity_backoff_cap: Duration = timedelta(seconds=4)
    # The random share of each capacity wait (1 = full jitter over [0, wait]).
    capacity_backoff_jitter: float = Field(default=0.1, ge=0, le=1)
    transient_backoff: Duration = timedelta(seconds=5)
    transient_backoff_cap: Duration = timedelta(minutes=2)
    error_backoff: Duration = timedelta(minutes=10)
    error_backoff_cap: Duration = timedelta(minutes=30)
    defect_backoff: Duration = timedelta(seconds=30)
    defect_backoff_cap: Duration = timedelta(minutes=30)
    create_grace: Duration = timedelta(minutes=2)
    vanish_grace: Duration = timedelta(seconds=20)
    unhealthy_grace: Duration = timedelta(minutes=10)
    max_delete_calls: int = Field(default=5, ge=1)
    timeouts: dict[str, DurationOrNever] = Field(default_factory=dict)


class GuardTable(Table):
    project: Annotated[list[Project], one_or_more("at least one project")] | None = None
    zones: Annotated[list[Zone], unique_list("at least one zone")] | None = None
    accelerator_types: list[AcceleratorType] | None = None
    machine_types: list[MachineTypeName] | None = None
    capacity: list[Annotated[CapacityKind, _lax()]] | None = None
    max_nodes: int | None = Field(default=None, ge=0)


class NotifyTable(Table):
    name: FleetName | None = None  # how logs and status name it: never by its URL
    url: NonEmpty | None = None
    url_env: EnvName | None = None
    format: Annotated[NotifyFormat, _lax()] = NotifyFormat.SLACK
    on: Annotated[list[Annotated[NotifyOn, _lax()]], unique_list("at least one kind")] = Field(
        default_factory=lambda: list(NotifyOn)
    )
    stockout_after: Duration = timedelta(minutes=30)
    min_interval: Duration = timedelta(minutes=10)


class ConfigFile(Table):
    """The whole file: `[daemon]`, `[gcp]`, `[ssh]`, `[[fleet]]`, `[policy]`, `[guard]`,
    `[[notify]]`, `[prices]`."""

    daemon: DaemonTable
    gcp: GcpTable
    ssh: SshTable = SshTable()
    fleet: list[FleetTable] = Field(default_factory=list)
    policy: PolicyTable = PolicyTable()
    guard: GuardTable | None = None
    notify: list[NotifyTable] = Field(default_factory=list)
    prices: PricesTable = Field(default_factory=dict)  # config/prices.py
