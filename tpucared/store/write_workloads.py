"""Writes for workload attempts: each launch of the workload on a slot's node, and its end.

An attempt is recorded before the launch (its `number` is the TPUCARED_ATTEMPT the workers get)
and finished once its outcome is known. The slot's `attempts` and `failures` counters change in
the same transaction as the attempt row they count, so they always equal what the
`workload_attempts` table shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Final

from sqlalchemy import insert, select, update

from tpucared.core.model.records import AttemptOutcome, NodePhase, WorkloadAttemptRecord
from tpucared.store import convert
from tpucared.store.errors import AttemptRunning, NotFound, StaleWrite
from tpucared.store.models import SlotRow, WorkloadAttemptRow
from tpucared.store.write_base import WriterBase

# Attempt outcomes charged to the slot's crash budget (`failures`, vs max_failures).
FAILURE_OUTCOMES: Final = frozenset({AttemptOutcome.FAILED, AttemptOutcome.HUNG})


class WorkloadWrites(WriterBase):
    async def start_attempt(
        self, incarnation_id: int, now: datetime, *, reason: str = ""
    ) -> WorkloadAttemptRecord:
        """Record a launch on a READY incarnation before it happens; returns the attempt
        whose `number` (the slot's new `attempts`) is TPUCARED_ATTEMPT. `AttemptRunning`
        while the slot's previous attempt is unfinished; `StaleWrite` if not READY."""
        inc = await self.incarnation(incarnation_id)
        if inc is None:
            raise NotFound(f"node incarnation {incarnation_id}")
        if inc.phase is not NodePhase.READY:
            raise StaleWrite(
                f"phase of node incarnation {incarnation_id}", NodePhase.READY, inc.phase
            )
        running = await self._rows(
            select(WorkloadAttemptRow.id).where(
                WorkloadAttemptRow.fleet == inc.fleet,
                WorkloadAttemptRow.slot == inc.slot,
                WorkloadAttemptRow.ended_at.is_(None),
            )
        )
        if running:
            raise AttemptRunning(
                f"running attempt of {inc.fleet}/{inc.slot}", None, running[0]["id"]
            )
        bump = (
            update(SlotRow)
            .where(SlotRow.fleet == inc.fleet, SlotRow.slot == inc.slot)
            .values(attempts=SlotRow.attempts + 1)
            .returning(SlotRow.attempts)
        )
        number = (await self._conn.execute(bump)).scalar_one()
        stmt = (
            insert(WorkloadAttemptRow)
            .values(
                fleet=inc.fleet,
                slot=inc.slot,
                node_id=inc.id,
                number=number,
                started_at=now,
                exit_codes={},
            )
            .returning(*WorkloadAttemptRow.__table__.c)
        )
        attempt = convert.workload_attempt((await self._conn.execute(stmt)).mappings().one())
        await self._node_event(
            inc,
            "attempt.started",
            reason or f"{inc.fleet}/{inc.slot}: attempt {number} on {inc.node_name}",
            now,
            attempt_id=attempt.id,
            number=number,
        )
        return attempt

    async def finish_attempt(
        self,
        attempt_id: int,
        outcome: AttemptOutcome,
        now: datetime,
        *,
        exit_codes: Mapping[int, int | None] | None = None,
        detail: str | None = None,
        reason: str = "",
    ) -> WorkloadAttemptRecord:
        """Record how a running attempt ended: compare-and-set on it still running
        (finishing twice raises `StaleWrite`). A failed or hung attempt adds one to the
        slot's `failures`."""
        codes = {str(k): v for k, v in (exit_codes or {}).items()}
        stmt = (
            update(WorkloadAttemptRow)
            .where(WorkloadAttemptRow.id == attempt_id, WorkloadAttemptRow.ended_at.is_(None))
            .values(ended_at=now, outcome=outcome, exit_codes=codes, detail=detail)
            .returning(*WorkloadAttemptRow.__table__.c)
        )
        row = (await self._conn.execute(stmt)).mappings().one_or_none()
        if row is None:
            current = await self.workload_attempt(attempt_id)
            if current is None:
                raise NotFound(f"workload attempt {attempt_id}")
            raise StaleWrite(f"workload attempt {attempt_id}", "running", current.outcome)
        attempt = convert.workload_attempt(row)
        if outcome in FAILURE_OUTCOMES:
            await self._conn.execute(
                update(SlotRow)
                .where(SlotRow.fleet == attempt.fleet, SlotRow.slot == attempt.slot)
                .values(failures=SlotRow.failures + 1)
            )
        inc = await self.incarnation(attempt.incarnation_id)
        assert inc is not None  # a foreign key
        await self._node_event(
            inc,
            f"attempt.{outcome.value}",
            reason
            or f"{attempt.fleet}/{attempt.slot}: attempt {attempt.number} {outcome.value}"
            + (f": {detail}" if detail else ""),
            now,
            attempt_id=attempt.id,
            number=attempt.number,
            exit_codes=codes,
        )
        return attempt
