"""`tpucared goodput --since` over kept days (store/ledger_reads.py, migration 0017), on SQLite
and PostgreSQL: for a `since` at every hour of a four-day history, with one slot's days kept
and another's open (a running attempt), the figures from the kept days, the head and the tail,
and those of the "what matters since" read, equal the tiling of every row clipped to `since`;
and on SQLite the reads after a mark or a `since` (of every slot, one fleet, one slot) seek
each slot's rows by index instead of scanning the tables (what made `--since 7d` at 10,000
slots take 17 s: docs/benchmarks.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import event
from store_support import ENGINES, SQLITE_ONLY
from test_store_ledger_days import PRICES, Clock, figures, t, to_day_three, until_day_two

from tpucared.inspect.ledger import goodput_document, ledgers
from tpucared.runtime.ledger_days import LedgerDays
from tpucared.store import Store

BIG = ("nodes", "workload_attempts", "create_attempts", "ledger_days", "ran")  # "ran": an alias


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def recomputed(store: Store, now: datetime, since: datetime) -> dict[str, Any]:
    """Every row read and tiled, then clipped to `since`: the reference."""
    async with store.read() as r:
        records = await r.ledger(kept=False)
    document = goodput_document(ledgers(records, PRICES, now, since), now, since, "the start")
    for fleet in document["fleets"]:
        for slot in fleet["slots"]:
            slot.pop("intervals")
            slot.pop("kept_until")
    return document


async def kept_history(store: Store) -> datetime:
    n3, number = await until_day_two(store)
    await to_day_three(store, n3, number)
    now = t(3, 12)
    assert await LedgerDays(store, Clock(now), pause=0).keep() == 1  # type: ignore[arg-type]
    return now


async def test_since_any_hour_reads_as_every_row_clipped(store: Store) -> None:
    now = await kept_history(store)
    async with store.read() as r:
        assert (await r.ledger(sums=False)).kept_until == {("f", 0): t(2, 0)}  # f/1 open
    for hour in range(0, 3 * 24 + 12, 1):
        since = t(0, hour + 0.25)
        want = await recomputed(store, now, since)
        assert await figures(store, now, True, since) == want, since
        assert await figures(store, now, False, since) == want, since
    assert await figures(store, now, True) == await figures(store, now, False)


@SQLITE_ONLY
async def test_the_reads_from_a_time_seek_each_slot_by_index(store: Store) -> None:
    now = await kept_history(store)
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        sent.append((statement, params))

    event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    try:
        async with store.read() as r:
            await r.ledger(since=t(0, 15))  # head, kept days, tail
            await r.ledger()  # kept totals, tail
            await r.ledger(since=t(2, 20), kept=False)  # what matters since
            await r.ledger("f", since=t(0, 15))  # one fleet, one slot
            await r.ledger("f", 0)
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", record)
    assert len(sent) > 10
    async with store.read() as r:
        for statement, params in sent:
            plan = await r._conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params)
            steps = [str(row[-1]) for row in plan.all()]
            # No scan of a big table, and each search of one is a slot's range or a row by id
            # (a search by fleet alone, once a slot, read one fleet's rows 1,000 times).
            big = [s for s in steps if s.split()[0] in ("SCAN", "SEARCH") and _table(s) in BIG]
            wide = [s for s in big if "slot=?" not in s and "rowid=?" not in s]
            assert not wide, (statement, steps)
    assert now > t(0, 15)


def _table(step: str) -> str:
    """The table a plan's step is on, without an alias's suffix (`nodes_1`)."""
    return step.split()[1].rstrip("_0123456789")
