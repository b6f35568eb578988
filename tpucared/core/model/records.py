"""What the store remembers: fleets, slots, incarnations, attempts, events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import MaintenanceWindow
from tpucared.core.model.specs import DEFAULT_API, DEFAULT_PROJECT, ErrorKind, error_text

# ---------------------------------------------------------------------------------------------
# Records: what the store remembers. The store returns these, never ORM objects.


class NodePhase(StrEnum):
    """Our lifecycle of one node incarnation. Allowed edges live in core/model/lifecycle.py."""

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
    # Multislice: since when some of the slot's slices are READY while another is missing
    # (core/nodes/multislice.py releases them after the fleet's multislice_hold). None: not
    # held.
    held_since: datetime | None = None


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
    cloud_state: str | None = None  # last observed `ObservedNode.state` (core/nodes/cloud.py:
    # the pseudo states "ABSENT" and "QUEUED:<state>")
    health: str | None = None  # last observed Node.health
    # Facts the planner needs to time things (all written as the planner's actions say):
    cloud_state_since: datetime | None = None  # when cloud_state took its current value
    unhealthy_since: datetime | None = None  # start of the current unhealthy health streak
    # Outcome of the last create/delete call or operation on this incarnation, recorded by
    # the executor and decided on by the planner at the next tick (see core/vocab/actions.py).
    error: ErrorKind | None = None
    delete_calls: int = 0  # delete calls issued so far (bounded retries of a stuck delete)
    last_delete_at: datetime | None = None
    project: str = DEFAULT_PROJECT  # where the node lives, set when it is created or adopted
    slice: int = 0  # which slice of a multislice slot (0 for a single-slice slot)
    # The cloud API that made or adopted it (`FleetSpec.api`): the one that lists, polls and
    # deletes it, even once its fleet is gone from the config.
    api: str = DEFAULT_API
    # A flex-start node's planned end (`ObservedNode.run_ends_at`, migration 0009): its loss
    # near then is the run's end (core/nodes/flex.py), not a preemption. None: no such end.
    run_ends_at: datetime | None = None
    # Its next host-maintenance window as last listed (`ObservedNode.maintenance`, migration
    # 0011); None: none announced.
    maintenance: MaintenanceWindow | None = None
    # Why it was lost (core/model/causes.py, migration 0012); None: not lost (yet).
    loss_cause: LossCause | None = None
    # When the cloud itself lost it, where the cloud says (a Compute Engine preemption or
    # host-maintenance record's time, migration 0016); `dead_at` is when the daemon noticed.
    # None: not lost, or the cloud gave no time (a TPU API node's PREEMPTED state).
    cloud_lost_at: datetime | None = None
    # What the fleet's `on_maintenance` did about a window (core/workload/maintenance.py,
    # migration 0013): the window start it acted on, when the workload got its stop signal,
    # when the cloud was asked to start the maintenance now. None: nothing (yet).
    maintenance_handled_for: datetime | None = None
    maintenance_checkpoint_at: datetime | None = None
    maintenance_started_at: datetime | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        """(fleet, slot, slice): at most one live incarnation each (core/vocab/snapshot)."""
        return (self.fleet, self.slot, self.slice)


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
    # What the workload told in its progress file (TPUCARED_PROGRESS_FILE, worker 0's;
    # migration 0014): when its first step came, its last step and checkpoint and when.
    # None: it told nothing (yet).
    first_step_at: datetime | None = None
    last_step: int | None = None
    last_step_at: datetime | None = None
    last_checkpoint: int | None = None
    last_checkpoint_at: datetime | None = None


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


@dataclass(frozen=True)
class ZoneHealth:
    """Whether the daemon could list a (project, zone) (table `zone_health`). `failures`:
    consecutive ticks whose list failed, 0 once one succeeds; `error_kind`/`error_message`
    and `failing_since` describe the current run of failures (None when `failures` is 0);
    `unreachable`: `zone.unreachable` was told and `zone.reachable` not yet; `next_list_at`:
    while failing, when the zone is listed again (its backoff, core/planning/zone_health.py)."""

    project: str
    zone: str
    failures: int = 0
    error_kind: ErrorKind | None = None
    error_message: str | None = None
    failing_since: datetime | None = None
    last_ok_at: datetime | None = None
    unreachable: bool = False
    next_list_at: datetime | None = None

    @property
    def failing(self) -> bool:
        return self.failures > 0

    @property
    def error_text(self) -> str:
        """`kind: message` of the last failure (`-` when none)."""
        return error_text(self.error_kind, self.error_message)
