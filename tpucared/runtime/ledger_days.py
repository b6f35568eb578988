"""The kept ledger: each slot's closed days written to `ledger_days`, by the maintenance task.

Part of the maintenance task's pass (maintenance.py), after its pruning: for every slot of the
database, its ledger's days that can no longer change (core/ledger/kept.py `final_until`, whose
docstring says which) are summed per day, category, sub-phase and loss cause and written with
the slot's new `kept_until` mark (store/write_ledger.py), so that `tpucared goodput` over the
whole history tiles only what follows the mark (inspect/ledger.py; docs/benchmarks.md has the
figures). The first pass on a database with history keeps every closed day; later passes add
the days closed since (usually one a slot a day), once a UTC day: re-reading every slot's
tail every 10 minutes would cost, at 10,000 slots, seconds of CPU for nothing.

Bounded, as the task's deletes: `BATCH` slots of one fleet at a time, each batch one read (the
records after each slot's mark: store/ledger_reads.py), the tiling in a thread (the reconcile
loop keeps its event loop) and one short write transaction, with a pause between batches. The
rows are derived: a batch lost to a kill -9 is written by the next pass (mark and days commit
together), and a mark that moved meanwhile (another writer) makes the batch skip that slot.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from tpucared.core.ledger.kept import GRACE, DayKey, day_sums, final_until, midnight
from tpucared.core.ledger.tiling import slot_ledger
from tpucared.inspect.ledger import fleets_read, slot_history
from tpucared.runtime.clock import Clock
from tpucared.store import Store
from tpucared.store.ledger_reads import LedgerRecords

log = structlog.get_logger(__name__)

BATCH = 50  # slots a batch: its read, tiling and write stay well under a tick
PAUSE_S = 0.05  # between batches: the tick gets the write lock in between


@dataclass(frozen=True)
class SlotDays:
    """One slot's new closed days: from its mark `was` (None: none yet) to `until`."""

    fleet: str
    slot: int
    was: datetime | None
    until: datetime
    days: dict[DayKey, list[int]]


def closed_days(records: LedgerRecords, now: datetime, grace: timedelta = GRACE) -> list[SlotDays]:
    """The closed days of the slots read (`records`: their records after their marks) not
    kept yet. Pure: runs in a thread."""
    out = []
    for name, fleet, slots, facts in fleets_read(records):
        for slot in slots:
            history = slot_history(records, fleet, slot, facts)
            first = history.first
            if first is None:
                continue
            was = records.kept_until.get((name, slot.index))
            start = was or first
            until = final_until(history, now, grace)
            if until <= start or until <= midnight(first):
                continue
            days = day_sums(slot_ledger(history, now), start, until)
            out.append(SlotDays(name, slot.index, was, until, days))
    return out


class LedgerDays:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        batch: int = BATCH,
        pause: float = PAUSE_S,
        grace: timedelta = GRACE,
    ) -> None:
        self._store = store
        self._clock = clock
        self._batch = batch
        self._pause = pause
        self._grace = grace
        self._done_for: datetime | None = None  # the day a whole pass last ran for

    async def keep(self, stop: asyncio.Event | None = None) -> int:
        """One pass over every slot, once a UTC day (the task runs every 10 minutes: a slot
        whose days close later in the day waits for the next day's pass, which only leaves
        its tail a little longer); returns how many slots' marks moved."""
        now = self._clock.now()
        day = midnight(now - self._grace)
        if self._done_for == day:
            return 0
        async with self._store.read() as r:
            slots = await r.slots()
        by_fleet: dict[str, list[int]] = defaultdict(list)
        for slot in slots:
            by_fleet[slot.fleet].append(slot.index)
        moved = days = 0
        for fleet, indexes in by_fleet.items():
            for at in range(0, len(indexes), self._batch):
                if stop is not None and stop.is_set():
                    return moved
                chunk = indexes[at : at + self._batch]
                done = await self._keep_batch(fleet, chunk, now)
                moved += len(done)
                days += sum(len({k[0] for k in d.days}) for d in done)
                await asyncio.sleep(self._pause)
        self._done_for = day
        if moved:
            log.info("ledger.days_kept", slots=moved, slot_days=days, before=now.isoformat())
        return moved

    async def _keep_batch(self, fleet: str, chunk: Sequence[int], now: datetime) -> list[SlotDays]:
        async with self._store.read() as r:
            records = await r.ledger(fleet, slots=chunk, sums=False)
        plans = await asyncio.to_thread(closed_days, records, now, self._grace)
        if not plans:
            return []
        done = []
        async with self._store.write() as tx:
            for p in plans:
                if await tx.keep_ledger_days(p.fleet, p.slot, p.was, p.until, p.days):
                    done.append(p)
        return done
