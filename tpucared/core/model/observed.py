"""What the cloud shows: nodes and queued resources as each cloud's adapter converts them
(behind the Cloud port, tpucared/ports/cloud.py), with `StateClass`, what a state means."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from tpucared.core.model.abilities import NO_ABILITIES, CloudAbilities
from tpucared.core.model.causes import LossCause
from tpucared.core.model.specs import (
    DEFAULT_API,
    DEFAULT_PROJECT,
    FLEET_LABEL,
    OWNER_LABEL,
    ErrorKind,
)

# ---------------------------------------------------------------------------------------------
# Observations: what the cloud shows, converted from API JSON by the cloud's adapter.


class StateClass(StrEnum):
    """What a node's state means to the planner, whatever the cloud calls it.

    Each cloud adapter sorts its own states into these in one table (the TPU API's:
    tpucared/gcp/tpu/states.py) and keeps its own name in `ObservedNode.state`, which is what
    `IncarnationRecord.cloud_state` stores and the timers compare."""

    # Up and serving: the workload may run on it (TPU READY).
    USABLE = "usable"
    # Will not come back by itself and still holds its name and quota: deleted at once
    # (TPU PREEMPTED, TERMINATED, STOPPED: tpucared never stops nodes).
    DEAD = "dead"
    # Going away: someone (we, or someone else) deletes it (TPU DELETING).
    DELETING = "deleting"
    # Being made: a pending create's node follows it; its stuck timer starts at the create
    # (TPU CREATING).
    CREATING = "creating"
    # Passing through a state it should leave by itself (maintenance, a blip, the cloud not
    # knowing for now): timed by the state's stuck rule, dead once that expires.
    TRANSIENT = "transient"
    # Waiting for capacity the cloud has promised to find (a flex-start VM): timed by its
    # stuck rule like a transient state, which may be "never".
    WAITING = "waiting"
    # A state the adapter cannot read (a new enum value, a number it does not know): the
    # node is never acted on while it shows one, and a person is told (`raw_state`).
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class WorkerEndpoint:
    index: int
    internal_ip: str
    external_ip: str | None = None


@dataclass(frozen=True)
class NodeMade:
    """What a listed node says it was made with, of what a fleet's `NodeOptions` can ask."""

    network: str | None = None
    subnetwork: str | None = None
    service_account: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class MaintenanceWindow:
    """A node's next host-maintenance window, as the cloud announces it (TPU API
    `Node.upcomingMaintenance`, Compute Engine `Instance.resourceStatus.upcomingMaintenance`).
    `start`/`end` are None when the cloud does not say; `type` (SCHEDULED, UNSCHEDULED, ...)
    and `status` (PENDING, ONGOING) are the cloud's own names, kept as sent."""

    start: datetime | None = None
    end: datetime | None = None
    type: str | None = None
    status: str | None = None
    can_reschedule: bool | None = None


@dataclass(frozen=True)
class ObservedNode:
    name: str  # the short node id, e.g. "sweep-3"
    zone: str
    state: str  # the cloud's own name for it (TPU: Node.State), as stored in cloud_state
    state_class: StateClass  # what it means to the planner (the adapter's table)
    accelerator_type: str
    labels: Mapping[str, str] = field(default_factory=dict)
    health: str | None = None  # Node.Health by name, None when absent
    cloud_id: str | None = None  # Node.id (int64 as string)
    create_time: datetime | None = None
    # Cloud-specific facts the core does not read (the TPU API's runtime version).
    extra: Mapping[str, str] = field(default_factory=dict)
    endpoints: tuple[WorkerEndpoint, ...] = ()
    queued_resource: str | None = None
    raw_state: str | None = None  # what the API sent, when the state is UNREADABLE
    made: NodeMade | None = None  # how it was made, for the spec-drift notice
    # The [policy.timeouts] rule (core/vocab/stuck.py) that times a CREATING, TRANSIENT or
    # WAITING state; None: the planner's default for where it stands.
    stuck_rule: str | None = None
    # When the cloud ends the node's run by itself (a flex-start VM's `maxRunDuration`): its
    # loss near then is the run's end, neither a preemption nor a failure. None: no such end.
    run_ends_at: datetime | None = None
    # Why what the cloud made cannot be used, for a DEAD node that is not a loss of capacity
    # (a slice that never became whole, a member the cloud recreated): before READY such a
    # node is a DEFECTIVE create (its own backoff), not a stockout. None: a plain DEAD state.
    defect: str | None = None
    # The next host-maintenance window the cloud announces for it; None: none announced.
    maintenance: MaintenanceWindow | None = None
    # Why it was lost, where its own state says (TPU PREEMPTED: preempted; the adapter's
    # table); None: the state does not say (core/nodes/losses.py).
    lost_to: LossCause | None = None

    @property
    def fleet(self) -> str | None:
        return self.labels.get(FLEET_LABEL)

    @property
    def owner(self) -> str | None:
        return self.labels.get(OWNER_LABEL)

    def owned_by(self, owner: str) -> bool:
        return self.owner == owner and self.fleet is not None


