"""The actions a plan consists of, and the contract the executor honours for each.

The planner (core/planning/planner.py) returns these; the runtime's executor carries them out in
plan order, each on its own, and records what happened. Every action is idempotent and safe to
re-run after a crash, because the executor records intent BEFORE the one cloud call an action
may make, every write is a compare-and-set on the phase the planner saw (a stale action is
skipped, never forced), node names are deterministic (a repeated create gets ALREADY_EXISTS,
never a twin), and a delete that finds NOT_FOUND has succeeded.

Division of labour: the executor never decides. It records call outcomes as facts (an
operation name, or a classified `ErrorKind` in `IncarnationRecord.error`); the planner turns
facts into decisions at the next tick (about `poll_interval` later). The executor writes a
phase itself in exactly three places: CreateNode's intent (insert REQUESTED), an accepted
create (REQUESTED -> CREATING) and DeleteNode's intent (phase -> DELETING). Every phase write
goes through `lifecycle.check_transition`, and every action appends an EventRecord carrying
its reason.

Invariants the store and executor keep (the planner relies on them):
- at most one incarnation per (fleet, slot, slice) in a LIVE phase (lifecycle.LIVE_PHASES);
- every phase write is a compare-and-set on the phase the planner saw, through
  lifecycle.check_transition; a write that loses the race is skipped, with a log line;
- intent is recorded before the cloud call, outcomes after it; nothing else is written.
And the planner's side: it never creates, deletes or adopts a resource that a successful
list shows without both of our labels (`tpucared-owner` = owner, `tpucared-fleet` = fleet).

Per action (T = the action's writes, all or nothing: one transaction for CreateNode and
DeleteNode intents, committed before their call; the record-only actions may share one
transaction in runs, each action in a savepoint, so a skipped one is undone alone):

OpenSlot    T: insert SlotRecord(fleet, slot, run_id=<new, e.g. "{fleet}-{slot}-{6 hex}">) if
            the slot has none; otherwise nothing. No cloud call.
RecordFleet T: upsert FleetRecord(name, spec_hash, spec_json, applied_at=now); keep `down`.
CreateNode  T1 (intent): skip the action if (fleet, slot, slice) has an incarnation in a LIVE
            phase;
            else insert IncarnationRecord(phase=REQUESTED, requested_at=phase_since=now,
            zone, node_name, accelerator_type, queued_resource).
            Call: nodes.create(nodeId=node_name) or, when `queued_resource` is set,
            queuedResources.create(queuedResourceId=queued_resource, node_id=node_name),
            with `labels` (ours included), the scheduling tier of `capacity`, and the ssh key.
            T2 (outcome): accepted -> REQUESTED->CREATING with `operation` = its name;
            error -> `error` = its ErrorKind (ALREADY_EXISTS included), phase stays REQUESTED,
            SlotRecord.last_error = message. Write a CreateAttemptRecord once the create's
            fate is known (this error, or the end of its operation).
DeleteNode  T1 (intent): CAS phase == expected; if expected != DELETING, move to DELETING
            (end_reason if given; dead_at=now if it was not dead yet); loss_cause = cause
            if given; delete_calls += 1, last_delete_at = now, error = None.
            Call: queuedResources.delete(queued_resource, force=true) when `queued_resource`
            is set (it deletes the node first), else nodes.delete(node_name) in `zone`.
            T2: accepted -> `operation` = its name; any error (NOT_FOUND included) ->
            `error` = its ErrorKind. The phase stays DELETING.
Transition  T: CAS (id, phase == expected); check_transition(expected, new); set phase,
            phase_since=now; ready_at/dead_at/deleted_at = now on entering READY/DEAD/DELETED;
            end_reason and loss_cause (`cause`) if given; error = None (the planner has
            decided on it); operation = None
            on entering a terminal phase; the `cloud` facts if given (WorkerRecords replaced
            by `cloud.endpoints` if not None); `slot_update` applied to the slot row.
RecordCloud T: CAS (id, phase == expected); overwrite the cloud facts (and WorkerRecords when
            `endpoints` is not None). No phase change. No cloud call.
HoldSlices  T: SlotRecord.held_since = since. No cloud call.
Adopt       T: skip if the slot's slice has an incarnation in a LIVE phase; open the slot as
            OpenSlot does if it has no record (a node beyond the fleet's size, or of a
            fleet marked down: adopted only to be deleted); insert REQUESTED
            (requested_at=now) and transition at once to `phase` (a legal edge from
            REQUESTED), with the cloud facts (and WorkerRecords from `cloud.endpoints`),
            queued_resource and end_reason. No cloud call.
Notice      Append EventRecord(kind="notice", severity, message=reason); log it at its
            severity. Afterwards the runtime remembers `plan.standing` as the reported set
            and passes it to the next plan() as `reported`, so each condition is told once.

Outside the actions, the observe step records operation outcomes: for each live incarnation
with `operation` set, GET it; when done: `operation` = None and, if it failed, `error` = its
ErrorKind (and SlotRecord.last_error = its message for a create).

How the planner reacts to `error` at the next tick (see core/nodes/incarnations.py):
  create (REQUESTED or CREATING)
    CAPACITY                         FAILED; next zone at once, capacity backoff once every
                                     zone failed in a row
    RATE_LIMITED, CONFLICT, TRANSIENT  FAILED; same zone, transient backoff (a TRANSIENT
                                     create may have gone through: if the node shows up with
                                     our labels it is adopted)
    QUOTA, PERMISSION, INVALID, NOT_FOUND  FAILED; same zone, error backoff (10-30 min) and a
                                     notice for a person
    ALREADY_EXISTS                   our labels: adopt it; not ours: FAILED, error backoff,
                                     notice; not listed: FAILED, transient backoff
  delete (DELETING)
    NOT_FOUND                        DELETED
    QUOTA, PERMISSION, INVALID       delete again after the error backoff
    anything else                    delete again after the transient backoff
    (a notice once delete_calls reaches Policy.max_delete_calls)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from enum import Enum, StrEnum
from typing import Any, ClassVar

from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import MaintenanceWindow, WorkerEndpoint
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import DEFAULT_API, DEFAULT_PROJECT, CapacityKind, Provisioning


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"  # needs a look soon
    ERROR = "error"  # tpucared cannot do its job until a person acts


@dataclass(frozen=True, kw_only=True)
class CloudFacts:
    """What the planner wants remembered about an incarnation's cloud resource. The executor
    overwrites the record's fields with these values as they are (absolute, not deltas)."""

    cloud_state: str | None  # a Node.State name or a pseudo state of core/nodes/cloud.py
    cloud_state_since: datetime | None
    health: str | None
    unhealthy_since: datetime | None
    cloud_id: str | None
    create_time: datetime | None
    endpoints: tuple[WorkerEndpoint, ...] | None = None  # None: leave WorkerRecords alone
    run_ends_at: datetime | None = None  # a flex-start node's planned end (ObservedNode's)
    maintenance: MaintenanceWindow | None = None  # its next maintenance window (ObservedNode's)


