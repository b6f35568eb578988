"""The reconcile loop: tick, then sleep until the next reason to tick.

Reasons to tick again, whichever comes first:
- the poll: `poll_interval` after the previous tick started (notices preemptions);
- a hold lifts: the earliest create backoff of the plan ends (`Tick.next_hold_lifts`), so
  capacity hunting retries exactly when the planner allows, not at the next poll;
- a wake (wakeup.py): an operation finished, a call was refused, a postponed call can go.
Bursts are coalesced: ticks start at least `min_gap` apart, so many operations finishing at
once cost one tick (one list per zone), not one each. An urgent wake (a workload probe that a
launch waits for: a fresh node's first answer) shortens the gap to `URGENT_GAP_S`: a new
node's launch should not wait out a second for a burst that is not coming. The loop returns
when `stop` is set, or when `until(tick)` says its job is done (`tpucared down`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from tpucared.runtime.clock import Clock
from tpucared.runtime.reconciler import BACKOFF_OVER, Reconciler, Tick
from tpucared.runtime.wakeup import STOP, Wakeup

log = structlog.get_logger(__name__)

# Plan a hair after a hold lifts, so the planner's `now` is past `next_create_at`.
HOLD_SLACK_S = 0.02
# The least gap between ticks after an urgent wake. Urgent wakes come once per new node
# (or idle slot whose probe changed), so they cannot keep the loop busy like a burst can.
URGENT_GAP_S = 0.1

TickHook = Callable[[Tick], Awaitable[None]]


class ReconcileLoop:
    def __init__(
        self,
        reconciler: Reconciler,
        clock: Clock,
        wakeup: Wakeup,
        poll_interval: float,
        *,
        min_gap: float | None = None,
        on_tick: TickHook | None = None,
    ) -> None:
        self.reconciler = reconciler
        self._clock = clock
        self._wakeup = wakeup
        self.poll_interval = poll_interval
        # At most ~10 ticks per poll interval, and at least one per second when woken.
        self.min_gap = min(1.0, poll_interval / 10) if min_gap is None else min_gap
        self.last_tick_at: float | None = None  # monotonic start of the last finished tick
        self._on_tick = on_tick  # health, metrics: after every completed tick

    async def run(self, stop: asyncio.Event, until: Callable[[Tick], bool] | None = None) -> None:
        reason, quiet = "start", False
        while not stop.is_set():
            started = self._clock.monotonic()
            tick = await self.reconciler.tick(reason, quiet=quiet)
            self.last_tick_at = started
            if self._on_tick is not None:
                await self._on_tick(tick)
            if until is not None and until(tick):
                stop.set()
                return
            timeout, timer = self._next_timer(tick, started)
            if await self._wakeup.wait(self._clock, timeout, stop) == STOP:
                return
            gap = started + self.min_gap - self._clock.monotonic()
            if self._wakeup.urgent:
                gap = min(gap, started + min(self.min_gap, URGENT_GAP_S) - self._clock.monotonic())
            if gap > 0:
                await self._clock.sleep(gap)  # wakes during the gap join this tick
                if stop.is_set():
                    return
            woken = self._wakeup.take()
            reason = woken or timer
            # Nothing the lists could show since the last tick: a backoff's end, or only
            # quiet wakes (a create that failed for lack of capacity). See reconciler.py.
            quiet = self._wakeup.last_quiet if woken else timer == BACKOFF_OVER

    def _next_timer(self, tick: Tick, started: float) -> tuple[float, str]:
        """Seconds until the next timed tick, and why it is due."""
        now = self._clock.monotonic()
        deadline, why = started + self.poll_interval, "poll"
        lifts = tick.next_hold_lifts
        if lifts is not None:
            in_s = (lifts - self._clock.now()).total_seconds() + HOLD_SLACK_S
            if now + in_s < deadline:
                deadline, why = now + in_s, BACKOFF_OVER
        return max(0.0, deadline - now), why
