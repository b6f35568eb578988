"""Today's ledger of every slot, for the page (runtime/page/): lost minutes and goodput per slot
and the fleet-wide headline, kept by a background task so that no request waits on it.

The ledger is computed from the store (Reader.ledger, inspect/ledger.py `ledgers`) since UTC
midnight: milliseconds for a few hundred slots, seconds at 10,000 (docs/benchmarks.md). So it
is never computed inside a request: the first request of the page starts a task that refreshes
it every `REFRESH_S`, or ten times what a refresh took if longer (a daemon nobody looks at
pays nothing, one at 10,000 slots a tenth of a core at most), the summing runs in a thread so
the reconcile loop keeps its event loop, and every answer says how old the figures are
(`as_of`, null until the first refresh ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import structlog

from tpucared.core.ledger.cost import Prices, headline
from tpucared.inspect.ledger import FleetLedger, ledgers
from tpucared.store import Store

log = structlog.get_logger(__name__)

REFRESH_S = 60.0
SlotKey = tuple[str, int]


@dataclass(frozen=True)
class SlotDay:
    lost_s: float
    goodput: float | None  # productive share of the day so far; None before any time


@dataclass(frozen=True)
class Today:
    as_of: datetime
    since: datetime
    slots: Mapping[SlotKey, SlotDay] = field(default_factory=dict)
    headline: str = ""


def midnight(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def today_of(fleets: list[FleetLedger], now: datetime, since: datetime) -> Today:
    slots = {}
    summaries = []
    for fleet in fleets:
        for row in fleet.slots:
            s = row.summary
            summaries.append(s)
            slots[(s.fleet, s.slot)] = SlotDay(s.lost_s, s.share if s.total_s > 0 else None)
    return Today(now, since, slots, headline(summaries, "00:00 UTC") if summaries else "")


class LedgerCache:
    def __init__(
        self,
        store: Store,
        prices: Prices,
        clock: Callable[[], datetime],
        refresh_s: float = REFRESH_S,
    ) -> None:
        self._store = store
        self._prices = prices
        self._clock = clock
        self._refresh_s = refresh_s
        self.today: Today | None = None
        self._task: asyncio.Task[None] | None = None
        self.last_seconds = 0.0
        self.refreshed = asyncio.Event()  # set once the first figures are in

    def wanted(self) -> Today | None:
        """The figures so far; starts the refreshing task on first use."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self.today

    async def refresh(self) -> Today:
        now = self._clock()
        since = midnight(now)
        async with self._store.read() as r:
            records = await r.ledger(since=since)
        started = time.monotonic()
        fleets = await asyncio.to_thread(ledgers, records, self._prices, now, since)
        self.today = today_of(fleets, now, since)
        self.refreshed.set()
        self.last_seconds = time.monotonic() - started
        log.debug("page.ledger_refreshed", seconds=round(self.last_seconds, 3))
        return self.today

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:
                log.exception(
                    "page.ledger_failed", hint="the page shows no lost time until it works"
                )
            # At 10,000 slots a refresh is seconds of CPU: never more than a tenth of the time.
            await asyncio.sleep(max(self._refresh_s, 10 * self.last_seconds))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
