"""Writes for workload attempts: each launch of the workload on a slot's node, and its end.

An attempt is recorded before the launch (its `number` is the TPUCARED_ATTEMPT the workers get)
and finished once its outcome is known. The slot's `attempts` and `failures` counters change in
the same transaction as the attempt row they count, so they always equal what the
`workload_attempts` table shows.

Both writes follow the attempt lifecycle (core/workload/attempts.py), whose states are derived
from the stored columns (`ended_at`, `outcome`): `start_attempt` records an attempt in its
initial state (RUNNING) only while every earlier attempt of the slot is terminal, and
`finish_attempt` checks its edge against the table before writing anything
(`IllegalAttemptTransition`), then writes with a compare-and-set on the state the caller read
(`StaleWrite` if the attempt moved on).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Final

from sqlalchemy import ColumnElement, and_, insert, or_, select, update

from tpucared.core.model.records import AttemptOutcome, NodePhase, WorkloadAttemptRecord
from tpucared.core.workload.attempts import (
    OPEN_STATES,
    AttemptState,
    attempt_state,
    check_attempt_transition,
    ended,
    outcome_of,
)
from tpucared.store import convert
from tpucared.store.errors import AttemptRunning, NotFound, StaleWrite
from tpucared.store.models import SlotRow, WorkloadAttemptRow
from tpucared.store.write_base import WriterBase

# Attempt outcomes charged to the slot's crash budget (`failures`, vs max_failures).
FAILURE_OUTCOMES: Final = frozenset({AttemptOutcome.FAILED, AttemptOutcome.HUNG})


def _in_state(state: AttemptState) -> ColumnElement[bool]:
    """The WHERE clause of "the attempt row is in `state`" (`attempts.state_of` in SQL)."""
    outcome = outcome_of(state)
    if outcome is None:
        return WorkloadAttemptRow.ended_at.is_(None)
    return and_(WorkloadAttemptRow.ended_at.is_not(None), WorkloadAttemptRow.outcome == outcome)


class WorkloadWrites(WriterBase):
    async def start_attempt(
        self, incarnation_id: int, now: datetime, *, reason: str = ""
    ) -> WorkloadAttemptRecord:
        """Record a launch on a READY incarnation before it happens; returns the attempt
        whose `number` (the slot's new `attempts`) is TPUCARED_ATTEMPT, in the lifecycle's
        initial state (RUNNING). `AttemptRunning` while an earlier attempt of the slot is not
        terminal; `StaleWrite` if not READY."""
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
                or_(*(_in_state(s) for s in sorted(OPEN_STATES))),
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
        self._node_event(
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
        expected: AttemptState = AttemptState.RUNNING,
    ) -> WorkloadAttemptRecord:
        """Record how an attempt ended: the edge `expected` -> `outcome` is checked against
        the attempt lifecycle first (`IllegalAttemptTransition`, nothing written), then
        written with a compare-and-set on the attempt still being in `expected` (finishing
        twice raises `StaleWrite`). A failed or hung attempt adds one to the slot's
        `failures`."""
        check_attempt_transition(expected, ended(outcome))
        codes = {str(k): v for k, v in (exit_codes or {}).items()}
        stmt = (
            update(WorkloadAttemptRow)
            .where(WorkloadAttemptRow.id == attempt_id, _in_state(expected))
            .values(ended_at=now, outcome=outcome, exit_codes=codes, detail=detail)
            .returning(*WorkloadAttemptRow.__table__.c)
        )
        row = (await self._conn.execute(stmt)).mappings().one_or_none()
        if row is None:
            current = await self.workload_attempt(attempt_id)
            if current is None:
                raise NotFound(f"workload attempt {attempt_id}")
            raise StaleWrite(f"workload attempt {attempt_id}", expected, attempt_state(current))
        attempt = convert.workload_attempt(row)
        if outcome in FAILURE_OUTCOMES:
            await self._conn.execute(
                update(SlotRow)
                .where(SlotRow.fleet == attempt.fleet, SlotRow.slot == attempt.slot)
                .values(failures=SlotRow.failures + 1)
            )
        inc = await self.incarnation(attempt.incarnation_id)
        assert inc is not None  # a foreign key
        self._node_event(
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