@dataclass(frozen=True, kw_only=True)
class SlotUpdate:
    """Slot bookkeeping that travels with a Transition (same transaction). The create_* and
    zone fields are absolute values; `add_preemptions` is added to the counter."""

    fleet: str
    slot: int
    create_failures: int
    next_create_at: datetime | None
    next_zone: str | None
    last_error: str | None
    add_preemptions: int = 0


@dataclass(frozen=True, kw_only=True)
class Loss:
    """A serving node lost (a dead state, or gone from the lists) where the cloud's node
    state does not say whether it was preempted (Compute Engine): the runtime reads the
    cloud's preemption records of its location once, before the plan, and
    core/nodes/preemption.py `worded` words the Transition's end by them. `how`: what the
    lists showed ("vanished", "terminated", ...); `spot`: its fleet asks for spot capacity."""

    api: str
    project: str
    zone: str
    node_name: str
    cloud_id: str | None
    how: str
    spot: bool


@dataclass(frozen=True, kw_only=True)
class Action:
    kind: ClassVar[str] = "action"
    reason: str  # for people: why the planner wants this, recorded with the event

    @property
    def log_event(self) -> str:
        """The action's stable log event name (docs/daemon.md, "Log events"): `action.create`,
        `action.delete`, `action.hold_slices`, ..."""
        return f"action.{self.kind.replace('-', '_')}"

    def subject(self) -> str:
        """What the action is about, e.g. a node name, for one-line rendering."""
        return ""

    def summary(self) -> str:
        """The action without its reason, for one-line rendering."""
        return self.subject()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.kind}
        for f in fields(self):
            out[f.name] = _jsonable(getattr(self, f.name))
        return out


