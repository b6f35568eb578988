"""`LedgerWrites`: the maintenance task's writes of a slot's closed ledger days
(runtime/ledger_days.py; which days are closed: core/ledger/kept.py).

A slot's new days and its `ledger_kept` mark are written in the caller's one transaction, so
a kill -9 leaves both or neither; the mark moves only forward from the value the caller read
(compare-and-set), so a second writer, or a pass that raced a restart, writes nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import and_, delete, insert, select, update

from tpucared.core.ledger.kept import DayKey
from tpucared.store.models import LedgerDayRow, LedgerKeptRow, LedgerTotalRow
from tpucared.store.write_base import WriterBase


class LedgerWrites(WriterBase):
    async def keep_ledger_days(
        self,
        fleet: str,
        slot: int,
        was: datetime | None,
        until: datetime,
        days: Mapping[DayKey, list[int]],
    ) -> bool:
        """The slot's days from `was` (None: its start) to `until`, and its mark moved from
        `was` to `until`; False (nothing written) when the mark is no longer `was`."""
        key = and_(LedgerKeptRow.fleet == fleet, LedgerKeptRow.slot == slot)
        if was is None:
            taken = await self._conn.execute(select(LedgerKeptRow.kept_until).where(key))
            if taken.first() is not None:
                return False
            await self._conn.execute(
                insert(LedgerKeptRow).values(fleet=fleet, slot=slot, kept_until=until)
            )
        else:
            moved = await self._conn.execute(
                update(LedgerKeptRow)
                .where(key, LedgerKeptRow.kept_until == was)
                .values(kept_until=until)
            )
            if not moved.rowcount:
                return False
        # Rows of days past `was` cannot exist (they come with the mark), unless written by
        # hand: the mark decides, so they go.
        stale = delete(LedgerDayRow).where(LedgerDayRow.fleet == fleet, LedgerDayRow.slot == slot)
        if was is not None:
            stale = stale.where(LedgerDayRow.day >= was.date())
        await self._conn.execute(stale)
        rows = [
            {"fleet": fleet, "slot": slot, "day": day, "category": category.value,
             "phase": phase.value if phase else "", "cause": cause.value if cause else "",
             "microseconds": us, "steps": steps}
            for (day, category, phase, cause), (us, steps) in days.items()
        ]  # fmt: skip
        if rows:
            await self._conn.execute(insert(LedgerDayRow), rows)
        await self._add_totals(fleet, slot, was is not None, days)
        return True

    async def _add_totals(
        self, fleet: str, slot: int, keep: bool, days: Mapping[DayKey, list[int]]
    ) -> None:
        """The slot's `ledger_totals` plus the new days' (`keep`: on top of its current ones,
        else from zero): read, summed, written back (a few rows a slot)."""
        t = LedgerTotalRow
        key = and_(t.fleet == fleet, t.slot == slot)
        totals: dict[tuple[str, str, str], list[int]] = {}
        if keep:
            current = select(t.category, t.phase, t.cause, t.microseconds, t.steps).where(key)
            for r in await self._conn.execute(current):
                totals[(r.category, r.phase, r.cause)] = [r.microseconds, r.steps]
        for (_, category, phase, cause), (us, steps) in days.items():
            name = (category.value, phase.value if phase else "", cause.value if cause else "")
            acc = totals.setdefault(name, [0, 0])
            acc[0] += us
            acc[1] += steps
        await self._conn.execute(delete(t).where(key))
        if totals:
            await self._conn.execute(
                insert(t),
                [{"fleet": fleet, "slot": slot, "category": c, "phase": p, "cause": k,
                  "microseconds": us, "steps": n} for (c, p, k), (us, n) in totals.items()],
            )  # fmt: skip
