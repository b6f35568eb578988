"""The ledger's vocabulary, and the view of a slot's records it is computed from.

Category names follow Google's `BadputType` where one fits, so the figures can be put beside
those of ml-goodput-measurement (GitHub AI-Hypercomputer/ml-goodput-measurement, its README's
"Badput Breakdown Details" and the `BadputType` enum of its `goodput_utils` module:
TPU_INITIALIZATION, TRAINING_PREP, PROGRAM_STARTUP, DATA_LOADING_SYNC, DATA_LOADING_ASYNC,
UNPRODUCTIVE_CHECKPOINT_SAVE_TIME, UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME,
WASTED_PROGRESS_FROM_DISRUPTION, INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION, CUSTOM_BADPUT_EVENTS,
OTHER). Only `INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION` is something the daemon sees by itself;
`PROGRAM_STARTUP` and `WASTED_PROGRESS_FROM_DISRUPTION` need the workload's progress file
(core/workload/progress.py), and `TPU_INITIALIZATION` is not told apart from the program's
startup (the file has no line for it). The rest are ours, lower case so they read as ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import (
    CreateAttemptRecord,
    IncarnationRecord,
    WorkloadAttemptRecord,
)


class Category(StrEnum):
    PRODUCTIVE = "productive"  # a workload attempt running (no workload: a node READY)
    # From a loss (preemption, unknown, stuck, deleted outside, a flex run's end) to the
    # replacement's workload running again. Google's BadputType name.
    RECOVERY = "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"
    # An attempt's start to its first step, when its progress file tells (Google's name).
    PROGRAM_STARTUP = "PROGRAM_STARTUP"
    # An attempt's last checkpoint to its loss: the progress the loss threw away (Google's).
    WASTED = "WASTED_PROGRESS_FROM_DISRUPTION"
    CAPACITY_WAIT = "capacity_wait"  # stockout, quota, flex-start queue, outside a recovery
    STARTUP = "startup"  # the first bring-up: create to READY to the first attempt
    MAINTENANCE = "maintenance"  # recovery from a host-maintenance loss
    BAD_HOST = "bad_host"  # recovery from a node recycled for a bad host
    CRASH_RESTART = "crash_restart"  # after an attempt FAILED or HUNG until the next runs
    HELD = "held"  # a hold or a spent budget keeps the slot from running
    IDLE = "idle"  # nothing asked: the run succeeded, was cancelled, or the fleet is down


CATEGORIES: tuple[Category, ...] = tuple(Category)
LOST: tuple[Category, ...] = tuple(c for c in Category if c is not Category.PRODUCTIVE)


class Phase(StrEnum):
    """Where a non-productive interval stood, as far as the records tell."""

    DETECTION = "detection"  # the lost node not yet marked dead (the attempt already ended)
    DELETE = "delete"  # the dead node being deleted, no replacement asked yet
    CAPACITY_WAIT = "capacity_wait"  # no node: the last create failed for capacity or quota
    PROVISIONING = "provisioning"  # a create asked or accepted, not READY yet
    SETUP = "setup"  # a node READY, the workload not started yet (setup and launch)


@dataclass(frozen=True)
class NodeTimes:
    """One incarnation as the ledger sees it: its phases' timestamps and why it ended."""

    id: int
    node_name: str
    zone: str
    accelerator_type: str
    requested_at: datetime
    creating_at: datetime | None = None
    ready_at: datetime | None = None
    dead_at: datetime | None = None
    deleting_at: datetime | None = None
    deleted_at: datetime | None = None
    failed_at: datetime | None = None
    end_reason: str | None = None
    loss_cause: LossCause | None = None
    slice: int = 0
    # When the cloud itself lost it, where it says (nodes.cloud_lost_at); `dead_at` is when
    # the daemon noticed. None: unknown (the TPU API gives no time), or not lost.
    cloud_lost_at: datetime | None = None

    @classmethod
    def of(
        cls,
        inc: IncarnationRecord,
        *,
        creating_at: datetime | None = None,
        deleting_at: datetime | None = None,
        failed_at: datetime | None = None,
    ) -> NodeTimes:
        """From the record (which does not carry every phase's time: the store adds them)."""
        return cls(
            id=inc.id,
            node_name=inc.node_name,
            zone=inc.zone,
            accelerator_type=inc.accelerator_type,
            requested_at=inc.requested_at,
            creating_at=creating_at,
            ready_at=inc.ready_at,
            dead_at=inc.dead_at,
            deleting_at=deleting_at,
            deleted_at=inc.deleted_at,
            failed_at=failed_at,
            end_reason=inc.end_reason,
            loss_cause=inc.loss_cause,
            slice=inc.slice,
            cloud_lost_at=inc.cloud_lost_at,
        )

    @property
    def lost_at(self) -> datetime | None:
        """When it was lost: the cloud's own time where it says (`cloud_lost_at`) and it
        falls in the node's READY life up to `dead_at` (outside it, a clock disagrees with
        the records: not used), else when the daemon noticed (`dead_at`). The store sets
        `dead_at` on entering DELETING too (store node_values.py `entering`), so a death
        recorded only by our own delete (at the same instant, with no cause: a scale-down,
        `down`, a spec change) is no loss."""
        if self.dead_at is None:
            return None
        if self.loss_cause is None and self.dead_at == self.deleting_at:
            return None
        cloud = self.cloud_lost_at
        floor = self.ready_at or self.requested_at
        if cloud is not None and floor <= cloud <= self.dead_at:
            return cloud
        return self.dead_at

    @property
    def gone_at(self) -> datetime | None:
        """When it stopped being a node at all (deleted, or its create failed)."""
        return self.deleted_at or self.failed_at

    def usable_until(self) -> datetime | None:
        """End of its READY life: its loss (the cloud's time where known), else its death,
        else its deletion."""
        return self.lost_at or self.dead_at or self.deleting_at or self.gone_at


@dataclass(frozen=True)
class SlotHistory:
    """What the store records for one slot. `workload`: the fleet runs one (else a READY node
    is productive); `held_since`: a hold holds it now; `done`: it wants nothing more."""

    fleet: str
    slot: int
    nodes: Sequence[NodeTimes] = ()
    attempts: Sequence[WorkloadAttemptRecord] = ()
    creates: Sequence[CreateAttemptRecord] = ()
    workload: bool = True
    done: bool = False
    held_since: datetime | None = None
    capacity: str = "spot"  # the fleet's capacity kind (core `CapacityKind` value)
    start: datetime | None = field(default=None)  # the first create, when the nodes read
    # are not all of them (`--since`); None: the first node's requested_at

    @property
    def first(self) -> datetime | None:
        if self.start is not None:
            return self.start
        return min((n.requested_at for n in self.nodes), default=None)


@dataclass(frozen=True)
class Interval:
    """[start, end) of one slot in one category."""

    start: datetime
    end: datetime
    category: Category
    phase: Phase | None = None
    cause: LossCause | None = None
    zone: str | None = None
    node: str | None = None
    accelerator_type: str | None = None
    steps: int | None = None  # wasted progress: the steps since the last checkpoint

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()