@dataclass(frozen=True, kw_only=True)
class OpenSlot(Action):
    kind: ClassVar[str] = "open-slot"
    fleet: str
    slot: int

    def subject(self) -> str:
        return f"{self.fleet}/{self.slot}"


@dataclass(frozen=True, kw_only=True)
class RecordFleet(Action):
    kind: ClassVar[str] = "record-fleet"
    fleet: str
    spec_hash: str
    spec_json: str

    def subject(self) -> str:
        return self.fleet

    def summary(self) -> str:
        return f"{self.fleet} spec {self.spec_hash}"


@dataclass(frozen=True, kw_only=True)
class CreateNode(Action):
    kind: ClassVar[str] = "create"
    fleet: str
    slot: int
    node_name: str
    zone: str
    accelerator_type: str
    # Cloud-specific shape, passed to the fleet's cloud unread (`FleetSpec.extra`).
    extra: Mapping[str, str]
    capacity: CapacityKind
    provisioning: Provisioning
    labels: Mapping[str, str]  # the fleet's labels plus tpucared-fleet and tpucared-owner
    queued_resource: str | None  # set for queued provisioning: the queued resource id
    attempt: int  # 1 + consecutive failed creates of this slot
    project: str = DEFAULT_PROJECT
    slice: int = 0  # which slice of a multislice slot
    # Nodes the queued resource makes (multisliceParams.nodeCount, named
    # `{queued_resource}-{i}`) when more than one; the other slices are adopted as they appear.
    slices: int = 1
    api: str = DEFAULT_API  # the fleet's cloud API, recorded with the incarnation

    def subject(self) -> str:
        return self.node_name

    def to_dict(self) -> dict[str, Any]:
        """As every action's, the cloud-specific shape's keys beside the others."""
        out = super().to_dict()
        out.update(out.pop("extra"))
        return out

    def summary(self) -> str:
        how = "queued " if self.queued_resource else ""
        return (
            f"{self.node_name} in {self.zone} ({how}{self.capacity.value} "
            f"{self.accelerator_type}, attempt {self.attempt})"
        )


@dataclass(frozen=True, kw_only=True)
class DeleteNode(Action):
    kind: ClassVar[str] = "delete"
    incarnation_id: int
    fleet: str
    slot: int
    node_name: str
    zone: str
    expected: NodePhase  # the phase the planner saw; the executor's CAS
    queued_resource: str | None  # set: delete the queued resource (force) instead of the node
    end_reason: str | None = None  # recorded when the incarnation enters DELETING
    project: str = DEFAULT_PROJECT
    # Why the node is lost (core/model/causes.py), recorded as nodes.loss_cause; None for a
    # delete of our own choosing (scale-down, down, spec change) or of a loss already recorded.
    cause: LossCause | None = None

    @classmethod
    def of(
        cls,
        inc: IncarnationRecord,
        expected: NodePhase,
        *,
        reason: str,
        end_reason: str | None = None,
        cause: LossCause | None = None,
    ) -> DeleteNode:
        """The delete of `inc`'s node (its queued resource, if it has one), seen in
        `expected`."""
        return cls(
            incarnation_id=inc.id,
            fleet=inc.fleet,
            slot=inc.slot,
            node_name=inc.node_name,
            zone=inc.zone,
            expected=expected,
            queued_resource=inc.queued_resource,
            end_reason=end_reason,
            reason=reason,
            project=inc.project,
            cause=cause,
        )

    def subject(self) -> str:
        return self.node_name

    def summary(self) -> str:
        what = f"queued resource {self.queued_resource}" if self.queued_resource else "node"
        return (
            f"{self.node_name} [#{self.incarnation_id} {self.expected.value}] {what} in {self.zone}"
            + _cause(self.cause)
        )


