"""What the user asked for: fleet and workload specs, and the enums they use."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from tpucared.core.model.machines import hosts_of

# Labels every node we create carries (contract). A node without both is never touched.
FLEET_LABEL = "tpucared-fleet"
OWNER_LABEL = "tpucared-owner"
# Labels of a multislice slot's nodes (DESIGN: "labelled with the slot and slice index"). A
# queued resource gives all its nodes one node spec, so its nodes carry the slot only; their
# names say the slice.
SLOT_LABEL = "tpucared-slot"
SLICE_LABEL = "tpucared-slice"
RESERVED_LABELS = (FLEET_LABEL, OWNER_LABEL, SLOT_LABEL, SLICE_LABEL)


class CapacityKind(StrEnum):
    SPOT = "spot"
    PREEMPTIBLE = "preemptible"
    ON_DEMAND = "on-demand"
    RESERVED = "reserved"
    # Compute Engine only (issue 28): a VM or slice waits for capacity from the Dynamic
    # Workload Scheduler, then runs at most `max_run_duration`, when the cloud deletes it.
    FLEX_START = "flex-start"


class Provisioning(StrEnum):
    DIRECT = "direct"  # nodes.create
    QUEUED = "queued"  # queuedResources.create


class RestartPolicy(StrEnum):
    NEVER = "never"
    ON_FAILURE = "on-failure"
    ALWAYS = "always"


class OnMaintenance(StrEnum):
    """What a fleet does about its node's announced host-maintenance window
    (core/workload/maintenance.py; docs/daemon.md argues the default)."""

    CHECKPOINT = "checkpoint"  # the workload checkpoints before the window; relaunch after it
    NOW = "now"  # ... then the maintenance is started at once (performMaintenance)
    REPLACE = "replace"  # ... then the node is replaced (another zone first)
    IGNORE = "ignore"  # nothing before the window (the notice path still hears it)


class OnSuccess(StrEnum):
    """What happens to a slot's node once its workload has succeeded for good."""

    DELETE = "delete"  # default: an idle TPU bills or wastes a grant
    KEEP = "keep"


class ErrorKind(StrEnum):
    """The small taxonomy every cloud failure is classified into (see gcp/errors.py)."""

    CAPACITY = "capacity"  # operation error code 8: no more capacity / insufficient reserved
    QUOTA = "quota"  # 429 with a google.rpc.QuotaFailure detail
    RATE_LIMITED = "rate_limited"  # 429 otherwise
    PERMISSION = "permission"  # 403, and 401 that survives a token refresh
    NOT_FOUND = "not_found"  # 404
    ALREADY_EXISTS = "already_exists"  # 409 ALREADY_EXISTS
    CONFLICT = "conflict"  # 409 "unable to queue the operation" (another op in flight)
    INVALID = "invalid"  # 400 INVALID_ARGUMENT / FAILED_PRECONDITION
    TRANSIENT = "transient"  # 5xx, timeouts, connection resets
    # A 2xx (or a redirect) whose body does not have the documented shape: an error envelope,
    # a proxy's page, JSON nested past reason. Never read as "nothing there"; not retried at
    # once (a server answering so tends to answer so again), the next tick asks again.
    MALFORMED = "malformed"
    # A create that finished but made something that cannot be used: a slice that never
    # became whole, a member the cloud recreated before the slice served. Not capacity's
    # pace (each try bills a whole slice until it is deleted): a doubling wait and, after a
    # few in a row, a notice (core/nodes/incarnations.py).
    DEFECTIVE = "defective"

    @property
    def retryable_soon(self) -> bool:
        """Errors that clear by themselves and deserve a short backoff."""
        return self in (
            ErrorKind.CAPACITY,
            ErrorKind.RATE_LIMITED,
            ErrorKind.CONFLICT,
            ErrorKind.TRANSIENT,
            ErrorKind.MALFORMED,
        )


# ---------------------------------------------------------------------------------------------
# Specs: what the user asked for.


