"""The maintenance task: what weeks of running must not accumulate, pruned off the tick.

A root task of `tpucared run` (daemon.py), beside the reconcile loop: at start and then every
`INTERVAL_S`, it deletes events older than `daemon.events_retention`, the health rows of zones
no configured fleet lists anymore, and the pinned host keys of ended node incarnations (rules:
core/model/retention.py), then keeps the ledger's closed days (ledger_days.py: each slot's days
that can no longer change, summed, so `tpucared goodput` tiles only the rest). Each delete is
its own short transaction of at most `BATCH` rows with a pause between them, so a big backlog
never holds SQLite's write lock long enough to stall a tick. A pass that fails (a busy or full
disk) is logged and tried again next interval: pruning is never a reason to stop the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from tpucared.config import Config
from tpucared.core.model.retention import ENDED_PHASES, events_cutoff, stale_zones
from tpucared.runtime.clock import Clock
from tpucared.runtime.ledger_days import LedgerDays
from tpucared.store import Store, Tx

log = structlog.get_logger(__name__)

INTERVAL_S = 600.0  # between passes
BATCH = 500  # rows per transaction
PAUSE_S = 0.05  # between transactions: other writers (the tick) get the lock in between


@dataclass
class Pruned:
    events: int = 0
    zones: int = 0
    pins: int = 0
    ledger_slots: int = 0  # slots whose kept ledger days moved on


class Maintenance:
    def __init__(
        self,
        store: Store,
        config: Config,
        clock: Clock,
        *,
        interval: float = INTERVAL_S,
        batch: int = BATCH,
        pause: float = PAUSE_S,
    ) -> None:
        self._store = store
        self._config = config
        self._clock = clock
        self._interval = interval
        self._batch = batch
        self._pause = pause
        self._days = LedgerDays(store, clock, pause=pause)

    async def run(self, stop: asyncio.Event) -> None:
        """Passes until `stop` is set; returns promptly then (a pass stops between batches)."""
        while not stop.is_set():
            try:
                await self.prune(stop)
            except Exception as exc:  # a maintenance failure is never the daemon's end
                log.warning("maintenance.failed", hint="trying again later", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._interval)

    async def prune(self, stop: asyncio.Event | None = None) -> Pruned:
        """One pass; logs what it removed, if anything."""
        done = Pruned()
        cutoff = events_cutoff(self._clock.now(), self._config.daemon.events_retention)
        if cutoff is not None:
            done.events = await self._batches(lambda tx: tx.prune_events(cutoff, self._batch), stop)
        gcp = self._config.gcp.project
        listed = {(f.project or gcp, z) for f in self._config.fleets for z in f.zones}
        async with self._store.write() as tx:
            done.zones = await tx.forget_zone_health(
                stale_zones(await tx.zone_health_keys(), listed)
            )
        done.pins = await self._batches(lambda tx: tx.clear_pins(ENDED_PHASES, self._batch), stop)
        done.ledger_slots = await self._days.keep(stop)
        if done.events or done.zones or done.pins:
            log.info(
                "maintenance.pruned",
                events=done.events,
                stale_zones=done.zones,
                ended_pins=done.pins,
                events_before=None if cutoff is None else cutoff.isoformat(),
            )
        return done

    async def _batches(
        self, step: Callable[[Tx], Awaitable[int]], stop: asyncio.Event | None
    ) -> int:
        total = 0
        while stop is None or not stop.is_set():
            async with self._store.write() as tx:
                n = await step(tx)
            total += n
            if n < self._batch:
                break
            await asyncio.sleep(self._pause)
        return total