@dataclass(frozen=True, kw_only=True)
class Transition(Action):
    kind: ClassVar[str] = "transition"
    incarnation_id: int
    node_name: str
    expected: NodePhase
    new: NodePhase
    end_reason: str | None = None  # preempted, terminated, vanished, stuck, unhealthy, ...
    cloud: CloudFacts | None = None
    slot_update: SlotUpdate | None = None
    # Why the node is lost (core/model/causes.py), recorded as nodes.loss_cause; None for a
    # move that loses nothing, or ends the node by our own choice.
    cause: LossCause | None = None
    # When the cloud itself lost the node, where its records say (core/nodes/preemption.py);
    # recorded as nodes.cloud_lost_at, where the ledger starts the loss. None: unknown.
    lost_at: datetime | None = None

    def subject(self) -> str:
        return self.node_name

    def summary(self) -> str:
        return (
            f"{self.node_name} [#{self.incarnation_id}] {self.expected.value} -> {self.new.value}"
            + _cause(self.cause)
        )


@dataclass(frozen=True, kw_only=True)
class RecordCloud(Action):
    kind: ClassVar[str] = "record"
    incarnation_id: int
    node_name: str
    expected: NodePhase
    cloud: CloudFacts

    def subject(self) -> str:
        return self.node_name

    def summary(self) -> str:
        state = self.cloud.cloud_state or "?"
        health = f"/{self.cloud.health}" if self.cloud.health else ""
        return f"{self.node_name} [#{self.incarnation_id}] cloud {state}{health}"


@dataclass(frozen=True, kw_only=True)
class Adopt(Action):
    kind: ClassVar[str] = "adopt"
    fleet: str
    slot: int
    node_name: str
    zone: str
    accelerator_type: str
    phase: NodePhase  # REQUESTED -> phase must be legal
    queued_resource: str | None
    cloud: CloudFacts
    end_reason: str | None = None
    project: str = DEFAULT_PROJECT
    slice: int = 0
    api: str = DEFAULT_API  # the cloud API that listed it: its fleet's

    def subject(self) -> str:
        return self.node_name

    def summary(self) -> str:
        return f"{self.node_name} in {self.zone} as {self.phase.value}"


@dataclass(frozen=True, kw_only=True)
class HoldSlices(Action):
    """A direct multislice slot starts (`since`) or stops (None) keeping READY slices while
    another is missing (core/nodes/multislice.py): SlotRecord.held_since."""

    kind: ClassVar[str] = "hold-slices"
    fleet: str
    slot: int
    since: datetime | None

    def subject(self) -> str:
        return f"{self.fleet}/{self.slot}"

    def summary(self) -> str:
        if self.since is None:
            return f"{self.subject()} no longer held"
        return f"{self.subject()} held since {self.since.isoformat(timespec='seconds')}"


@dataclass(frozen=True, kw_only=True)
class Notice(Action):
    """Something a person should see. `reason` is the message. `key` names the condition:
    the planner emits a notice only while its key is not in plan()'s `reported`."""

    kind: ClassVar[str] = "notice"
    key: str
    severity: Severity
    fleet: str | None = None
    node: str | None = None

    def subject(self) -> str:
        return self.node or self.fleet or ""

    def summary(self) -> str:
        return f"{self.severity.value}: {self.subject()}".rstrip(": ")


# Actions that make a cloud call (everything else only writes records).
CLOUD_ACTIONS: tuple[type[Action], ...] = (CreateNode, DeleteNode)

ALL_ACTIONS: tuple[type[Action], ...] = (
    OpenSlot,
    RecordFleet,
    CreateNode,
    DeleteNode,
    Transition,
    RecordCloud,
    Adopt,
    HoldSlices,
    Notice,
)


def _cause(cause: LossCause | None) -> str:
    """A summary's tail naming the loss's cause: ` (cause preempted)`; empty without one."""
    return "" if cause is None else f" (cause {cause.value})"


def _jsonable(value: object) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, CloudFacts | SlotUpdate | WorkerEndpoint | Loss):
        return {f.name: _jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in sorted(value.items())}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


__all__ = [
    "ALL_ACTIONS",
    "CLOUD_ACTIONS",
    "Action",
    "Adopt",
    "CloudFacts",
    "CreateNode",
    "DeleteNode",
    "HoldSlices",
    "Loss",
    "Notice",
    "OpenSlot",
    "RecordCloud",
    "RecordFleet",
    "Severity",
    "SlotUpdate",
    "Transition",
]
