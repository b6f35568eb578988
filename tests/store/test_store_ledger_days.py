"""The kept ledger days (runtime/ledger_days.py, store/write_ledger.py, migration 0015) on
SQLite and PostgreSQL: a slot's history written day after day through the store (a crash, a
preemption wasting progress, a stockout, a running attempt across midnight later lost), the
maintenance task's pass at two times, and `tpucared goodput`'s figures from the kept days
plus the tail exactly those of the full recompute; a pass cut short, or lost to a kill -9, is
finished by the next (a real kill -9 of a process mid-pass too); the view `v_slot_ledger`
sums the kept days."""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from store_support import ENGINES, SQLITE_ONLY, facts, seed

from tpucared.core.ledger.cost import Prices
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import AttemptOutcome, CreateAttemptRecord, NodePhase
from tpucared.inspect.ledger import goodput_document, ledgers
from tpucared.runtime.ledger_days import LedgerDays
from tpucared.store import Store

P = NodePhase
D0 = datetime(2026, 11, 1, tzinfo=UTC)
PRICES = Prices({("v6e", "spot"): 0.54})


def t(day: int, hour: float) -> datetime:
    return D0 + timedelta(days=day, hours=hour)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.at = now

    def now(self) -> datetime:
        return self.at


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def up(store: Store, slot: int, at: datetime, zone: str = "z-a") -> int:
    """A node of f/slot asked for at `at`, READY 6 minutes later; its id."""
    async with store.write() as tx:
        n = await tx.request_node("f", slot, f"f-{slot}", zone, "v6e-8", at)
        await tx.record_create_attempt(
            CreateAttemptRecord("f", slot, zone, "v6e-8", at, "ok", 1.0, None, n.id)
        )
        await tx.transition(n.id, P.REQUESTED, P.CREATING, at + timedelta(minutes=1))
        await tx.transition(
            n.id, P.CREATING, P.READY, at + timedelta(minutes=6), cloud=facts(workers=1)
        )
    return n.id


def told(first: float, step: int, step_at: float, checkpoint: int, at: float) -> dict[str, Any]:
    """Progress columns (hours since day 0)."""
    return {"first_step_at": t(0, first), "last_step": step, "last_step_at": t(0, step_at),
            "last_checkpoint": checkpoint, "last_checkpoint_at": t(0, at)}  # fmt: skip


async def run(store: Store, node: int, at: datetime, **progress: Any) -> tuple[int, int]:
    async with store.write() as tx:
        a = await tx.start_attempt(node, at)
        if progress:
            await tx.record_progress("f", a.slot, a.number, progress)
    return a.id, a.number


async def lose(store: Store, node: int, attempt: int, at: datetime) -> None:
    """Preempted at `at`, the attempt ended a minute later, the node deleted."""
    async with store.write() as tx:
        await tx.transition(
            node, P.READY, P.DEAD, at, end_reason="preempted", cause=LossCause.PREEMPTED
        )
        await tx.finish_attempt(attempt, AttemptOutcome.PREEMPTED, at + timedelta(minutes=1))
        await tx.begin_delete(node, P.DEAD, at + timedelta(minutes=2))
        await tx.transition(node, P.DELETING, P.DELETED, at + timedelta(minutes=5))


async def until_day_two(store: Store) -> tuple[int, int]:
    """f/0: day 0 a node READY, attempt 1 crashes at 10:00 (checkpoint 09:00), attempt 2 on
    the same node until preempted day 1 06:00 (checkpoint 05:00); a stockout; a node READY,
    attempt 3 from day 1 07:15 (checkpoint 23:00) still running. f/1: a node READY on day 0,
    one attempt running since. Returns attempt 3's node and number."""
    await seed(store, "f", 2, t(0, 0))
    n1 = await up(store, 0, t(0, 1))
    a1, _ = await run(store, n1, t(0, 1.25), **told(1.4, 900, 9.9, 800, 9))
    async with store.write() as tx:
        await tx.finish_attempt(a1, AttemptOutcome.FAILED, t(0, 10))
    a2, _ = await run(store, n1, t(0, 10.1), **told(10.2, 2000, 24 + 5.9, 1900, 24 + 5))
    await lose(store, n1, a2, t(1, 6))
    async with store.write() as tx:
        failed = await tx.request_node("f", 0, "f-0", "z-a", "v6e-8", t(1, 6.2))
        await tx.record_create_attempt(
            CreateAttemptRecord("f", 0, "z-a", "v6e-8", t(1, 6.2), "capacity", 1.0,
                                "stockout", failed.id)
        )  # fmt: skip
        await tx.transition(failed.id, P.REQUESTED, P.FAILED, t(1, 6.2))
    n3 = await up(store, 0, t(1, 7), zone="z-b")
    _, number = await run(store, n3, t(1, 7.25), **told(24 + 7.3, 3000, 48 + 2.9, 2500, 24 + 23))
    other = await up(store, 1, t(0, 2))
    await run(store, other, t(0, 3))
    return n3, number


async def to_day_three(store: Store, n3: int, number: int) -> None:
    """Attempt 3's node preempted on day 2 at 05:00 (its progress since day 1 23:00 wasted);
    a new node runs attempt 4 across the next midnight."""
    async with store.write() as tx:
        await tx.record_progress("f", 0, number, {"last_step": 3300, "last_step_at": t(2, 4.9)})
        (a3,) = [a for a in await tx.workload_attempts("f", 0) if a.number == number]
    await lose(store, n3, a3.id, t(2, 5))
    n4 = await up(store, 0, t(2, 6))
    await run(store, n4, t(2, 6.25), first_step_at=t(2, 6.3))