@dataclass(frozen=True)
class WorkloadSpec:
    run: str
    repository: str | None = None
    ref: str | None = None
    setup: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # secret name -> name of the daemon's environment variable holding the value. Values are
    # read at launch time and never stored, logged or put in metadata.
    secrets: Mapping[str, str] = field(default_factory=dict)
    # local path -> remote path, uploaded to every worker before setup.
    files: Mapping[str, str] = field(default_factory=dict)
    restart: RestartPolicy = RestartPolicy.ON_FAILURE
    max_failures: int = 10
    hang_timeout: float | None = None  # seconds without log growth before a run counts as hung
    on_success: OnSuccess = OnSuccess.DELETE
    # The preemption notice (launch/sh/run.sh): the signal the workload gets at once, and how
    # long it may take to exit before the node is given up as preempted.
    stop_signal: str = "TERM"
    stop_grace: float = 25.0  # seconds
    # Bad hosts (core/workload/bad_hosts.py): the fleet's own pre-launch check on every worker,
    # run after the held-accelerator check (None: that check only), and how many nodes a slot
    # may recycle as bad hosts in a rolling day before it is held for a person.
    health_check: str | None = None
    health_check_timeout: float = 60.0  # seconds
    max_bad_hosts: int = 3
    # Host maintenance on the workload's terms (core/workload/maintenance.py): what to do about
    # an announced window, and how long before its start the workload gets its stop signal.
    on_maintenance: OnMaintenance = OnMaintenance.CHECKPOINT
    maintenance_lead: float = 300.0  # seconds


# WorkloadSpec fields younger than stored spec hashes: left out of a hash while at their
# defaults, so upgrading tpucared does not read as a change of every fleet's spec.
_NEWER_WORKLOAD_FIELDS = {
    "stop_signal": "TERM",
    "stop_grace": 25.0,
    "health_check": None,
    "health_check_timeout": 60.0,
    "max_bad_hosts": 3,
    "on_maintenance": OnMaintenance.CHECKPOINT,
    "maintenance_lead": 300.0,
}

# How long a direct multislice slot keeps its READY slices while it hunts for a missing one
# (they bill and hold quota idle), in seconds: DESIGN's `multislice_hold`, 30 min.
DEFAULT_MULTISLICE_HOLD = 1800.0


class DiskMode(StrEnum):
    READ_WRITE = "read-write"  # one node at a time
    READ_ONLY = "read-only"  # any number of nodes: pre-sharded datasets


@dataclass(frozen=True)
class DataDisk:
    source: str  # projects/P/zones/Z/disks/D
    mode: DiskMode = DiskMode.READ_WRITE


@dataclass(frozen=True)
class NodeOptions:
    """How a fleet's nodes are made beyond type, software and tier: the network, the VMs'
    identity, tags, the user's metadata, data disks, a reservation by name. Sent as written;
    part of the spec hash, so editing one is a recorded spec change, never a silent recreate."""

    network: str | None = None
    subnetwork: str | None = None
    service_account: str | None = None
    service_account_scopes: tuple[str, ...] = ()  # empty: cloud-platform
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)  # merged under ours
    data_disks: tuple[DataDisk, ...] = ()
    reservation: str | None = None  # queued provisioning with capacity "reserved"
    # What a preempted spot VM becomes where the cloud lets one choose (a `compute` fleet's
    # `on_preemption`: "stop" or "delete"); None: no choice (TPU API fleets, other tiers).
    on_preemption: str | None = None
    # A `compute` fleet's multi-host slice (issue 28): its `topology` ("2x2x4"), hosts by
    # core/model/machines.py `hosts_of`; None: one VM.
    topology: str | None = None
    # A flex-start `compute` fleet's `max_run_duration`, in seconds; None for other tiers.
    max_run_duration_s: int | None = None
    # A reserved `compute` fleet whose reservation is a calendar-mode (future) reservation:
    # its VMs are RESERVATION_BOUND (issue 39). True, or None for every other fleet.
    reservation_bound: bool | None = None


# NodeOptions fields younger than stored spec hashes: left out of a hash while None.
_NEWER_NODE_FIELDS = ("topology", "max_run_duration_s", "reservation_bound")


# The project of a fleet, a node or a list that lives in the daemon's own project
# (`gcp.project`): only adapters know which project that is, and stored records made before
# fleets could name a project say this too.
DEFAULT_PROJECT = ""


def location_name(project: str, zone: str) -> str:
    """How a person reads a (project, zone): the zone alone in the daemon's own project."""
    return zone if project == DEFAULT_PROJECT else f"{project}/{zone}"


