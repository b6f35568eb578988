"""The notifier: what `[[notify]]` webhooks hear, gathered after each tick and sent off it.

After every tick (a tick hook of `tpucared run`, daemon.py) it reads the events since the last
tick (new warning and error notices, a slot out of its failure budget, a zone that became
unreachable), works out which slots have waited for capacity longer than each webhook's
`stockout_after` (core/planning/stockout.py: the rule `status` uses), and, every few seconds
from its own task, whether /healthz changed its verdict (telemetry's rule: a hung loop is news
too). core/notify decides what is news and the rate limits; notify/sender.py posts it. Nothing
here can fail a tick: an error is logged and the next tick tries again. History from before
the start is not sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime

import structlog

from tpucared.core.notify import news as rules
from tpucared.core.notify.news import News, RateLimit
from tpucared.core.planning.stockout import slots_in_stockout
from tpucared.notify import Webhook, WebhookSender
from tpucared.runtime.clock import Clock
from tpucared.runtime.reconciler import Tick
from tpucared.store import Store

log = structlog.get_logger(__name__)

HEALTH_EVERY_S = 5.0
EVENT_PAGE = 500

HealthCheck = Callable[[], tuple[bool, str]]


class Notifications:
    def __init__(
        self, sender: WebhookSender, store: Store, clock: Clock, health: HealthCheck
    ) -> None:
        self._sender = sender
        self._store = store
        self._clock = clock
        self._health = health
        self._limits = {h.name: RateLimit() for h in sender.webhooks}
        self._waiting: dict[tuple[str, int], datetime] = {}
        self._pending: dict[str, list[News]] = {h.name: [] for h in sender.webhooks}
        self._last_event: int | None = None
        self._healthy = True

    async def on_tick(self, tick: Tick) -> None:
        if not self._sender.webhooks:
            return
        try:
            found = await self._new_events()
            now = self._clock.now()
            stockouts = slots_in_stockout(tick.snapshot)
            self._waiting = rules.waiting_since(self._waiting, stockouts, now)
            for hook in self._sender.webhooks:
                stock = rules.stockout_news(self._waiting, hook.spec.stockout_after, now)
                self._dispatch(hook, [*found, *stock], now)
        except Exception as exc:  # never the tick's problem
            log.warning("notify.gather_failed", error=str(exc))

    async def watch(self, stop: asyncio.Event) -> None:
        """A root task: the health verdict every few seconds, ticks or not."""
        while not stop.is_set():
            healthy, reason = self._health()
            now = self._clock.now()
            item = rules.health_news(self._healthy, healthy, reason, now)
            self._healthy = healthy
            for hook in self._sender.webhooks:
                self._dispatch(hook, [item] if item is not None else [], now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), HEALTH_EVERY_S)

    def _dispatch(self, hook: Webhook, found: list[News], now: datetime) -> None:
        waiting = self._pending[hook.name] + found
        posts, self._pending[hook.name] = self._limits[hook.name].admit(hook.spec, waiting, now)
        for post in posts:
            self._sender.send(hook, post)

    async def _new_events(self) -> list[News]:
        found: list[News] = []
        async with self._store.read() as r:
            if self._last_event is None:
                self._last_event = await r.last_event_id()  # history is not news
                return found
            while True:
                page = await r.events(self._last_event, EVENT_PAGE, None)
                found += rules.event_news(page)
                if page:
                    self._last_event = page[-1].id
                if len(page) < EVENT_PAGE:
                    return found
