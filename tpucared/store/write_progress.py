"""Writes of what a workload told in its progress file (TPUCARED_PROGRESS_FILE, issue 42).

The workload runner's probe jobs (runtime/workload/jobs.py) record here worker 0's progress as a
probe read it (core/workload/progress.py `advance` says what changed): its first step's time,
its last step and checkpoint and their times, on the attempt (migration 0014). No event: a step
is not news, and a busy workload would flood the log. The ledger (core/ledger/tiling.py) reads
them back on `WorkloadAttemptRecord`.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import update

from tpucared.store.models import WorkloadAttemptRow
from tpucared.store.write_base import WriterBase

PROGRESS_COLUMNS = (
    "first_step_at",
    "last_step",
    "last_step_at",
    "last_checkpoint",
    "last_checkpoint_at",
)


class ProgressWrites(WriterBase):
    async def record_progress(
        self, fleet: str, slot: int, number: int, values: Mapping[str, object]
    ) -> bool:
        """Set these progress columns of the slot's attempt `number`; whether it exists."""
        unknown = set(values) - set(PROGRESS_COLUMNS)
        if unknown:
            raise ValueError(f"not progress columns: {sorted(unknown)}")
        if not values:
            return True
        stmt = (
            update(WorkloadAttemptRow)
            .where(
                WorkloadAttemptRow.fleet == fleet,
                WorkloadAttemptRow.slot == slot,
                WorkloadAttemptRow.number == number,
            )
            .values(dict(values))
        )
        result = await self._conn.execute(stmt)
        return bool(result.rowcount)
