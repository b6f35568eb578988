"""The steps a fleet's `on_maintenance` asks for, carried out (core/workload/actions.py).

Where it sits: the workload executor (executor.py) hands `CheckpointForMaintenance` and
`StartMaintenance` here; the rules that asked for them are core/workload/maintenance.py. Each
records first (store/write_maintenance.py: the window handled, the early start asked), then
acts, so a crash in between never asks twice and the judge always knows an attempt's end
after the daemon's own stop signal as the maintenance's:

- the checkpoint sends the running attempt's runs on every READY slice of the slot the fleet's
  `stop_signal` (`Launcher.signal`, launch/sh/signal.sh: the signal a preemption notice gives;
  the workload checkpoints and exits). A run the signal misses is stopped by the judge after
  `stop_grace`;
- the early start asks the node's cloud (`Cloud.start_maintenance`: TPU API v2alpha1
  `nodes.performMaintenance`, Compute Engine `instances.performMaintenance`) through the
  `Starter` the daemon hands in. A refusal is recorded (`maintenance.start_refused`, the
  cloud's words) and the planner waits for the window instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Protocol

import structlog

from tpucared.core.model.records import IncarnationRecord, SlotRecord
from tpucared.core.workload.actions import CheckpointForMaintenance, StartMaintenance
from tpucared.ports.cloud import CloudError, OperationState
from tpucared.ports.launcher import Launcher, Place, Run
from tpucared.store import Store

log = structlog.get_logger(__name__)

STARTED, REFUSED = "maintenance.started", "maintenance.start_refused"  # events (and log lines)

# Asks the node's cloud to start its pending maintenance now (the daemon's clouds).
Starter = Callable[[IncarnationRecord], Awaitable[OperationState]]


class Located(Protocol):
    """One READY slice of the slot, where its workers are (executor.py `_Slice`)."""

    @property
    def inc(self) -> IncarnationRecord: ...
    @property
    def slot(self) -> SlotRecord: ...
    @property
    def place(self) -> Place: ...


SlicesOf = Callable[[str, int, int], Awaitable[Sequence[Located]]]


class MaintenanceSteps:
    def __init__(self, store: Store, launcher: Launcher, slices_of: SlicesOf) -> None:
        self._store = store
        self._launcher = launcher
        self._slices_of = slices_of
        self.starter: Starter | None = None  # set by the daemon (its clouds); None: refused

    async def checkpoint(self, a: CheckpointForMaintenance, now: datetime) -> None:
        signalled = a.attempt is not None
        what = f"attempt {a.attempt} gets SIG{a.signal} to checkpoint" if signalled else "no run"
        async with self._store.write() as tx:
            await tx.handle_window(
                a.incarnation_id, a.window_start, now, signalled=signalled,
                message=f"before its maintenance window: {what}; {a.reason}",
                attempt=a.attempt, signal=a.signal,
            )  # fmt: skip
        if a.attempt is None:
            return
        slices = await self._slices_of(a.fleet, a.slot, a.incarnation_id)
        sent = 0
        for s in slices:
            sent += await self._launcher.signal(s.place, Run(s.slot.run_id, a.attempt), a.signal)
        log.warning("maintenance.checkpoint", fleet=a.fleet, slot=a.slot, node=a.node_name,
                    attempt=a.attempt, window_start=a.window_start.isoformat(),
                    runs_signalled=sent)  # fmt: skip

    async def start(self, a: StartMaintenance, now: datetime) -> None:
        async with self._store.write() as tx:
            inc = await tx.note_early_start(
                a.incarnation_id, now, kind="maintenance.start_asked",
                message=f"asking the cloud to start the maintenance now; {a.reason}",
                window_start=a.window_start.isoformat(),
            )  # fmt: skip
        kind, words, fields = await self._ask(inc)
        where = {"fleet": a.fleet, "slot": a.slot, "node": a.node_name, **fields}
        if kind == STARTED:
            log.warning("maintenance.started", **where)
        else:
            log.warning("maintenance.start_refused", **where)
        async with self._store.write() as tx:
            await tx.append_event(kind, f"{a.node_name}: {words}", now, fleet=a.fleet,
                                  slot=a.slot, node=a.node_name, incarnation_id=inc.id,
                                  details=fields)  # fmt: skip

    async def _ask(self, inc: IncarnationRecord) -> tuple[str, str, dict[str, object]]:
        """(event kind, message, details) of the cloud's answer to the early start."""
        if self.starter is None:
            return REFUSED, "no cloud to ask: waiting for the window", {}
        try:
            op = await self.starter(inc)
        except CloudError as exc:
            why = str(exc)
            return (
                REFUSED,
                f"the cloud would not start the maintenance early ({why}): waiting for the window",
                {"error": why, "kind": exc.kind.value if exc.kind else None},
            )
        if op.failed:  # answered at once with a failed operation: not started
            assert op.error is not None
            why = str(op.error)
            return (
                REFUSED,
                f"the cloud's operation to start the maintenance failed ({why}): waiting for "
                "the window",
                {"error": why, "operation": op.name},
            )
        return (
            STARTED,
            "maintenance started early, at a moment the workload chose (after its checkpoint)",
            {"operation": op.name},
        )