class QueuedPhase(StrEnum):
    """Where a queued slot stands, whatever its cloud calls the state (the TPU API's
    QueuedResourceState: the adapter's table, tpucared/gcp/tpu/states.py `QUEUED_PHASES`)."""

    WAITING = "waiting"  # accepted, waiting for capacity: no node yet
    PROVISIONING = "provisioning"  # capacity found, its nodes are being made
    ACTIVE = "active"  # holding its nodes
    # Finished without usable nodes (failed, or its nodes taken back): it keeps holding
    # quota and its name until it is deleted.
    DEAD = "dead"
    DELETING = "deleting"  # going away


@dataclass(frozen=True)
class ObservedQueuedResource:
    """One queued resource from queuedResources.list. A queued resource has no labels of its
    own: `labels` are those of its node spec, which is where our ownership labels go."""

    name: str  # the short queued resource id; ours always equals the node id, e.g. "sweep-3"
    zone: str
    # The cloud's own name for its state, as `IncarnationRecord.cloud_state` stores it
    # ("QUEUED:<state>", core/nodes/cloud.py), and what it means to the planner.
    state: str
    phase: QueuedPhase
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
    project: str = DEFAULT_PROJECT  # the project listed (DEFAULT_PROJECT: gcp.project)
    # The cloud API that listed it (`FleetSpec.api`): one location may be listed by several.
    api: str = DEFAULT_API
    # What that API's cloud can do, as its adapter states it (core/model/abilities.py),
    # stamped by the runtime's observer on each of its lists.
    abilities: CloudAbilities = NO_ABILITIES
    # The cloud's records of the nodes lost here (`LossRecords`), read in the same tick when a
    # serving node of a cloud whose states do not say "preempted" is dead or gone from this
    # list (core/nodes/preemption.py `suspects`); None: not read.
    loss_records: LossRecords | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class RecordKind(StrEnum):
    """What a cloud's record of a lost node says happened to it."""

    PREEMPTED = "preempted"  # Compute Engine: a compute.instances.preempted operation
    # Compute Engine: compute.instances.hostMaintenance / terminateOnHostMaintenance
    HOST_MAINTENANCE = "host_maintenance"


@dataclass(frozen=True)
class PreemptionRecord:
    """A cloud's own record that it preempted a node, or stopped it for host maintenance,
    where the node's state does not say so (Compute Engine: a `compute.instances.preempted`
    or host-maintenance zone operation; a TPU API node says PREEMPTED itself). Read only when
    a node was lost (core/nodes/preemption.py)."""

    name: str  # the node it names (the record's target)
    at: datetime | None  # when the cloud preempted it
    # Which node of that name, when the record says (a name is reused by every incarnation
    # of a slot): the cloud's id of the node, as `ObservedNode.cloud_id`.
    cloud_id: str | None = None
    record: str = ""  # the record's own name, for people (an operation's name)
    kind: RecordKind = RecordKind.PREEMPTED


@dataclass(frozen=True)
class LossRecords:
    """The records read for one location's lost nodes (`ZoneObservation.loss_records`): every
    one that names one of them; `error` when they could not be read (nothing is known then)."""

    records: tuple[PreemptionRecord, ...] = ()
    error: str | None = None