# A fleet's cloud unless it names another: the key of the runtime's Cloud port for the Cloud
# TPU API (config/syntax.py names the clouds; the core decides on their abilities,
# core/model/abilities.py).
DEFAULT_API = "tpu"


@dataclass(frozen=True)
class FleetSpec:
    name: str
    zones: tuple[str, ...]
    # What the node is, in its cloud's words: for the TPU API the accelerator type; for
    # Compute Engine (`api` "compute") the machine type (core/model/machines.py).
    accelerator_type: str
    size: int
    # Cloud-specific shape the core passes to the fleet's cloud without reading it (the
    # config's keys for that cloud: what the node boots, ports/cloud.py `SOFTWARE_KEY`).
    extra: Mapping[str, str] = field(default_factory=dict)
    capacity: CapacityKind = CapacityKind.SPOT
    provisioning: Provisioning = Provisioning.DIRECT
    labels: Mapping[str, str] = field(default_factory=dict)
    workload: WorkloadSpec | None = None
    node: NodeOptions = field(default_factory=NodeOptions)
    project: str = DEFAULT_PROJECT  # another project than `gcp.project`, or DEFAULT_PROJECT
    # Multislice: a slot is `slices` slices of `accelerator_type` running one job.
    slices: int = 1
    multislice_hold: float = DEFAULT_MULTISLICE_HOLD  # seconds
    # Which cloud API keeps its nodes: the key of the runtime's map of Cloud ports
    # (tpucared/ports/cloud.py): "tpu" (the Cloud TPU API) or "compute" (Compute Engine).
    api: str = DEFAULT_API

    @property
    def hosts(self) -> int:
        """VMs of one slice: a multi-host `compute` fleet's topology's, else 1 (a TPU API
        pod's workers are one node's, as its accelerator type says)."""
        if self.node.topology is None:
            return 1
        return hosts_of(self.accelerator_type, self.node.topology) or 1

    @property
    def flex_start(self) -> bool:
        return self.capacity is CapacityKind.FLEX_START

    @property
    def multislice(self) -> bool:
        return self.slices > 1

    @property
    def nodes(self) -> int:
        """Nodes the fleet keeps at full size: every slice is a node (guard.max_nodes)."""
        return self.size * self.slices

    def slot_name(self, slot: int) -> str:
        """The slot's name: its node's id, or for multislice the prefix of its nodes' ids and
        its queued resource's id."""
        return f"{self.name}-{slot}"

    def node_name(self, slot: int, slice_index: int = 0) -> str:
        """Deterministic node id: a create for the same slot (and slice) is idempotent.
        `{fleet}-{slot}`, or `{fleet}-{slot}-{slice}` for multislice, which is also how a
        queued resource with `multisliceParams.nodeIdPrefix = {fleet}-{slot}` names them."""
        if not self.multislice:
            return self.slot_name(slot)
        return f"{self.slot_name(slot)}-{slice_index}"

    def spec_hash(self) -> str:
        """Stable digest of the spec, stored with the fleet so edits are visible."""
        fields = asdict(self)
        # The cloud's own keys beside the others, as they were hashed before they moved
        # into `extra` (issue 40): a spec's hash does not change with where a field lives.
        fields.update(fields.pop("extra"))
        if self.node == NodeOptions():
            del fields["node"]  # fleets from before node options keep their hash
        else:
            for name in _NEWER_NODE_FIELDS:  # ... and before multi-host and flex-start
                if fields["node"][name] is None:
                    del fields["node"][name]
        if self.project == DEFAULT_PROJECT:
            del fields["project"]  # ... and from before fleets named a project
        if self.slices == 1 and self.multislice_hold == DEFAULT_MULTISLICE_HOLD:
            del fields["slices"], fields["multislice_hold"]  # ... and before multislice
        if self.api == DEFAULT_API:
            del fields["api"]  # ... and before fleets named their cloud
        workload = fields.get("workload")
        for name, default in _NEWER_WORKLOAD_FIELDS.items():
            if workload is not None and workload.get(name) == default:
                del workload[name]
        blob = json.dumps(fields, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def error_text(kind: ErrorKind | None, message: str | None) -> str:
    """`kind: message`, naming the kind once (the client's messages already start with it)."""
    if kind is None:
        return message or "-"
    if not message:
        return kind.value
    return message if message.startswith(f"{kind.value}:") else f"{kind.value}: {message}"
