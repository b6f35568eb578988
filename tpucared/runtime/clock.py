"""Time for the daemon, injected: wall-clock `now()` for the planner and the records,
`monotonic()` and `sleep()` for the loop's waits.

Nothing in tpucared.runtime reads the clock any other way, so tests can drive the loop with
a `ManualClock` (time moves only when the test says so) while the production daemon uses
`SystemClock`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC (what the planner and the store get)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps: for deadlines and latencies."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """Time that moves only by `advance()`; sleepers wake when their instant is reached."""

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
        self._elapsed = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._elapsed)

    def monotonic(self) -> float:
        return self._elapsed

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._elapsed + seconds, next(self._order), future))
        await future

    @property
    def sleepers(self) -> int:
        """Sleepers still waiting (cancelled ones excluded)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward, wake every sleeper whose instant has come, let them run."""
        self._elapsed += seconds
        while self._sleepers and self._sleepers[0][0] <= self._elapsed:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
        # Let woken tasks run up to their next await.
        for _ in range(5):
            await asyncio.sleep(0)
