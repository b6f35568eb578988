"""Read models the store assembles from several tables in one read transaction.

`Snapshot` is the planner's input: everything it needs from storage for one tick, taken from a
single consistent view of the database (one SQLite read transaction), so it never mixes state
from before and after a concurrent write. `FleetStatus`/`SlotStatus` are what `tpucared status`
shows. All are frozen and hold only `tpucared.core.model` records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TypeVar

from tpucared.core.model.records import (
    CreateAttemptRecord,
    EventRecord,
    FleetRecord,
    IncarnationRecord,
    SlotRecord,
    WorkerRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.model.records import ZoneHealth as ZoneHealth  # re-exported
from tpucared.core.model.specs import error_text as error_text  # re-exported
from tpucared.core.vocab.snapshot import NodeKey as NodeKey  # one definition, re-exported
from tpucared.core.vocab.snapshot import SlotKey as SlotKey

K = TypeVar("K")
V = TypeVar("V")


def frozen_mapping(items: Mapping[K, V] | None = None) -> Mapping[K, V]:
    """A read-only copy: snapshots are shared by the planner and must not be mutated."""
    return MappingProxyType(dict(items or {}))


@dataclass(frozen=True)
class Snapshot:
    """What the store knows, at one instant.

    `nodes` holds only live incarnations (phases in `core.model.lifecycle.LIVE_PHASES`), at most one
    per slot (a unique index guarantees it); `workers` only theirs.
    """

    fleets: Mapping[str, FleetRecord] = field(default_factory=frozen_mapping)
    slots: Mapping[SlotKey, SlotRecord] = field(default_factory=frozen_mapping)
    nodes: Mapping[NodeKey, IncarnationRecord] = field(default_factory=frozen_mapping)
    workers: Mapping[int, tuple[WorkerRecord, ...]] = field(default_factory=frozen_mapping)
    # The newest workload attempt of each slot that ever had one, running or finished.
    last_attempts: Mapping[SlotKey, WorkloadAttemptRecord] = field(default_factory=frozen_mapping)
    # The newest create attempt of each slot: which zone failed last, and how.
    last_creates: Mapping[SlotKey, CreateAttemptRecord] = field(default_factory=frozen_mapping)
    # The newest event id when the snapshot was taken (0 if none): follow events from here.
    last_event_id: int = 0

    @cached_property
    def running(self) -> Mapping[SlotKey, WorkloadAttemptRecord]:
        """The attempts still running (at most one per slot: the newest). Computed once per
        snapshot (it is immutable): callers test `key in snapshot.running` once per slot,
        which rebuilt the whole mapping each time, O(slots x attempts) per tick."""
        return frozen_mapping({k: a for k, a in self.last_attempts.items() if a.ended_at is None})

    def slots_of(self, fleet: str) -> tuple[SlotRecord, ...]:
        mine = (s for s in self.slots.values() if s.fleet == fleet)
        return tuple(sorted(mine, key=lambda s: s.index))

    def workers_of(self, incarnation_id: int) -> tuple[WorkerRecord, ...]:
        return self.workers.get(incarnation_id, ())


@dataclass(frozen=True)
class SliceStatus:
    """One slice of a multislice slot: its live (else most recent) incarnation and workers."""

    index: int
    node: IncarnationRecord
    workers: tuple[WorkerRecord, ...]


@dataclass(frozen=True)
class SlotStatus:
    slot: SlotRecord
    # The live incarnation if there is one, else the most recent one (None if never requested).
    node: IncarnationRecord | None
    workers: tuple[WorkerRecord, ...]
    last_attempt: WorkloadAttemptRecord | None
    # The slot's newest create call and how it ended (None if it never made one).
    last_create: CreateAttemptRecord | None = None
    # Its workload jobs are failing: the newest `workload.job_failed` event (None when they
    # are not, or the streak ended; core/workload/job_failures.py).
    job_failure: EventRecord | None = None
    # A multislice slot's slices, by index (`node` is then slice 0's); empty for one slice.
    slices: tuple[SliceStatus, ...] = ()
    # Its losses by cause (a LossCause value -> count; store/loss_counts.py), none at zero.
    losses: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FleetStatus:
    fleet: FleetRecord
    slots: tuple[SlotStatus, ...]
    # The fleet's zones (configured, or holding its newest nodes) whose lists are failing.
    failing_zones: tuple[ZoneHealth, ...] = ()
