"""What the workload planner reads: fresh probes of the workers, and the stored records.

Where it sits: the runtime (runtime/workload/jobs.py, runtime/workload/runner.py) probes every
worker of every READY slice of a fleet with a workload in the background, about once per
poll, with one short SSH command per worker, and reports a `SlotProbe` per slot: each worker's
run is running / exited(code) / gone / or the worker is unreachable, with the size of the
run's log. A tick's plan gets the probes that ended since the previous tick (a slot without
one is left alone). `track` carries over from the slot's previous probe *when* each worker
entered its state and when its log last grew, so the planner can time hangs, unreachable
workers and stragglers with `now` alone (core/workload/planner.py).

The records come from the store's snapshot: `WorkloadRecords` is the part of it the workload
planner needs (each live incarnation's workers, each slot's newest attempt); the store's
`Snapshot` (tpucared.store) satisfies it structurally, `WorkloadSnapshot` is a plain
implementation for tests and tools.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from tpucared.core.model.records import (
    FleetRecord,
    IncarnationRecord,
    SlotRecord,
    WorkerRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.vocab.snapshot import PlainSnapshot, PlannerSnapshot, SlotKey
from tpucared.core.workload.progress import Progress


class WorkerState(StrEnum):
    """A worker's run of one attempt, as its probe found it."""

    RUNNING = "running"  # the run's process group is alive
    EXITED = "exited"  # the run recorded its exit code
    GONE = "gone"  # no process and no exit code: see WorkerProbe.detail
    UNREACHABLE = "unreachable"  # the probe could not run or its answer was unreadable


class NoticeKind(StrEnum):
    """Which notice a run's watcher heard (launch/sh/run.sh writes it in `notice_kind`)."""

    PREEMPTED = "preempted"  # instance/preempted turned TRUE
    MAINTENANCE = "maintenance"  # instance/maintenance-event TERMINATE_ON_HOST_MAINTENANCE


# WorkerProbe.detail of a GONE run (the reasons the ssh layer's probe script reports).
NEVER_STARTED = "no-run"  # nothing was ever launched in that run directory
DIED = "died"  # killed without recording an exit code (SIGKILL, OOM killer)
REBOOTED = "rebooted"  # the machine booted since the run started


@dataclass(frozen=True)
class WorkerProbe:
    worker: int
    state: WorkerState
    exit_code: int | None = None  # for EXITED
    log_bytes: int | None = None  # size of the run's log; None when unknown or absent
    detail: str | None = None  # GONE: no-run | died | rebooted; UNREACHABLE: why
    # Filled by `track`: since when the worker has been in `state` (for this incarnation and
    # attempt), and since when its log has had `log_bytes` bytes.
    since: datetime | None = None
    log_since: datetime | None = None
    # When the worker's run got the VM's preemption notice (its watcher's clock), if it did,
    # and which (None: the run did not say, read as a preemption).
    notice_at: datetime | None = None
    notice_kind: NoticeKind | None = None
    # What the run's progress file tells (core/workload/progress.py); None: no file.
    progress: Progress | None = None

    @classmethod
    def running(cls, worker: int, log_bytes: int | None = None) -> WorkerProbe:
        return cls(worker, WorkerState.RUNNING, log_bytes=log_bytes)

    @classmethod
    def exited(cls, worker: int, code: int, log_bytes: int | None = None) -> WorkerProbe:
        return cls(worker, WorkerState.EXITED, exit_code=code, log_bytes=log_bytes)

    @classmethod
    def gone(cls, worker: int, why: str = NEVER_STARTED) -> WorkerProbe:
        return cls(worker, WorkerState.GONE, detail=why)

    @classmethod
    def unreachable(cls, worker: int, why: str = "") -> WorkerProbe:
        return cls(worker, WorkerState.UNREACHABLE, detail=why or None)

    def describe(self) -> str:
        """`exited 1`, `gone (died)`, `unreachable (refused: ...)`, `running`."""
        if self.state is WorkerState.EXITED:
            return f"exited {self.exit_code}"
        return f"{self.state.value} ({self.detail})" if self.detail else self.state.value


@dataclass(frozen=True)
class Unclean:
    """A cleanup that left workers unclean: the TPU still held, or the worker not reached."""

    attempt: int  # the attempt whose processes it was to end
    workers: tuple[tuple[int, str], ...]  # (worker, why), by worker

    def __post_init__(self) -> None:
        if not self.workers:
            raise ValueError("an unclean cleanup names its workers")