async def figures(
    store: Store, now: datetime, kept: bool, since: datetime | None = None
) -> dict[str, Any]:
    async with store.read() as r:
        records = await r.ledger(since=since, kept=kept)
    document = goodput_document(ledgers(records, PRICES, now, since), now, since, "the start")
    for fleet in document["fleets"]:
        for slot in fleet["slots"]:
            slot.pop("intervals")  # the tail's only when days are kept
            slot.pop("kept_until")
    return document


async def test_kept_days_and_the_tail_read_as_the_full_recompute(store: Store) -> None:
    n3, number = await until_day_two(store)
    clock = Clock(t(2, 3))
    keeper = LedgerDays(store, clock, pause=0)  # type: ignore[arg-type]
    assert await keeper.keep() == 1  # f/0 up to day 1; f/1's running attempt keeps it open
    async with store.read() as r:
        assert (await r.ledger(sums=False)).kept_until == {("f", 0): t(1, 0)}
    assert await figures(store, clock.at, True) == await figures(store, clock.at, False)
    await to_day_three(store, n3, number)
    clock.at = t(3, 12)
    assert await keeper.keep() == 1
    assert await keeper.keep() == 0  # nothing new closed
    async with store.read() as r:
        assert (await r.ledger(sums=False)).kept_until == {("f", 0): t(2, 0)}
    got, want = await figures(store, clock.at, True), await figures(store, clock.at, False)
    assert got == want
    # `--since`: mid-day before the kept days (that day tiled, then kept days), at a kept
    # midnight, within the last kept day (tiled from there), after them.
    async with store.read() as r:
        records = await r.ledger(since=t(0, 15))
    assert records.kept_until == {("f", 0): t(2, 0)}
    assert records.head_until == t(1, 0)
    for since in (t(0, 0.5), t(0, 15), t(1, 0), t(1, 12), t(2, 1), t(3, 11)):
        kept = await figures(store, clock.at, True, since)
        assert kept == await figures(store, clock.at, False, since), since
    (slot0, _) = want["fleets"][0]["slots"]
    cats = slot0["categories"]
    assert cats["WASTED_PROGRESS_FROM_DISRUPTION"]["seconds"] == 8 * 3600
    assert slot0["steps_lost"] == 100 + 100 + 800
    assert cats["crash_restart"]["seconds"] > 0
    assert cats["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"]["phases"]["capacity_wait"] > 0
    # The view sums the kept days (days 0 and 1 of f/0).
    async with store.read() as r:
        rows = (await r._conn.execute(text(
            "SELECT category, days, seconds FROM v_slot_ledger WHERE fleet = 'f' AND slot = 0"
        ))).all()  # fmt: skip
    view = {c: (int(d), float(s)) for c, d, s in rows}
    assert sum(s for _, s in view.values()) == pytest.approx(2 * 86400 - 3600)
    days, seconds = view["WASTED_PROGRESS_FROM_DISRUPTION"]
    assert (days, seconds) == (2, 3 * 3600)


async def test_a_pass_cut_short_is_finished_by_the_next(store: Store) -> None:
    n3, number = await until_day_two(store)
    await to_day_three(store, n3, number)
    clock = Clock(t(3, 12))
    stop = asyncio.Event()
    cut = LedgerDays(store, clock, batch=1, pause=0)  # type: ignore[arg-type]
    first = cut._keep_batch  # stopped once it is written

    async def then_stop(*args: Any) -> Any:
        done = await first(*args)
        stop.set()
        return done

    cut._keep_batch = then_stop  # type: ignore[method-assign,assignment]
    assert await cut.keep(stop) == 1
    async with store.read() as r:
        assert set((await r.ledger(sums=False)).kept_until) == {("f", 0)}
    assert await LedgerDays(store, clock, pause=0).keep() == 0  # type: ignore[arg-type]
    assert await figures(store, clock.at, True) == await figures(store, clock.at, False)
    # The mark moves only from what the pass read: a stale pass writes nothing.
    async with store.write() as tx:
        assert not await tx.keep_ledger_days("f", 0, t(1, 0), t(3, 0), {})
        assert not await tx.keep_ledger_days("f", 0, None, t(3, 0), {})


KEEPER = """
import asyncio, sys
from datetime import datetime
from tpucared.runtime.ledger_days import LedgerDays
from tpucared.store import Store

class Clock:
    def now(self):
        return datetime.fromisoformat(sys.argv[2])

async def main():
    async with Store.open(sys.argv[1]) as store:
        print("open", flush=True)
        while True:  # passes from scratch, over and over, until killed
            async with store.write() as tx:
                await tx._conn.exec_driver_sql("DELETE FROM ledger_days")
                await tx._conn.exec_driver_sql("DELETE FROM ledger_kept")
                await tx._conn.exec_driver_sql("DELETE FROM ledger_totals")
            await LedgerDays(store, Clock(), batch=1, pause=0).keep()

asyncio.run(main())
"""


@SQLITE_ONLY
async def test_kill_9_mid_pass_then_a_restart_reads_the_same(store: Store, store_db: Path) -> None:
    n3, number = await until_day_two(store)
    await to_day_three(store, n3, number)
    want = await figures(store, t(3, 12), False)
    for delay in (0.05, 0.2, 0.5):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", KEEPER, str(store_db), t(3, 12).isoformat(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.stdout is not None
        assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"open\n"
        await asyncio.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        async with Store.open(store_db) as again:  # the restart
            assert await figures(again, t(3, 12), True) == want  # whatever the kill left
            await LedgerDays(again, Clock(t(3, 12)), pause=0).keep()  # type: ignore[arg-type]
            assert await figures(again, t(3, 12), True) == want
