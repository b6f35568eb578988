"""Domain types shared by every layer of tpucared.

What the fleet should be (specs, built by `tpucared.config`), what the cloud shows
(observations, built by `tpucared.gcp.convert`), what we remember (records, returned by
`tpucared.store`) and the error kinds the planner decides on (set by `tpucared.gcp.errors`).
Plain frozen dataclasses and enums: no I/O, no ORM objects, safe to hand across layers.
All timestamps are timezone-aware UTC datetimes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum

# Labels every node we create carries (contract). A node without both is never touched.
FLEET_LABEL = "tpucared-fleet"
OWNER_LABEL = "tpucared-owner"


class CapacityKind(StrEnum):
    SPOT = "spot"
    PREEMPTIBLE = "preemptible"
    ON_DEMAND = "on-demand"
    RESERVED = "reserved"


class Provisioning(StrEnum):
    DIRECT = "direct"  # nodes.create
    QUEUED = "queued"  # queuedResources.create


class RestartPolicy(StrEnum):
    NEVER = "never"
    ON_FAILURE = "on-failure"
    ALWAYS = "always"


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

    @property
    def retryable_soon(self) -> bool:
        """Errors that clear by themselves and deserve a short backoff."""
        return self in (
            ErrorKind.CAPACITY,
            ErrorKind.RATE_LIMITED,
            ErrorKind.CONFLICT,
            ErrorKind.TRANSIENT,
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


@dataclass(frozen=True)
class FleetSpec:
    name: str
    zones: tuple[str, ...]
    accelerator_type: str
    runtime_version: str
    size: int
    capacity: CapacityKind = CapacityKind.SPOT
    provisioning: Provisioning = Provisioning.DIRECT
    labels: Mapping[str, str] = field(default_factory=dict)
    workload: WorkloadSpec | None = None

    def node_name(self, slot: int) -> str:
        """Deterministic node id: a create for the same slot is idempotent."""
        return f"{self.name}-{slot}"

    def spec_hash(self) -> str:
        """Stable digest of the spec, stored with the fleet so edits are visible."""
        blob = json.dumps(asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Observations: what the cloud shows, converted from API JSON by the gcp layer.


class CloudState(StrEnum):
    """Node.State of the TPU v2 API, by name."""

    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    CREATING = "CREATING"
    READY = "READY"
    RESTARTING = "RESTARTING"
    REIMAGING = "REIMAGING"
    DELETING = "DELETING"
    REPAIRING = "REPAIRING"
    STOPPED = "STOPPED"
    STOPPING = "STOPPING"
    STARTING = "STARTING"
    PREEMPTED = "PREEMPTED"
    TERMINATED = "TERMINATED"
    HIDING = "HIDING"
    HIDDEN = "HIDDEN"
    UNHIDING = "UNHIDING"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class WorkerEndpoint:
    index: int
    internal_ip: str
    external_ip: str | None = None


@dataclass(frozen=True)
class ObservedNode:
    name: str  # the short node id, e.g. "sweep-3"
    zone: str
    state: CloudState
    accelerator_type: str
    labels: Mapping[str, str] = field(default_factory=dict)
    health: str | None = None  # Node.Health by name, None when absent
    cloud_id: str | None = None  # Node.id (int64 as string)
    create_time: datetime | None = None
    runtime_version: str | None = None
    endpoints: tuple[WorkerEndpoint, ...] = ()
    queued_resource: str | None = None

    @property
    def fleet(self) -> str | None:
        return self.labels.get(FLEET_LABEL)

    @property
    def owner(self) -> str | None:
        return self.labels.get(OWNER_LABEL)

    def owned_by(self, owner: str) -> bool:
        return self.owner == owner and self.fleet is not None


class QueuedState(StrEnum):
    """QueuedResourceState.State of the TPU v2 API, by name."""

    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    CREATING = "CREATING"
    ACCEPTED = "ACCEPTED"
    PROVISIONING = "PROVISIONING"
    FAILED = "FAILED"  # stays until deleted and keeps holding quota
    DELETING = "DELETING"
    ACTIVE = "ACTIVE"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"  # its nodes were deleted (e.g. spot preemption); holds quota
    WAITING_FOR_RESOURCES = "WAITING_FOR_RESOURCES"


@dataclass(frozen=True)
class ObservedQueuedResource:
    """One queued resource from queuedResources.list. A queued resource has no labels of its
    own: `labels` are those of its node spec, which is where our ownership labels go."""

    name: str  # the short queued resource id; ours always equals the node id, e.g. "sweep-3"
    zone: str
    state: QueuedState
    labels: Mapping[str, str] = field(default_factory=dict)
    node_names: tuple[str, ...] = ()  # node ids of its node spec
    create_time: datetime | None = None
    error: ErrorKind | None = None  # classified failedData.error when state is FAILED
    error_message: str | None = None

    @property
    def fleet(self) -> str | None:
        return self.labels.get(FLEET_LABEL)

    @property
    def owner(self) -> str | None:
        return self.labels.get(OWNER_LABEL)

    def owned_by(self, owner: str) -> bool:
        return self.owner == owner and self.fleet is not None


@dataclass(frozen=True)
class ZoneObservation:
    """One paginated nodes.list of a (project, zone). When the list failed, `nodes` is empty
    and `error` is set: the planner must then not conclude that nodes of this zone vanished.

    `queued_resources` is the paginated queuedResources.list of the same zone, or None when
    it was not listed (the runtime lists it only in zones where a fleet provisions through
    queued resources or a live incarnation has one). A failure of that list sets `error` too:
    the whole zone is then unknown for the tick."""

    zone: str
    observed_at: datetime
    nodes: tuple[ObservedNode, ...] = ()
    error: ErrorKind | None = None
    error_message: str | None = None
    queued_resources: tuple[ObservedQueuedResource, ...] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


# ---------------------------------------------------------------------------------------------
# Records: what the store remembers. The store returns these, never ORM objects.


class NodePhase(StrEnum):
    """Our lifecycle of one node incarnation. Allowed edges live in core/lifecycle.py."""

    REQUESTED = "requested"  # intent recorded, create call not yet confirmed by the API
    CREATING = "creating"  # create accepted; waiting for the node to become READY
    READY = "ready"  # READY in the cloud; usable
    DEAD = "dead"  # preempted / terminated / vanished / unhealthy / stuck: must be deleted
    DELETING = "deleting"  # delete requested; waiting for it to disappear
    DELETED = "deleted"  # gone from the cloud (terminal)
    FAILED = "failed"  # create never produced a node, e.g. no capacity (terminal)


class AttemptOutcome(StrEnum):
    SUCCEEDED = "succeeded"  # exit 0 on every worker
    FAILED = "failed"  # non-zero exit while the node was healthy
    PREEMPTED = "preempted"  # the node died under it
    HUNG = "hung"  # log stopped growing for hang_timeout
    CANCELLED = "cancelled"  # stopped by us (scale-down, down, spec change)


@dataclass(frozen=True)
class FleetRecord:
    name: str
    spec_hash: str
    spec_json: str
    applied_at: datetime
    down: bool = False  # `tpucared down` ran: keep no nodes for this fleet


@dataclass(frozen=True)
class SlotRecord:
    fleet: str
    index: int
    run_id: str  # stable across recreations: checkpoint paths, experiment names
    attempts: int = 0  # workload launches so far (TPUCARED_ATTEMPT of the last one)
    preemptions: int = 0
    failures: int = 0
    create_failures: int = 0  # consecutive failed creates; reset by a successful create
    next_create_at: datetime | None = None  # create backoff: not before this instant
    last_error: str | None = None
    done: bool = False  # workload finished for good; no node wanted any more
    # The zone the next create tries; the planner advances it past a zone on a capacity
    # error and keeps it on a zone that worked. None: the fleet's first zone.
    next_zone: str | None = None


@dataclass(frozen=True)
class IncarnationRecord:
    id: int
    fleet: str
    slot: int
    node_name: str
    zone: str
    accelerator_type: str
    phase: NodePhase
    phase_since: datetime
    requested_at: datetime
    cloud_id: str | None = None
    create_time: datetime | None = None
    operation: str | None = None  # name of the create/delete operation in flight
    queued_resource: str | None = None
    ready_at: datetime | None = None
    dead_at: datetime | None = None
    deleted_at: datetime | None = None
    end_reason: str | None = None  # why it ended: preempted, terminated, vanished, stuck, ...
    cloud_state: str | None = None  # last observed Node.state (see core/cloud.py for the
    # pseudo states "ABSENT" and "QUEUED:<state>")
    health: str | None = None  # last observed Node.health
    # Facts the planner needs to time things (all written as the planner's actions say):
    cloud_state_since: datetime | None = None  # when cloud_state took its current value
    unhealthy_since: datetime | None = None  # start of the current unhealthy health streak
    # Outcome of the last create/delete call or operation on this incarnation, recorded by
    # the executor and decided on by the planner at the next tick (see core/actions.py).
    error: ErrorKind | None = None
    delete_calls: int = 0  # delete calls issued so far (bounded retries of a stuck delete)
    last_delete_at: datetime | None = None


@dataclass(frozen=True)
class WorkerRecord:
    incarnation_id: int
    index: int
    internal_ip: str
    external_ip: str | None = None
    host_keys: tuple[str, ...] = ()  # pinned for this incarnation only ("ssh-ed25519 AAAA...")


@dataclass(frozen=True)
class WorkloadAttemptRecord:
    id: int
    fleet: str
    slot: int
    incarnation_id: int
    number: int  # TPUCARED_ATTEMPT
    started_at: datetime
    ended_at: datetime | None = None
    outcome: AttemptOutcome | None = None  # None while running
    exit_codes: Mapping[int, int | None] = field(default_factory=dict)  # worker -> code
    detail: str | None = None


@dataclass(frozen=True)
class CreateAttemptRecord:
    """One nodes.create (or queuedResources.create): our only view of capacity."""

    fleet: str
    slot: int
    zone: str
    accelerator_type: str
    started_at: datetime
    outcome: str  # "ok" or an ErrorKind value
    latency_s: float | None = None
    message: str | None = None
    incarnation_id: int | None = None


@dataclass(frozen=True)
class EventRecord:
    id: int
    at: datetime
    kind: str
    message: str
    fleet: str | None = None
    slot: int | None = None
    node: str | None = None
    details: Mapping[str, object] = field(default_factory=dict)