@dataclass(frozen=True)
class SlotProbe:
    """One tick's probe of every worker of a slot's live incarnation."""

    fleet: str
    slot: int
    incarnation_id: int
    attempt: int | None  # the attempt number whose run was probed; None: no attempt there yet
    observed_at: datetime
    workers: tuple[WorkerProbe, ...]
    # Daemon-side facts the runner adds: workers whose TPU stayed held after the last cleanup
    # on this incarnation, and why a launch cannot work that the runner found itself (e.g.
    # `workload.files` missing on the daemon's disk).
    busy: tuple[int, ...] = ()
    blocked: str | None = None
    # Which of the workload's secret variables the daemon's environment has (names, never
    # values; None: not told), and the last cleanup on this incarnation when it left workers
    # unclean: the launch rules in core/workload/launch_gate.py read both.
    secrets_present: frozenset[str] | None = None
    unclean: Unclean | None = None
    # The pre-launch check (core/workload/bad_hosts.py): workers whose health check failed,
    # and the end times of the slot's earlier bad hosts (the store's, read when it failed).
    unhealthy: tuple[int, ...] = ()
    bad_hosts: tuple[datetime, ...] = ()

    def worker(self, index: int) -> WorkerProbe | None:
        for w in self.workers:
            if w.worker == index:
                return w
        return None


def track(previous: SlotProbe | None, fresh: SlotProbe) -> SlotProbe:
    """`fresh` with `since` and `log_since` carried over from the previous tick's probe of
    the same incarnation and attempt: unchanged state keeps its `since`, an unchanged (or, from
    an unreachable worker, unknown) log size keeps its `log_since`. Everything new starts at
    `fresh.observed_at`. After a daemon restart there is no previous probe, so timers restart:
    a hang is then found at most one `hang_timeout` late, never early."""
    now = fresh.observed_at
    same_run = (
        previous is not None
        and previous.incarnation_id == fresh.incarnation_id
        and previous.attempt == fresh.attempt
    )
    workers = []
    for w in fresh.workers:
        before = previous.worker(w.worker) if same_run and previous is not None else None
        since = before.since if before is not None and before.state is w.state else None
        log_since = None
        log_bytes = w.log_bytes
        if before is not None:
            if w.state is WorkerState.UNREACHABLE and log_bytes is None:
                log_bytes = before.log_bytes  # unknown this tick: not a change
            if log_bytes == before.log_bytes:
                log_since = before.log_since
        workers.append(
            replace(w, log_bytes=log_bytes, since=since or now, log_since=log_since or now)
        )
    return replace(fresh, workers=tuple(workers))


class WorkloadRecords(Protocol):
    """The stored records the workload planner reads besides the node planner's."""

    @property
    def workers(self) -> Mapping[int, tuple[WorkerRecord, ...]]: ...

    @property
    def last_attempts(self) -> Mapping[SlotKey, WorkloadAttemptRecord]: ...


class TickSnapshot(PlannerSnapshot, WorkloadRecords, Protocol):
    """Everything `plan_tick` reads from the store: the store's `Snapshot` is one."""


@dataclass(frozen=True)
class WorkloadSnapshot(PlainSnapshot):
    """A plain `TickSnapshot` (core.snapshot.Snapshot plus workers and attempts)."""

    workers: Mapping[int, tuple[WorkerRecord, ...]] = field(default_factory=dict)
    last_attempts: Mapping[SlotKey, WorkloadAttemptRecord] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        fleets: Iterable[FleetRecord] = (),
        slots: Iterable[SlotRecord] = (),
        incarnations: Iterable[IncarnationRecord] = (),
        *,
        workers: Iterable[WorkerRecord] = (),
        attempts: Iterable[WorkloadAttemptRecord] = (),
    ) -> WorkloadSnapshot:
        """Like `PlainSnapshot.of`, plus workers (of live incarnations) and the newest attempt of
        each slot among `attempts`."""
        base = PlainSnapshot.of(fleets, slots, incarnations)
        live = {i.id for i in base.nodes.values()}
        by_node: dict[int, list[WorkerRecord]] = {}
        for w in sorted(workers, key=lambda w: (w.incarnation_id, w.index)):
            if w.incarnation_id in live:
                by_node.setdefault(w.incarnation_id, []).append(w)
        newest: dict[SlotKey, WorkloadAttemptRecord] = {}
        for a in attempts:
            key = (a.fleet, a.slot)
            if key not in newest or newest[key].id < a.id:
                newest[key] = a
        return cls(
            fleets=base.fleets,
            slots=base.slots,
            nodes=base.nodes,
            workers={k: tuple(v) for k, v in by_node.items()},
            last_attempts=newest,
        )
