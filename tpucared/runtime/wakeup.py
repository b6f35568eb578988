"""Wakeup: how the rest of the daemon tells the reconcile loop "plan again now".

The loop sleeps until its next poll or the earliest instant a hold lifts (daemon.py), but
some facts deserve a plan at once: an operation finished (operations.py), a create or delete
call failed (calls.py), a workload job ended (workload/jobs.py). Those call
`Wakeup.set(reason)`; a wake that arrives while the loop is busy is kept, so the next wait
returns at once and no wake is ever lost. An `urgent` wake (a fresh probe that a launch
waits for) also lets the loop skip most of its minimum gap between ticks (loop.py). A `quiet`
wake brings nothing the zones' lists could show (a create that failed for lack of capacity:
no node came of it): when every wake of a tick is quiet, the tick may plan on the previous
lists (reconciler.py).
"""

from __future__ import annotations

import asyncio
import contextlib

from tpucared.runtime.clock import Clock

STOP = "stop"
TIMEOUT = "timeout"
WOKEN = "woken"


class Wakeup:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._reasons: list[str] = []
        self._urgent = False
        self._loud = False  # some wake since the last `take` was not quiet
        self.last_quiet = False  # every wake taken by the last `take` was quiet

    def set(self, reason: str, *, urgent: bool = False, quiet: bool = False) -> None:
        self._reasons.append(reason)
        self._urgent = self._urgent or urgent
        self._loud = self._loud or not quiet
        self._event.set()

    @property
    def urgent(self) -> bool:
        """Some wake since the last `take` was urgent."""
        return self._urgent

    @property
    def pending(self) -> bool:
        return self._event.is_set()

    def take(self) -> str:
        """The reasons of every wake since the last `take` (joined, "" if none); clears."""
        reasons = list(dict.fromkeys(self._reasons))
        self.last_quiet = bool(reasons) and not self._loud
        self._reasons.clear()
        self._urgent = False
        self._loud = False
        self._event.clear()
        return ", ".join(reasons)

    async def wait(self, clock: Clock, seconds: float, stop: asyncio.Event) -> str:
        """Until a wake (WOKEN: call `take` for the reasons, which also clears them), `stop`
        (STOP) or `seconds` have passed (TIMEOUT)."""
        if stop.is_set():
            return STOP
        if self._event.is_set():
            return WOKEN
        woken = asyncio.ensure_future(self._event.wait())
        stopped = asyncio.ensure_future(stop.wait())
        slept = asyncio.ensure_future(clock.sleep(seconds))
        waiters = (woken, stopped, slept)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waiters:
                task.cancel()
            for task in waiters:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if stop.is_set():
            return STOP
        if self._event.is_set():
            return WOKEN
        return TIMEOUT
