"""Task plumbing for the daemon: supervised root tasks, and tracked background tasks.

`supervise` runs the daemon's named root tasks (the reconcile loop, the operation watcher,
whatever else is plugged in) in one `asyncio.TaskGroup` with a shared stop event: when one
dies (raises, or returns before stop was asked for) the stop event is set and the others are
cancelled, each ending logged; once stop is set, stragglers get `grace` seconds before they
are cancelled, so a hung task cannot keep the process alive. A root task that ends on
`LeaseLost` or `StoreUnavailable` (the database went away) ends the term, not the process:
the daemon stands by (runtime/terms.py).

`TaskSet` holds the short background tasks the executor spawns (one per create or delete
call), so that a slow cloud call never stalls a tick, and those of the workload jobs (one
per slot: a probe, or a chain of workload actions; workload/jobs.py). A task that fails
with an unexpected exception is a bug or a broken database: it is logged and reported to
`on_failure`, which stops the daemon (crash-only: a restart re-reads everything from the
store). The workload jobs catch their own failures first and contain them to their slot
(workload/failures.py: logged, recorded, retried after a backoff), so what reaches
`on_failure` from them is only a failure of that containment itself. On shutdown `drain`
lets them finish within a deadline and cancels the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

import structlog

from tpucared.runtime.clock import Clock
from tpucared.store.errors import LeaseLost, StoreUnavailable

log = structlog.get_logger(__name__)

RootTask = Callable[[], Awaitable[None]]

# How long root tasks get to end by themselves once stop is set, before they are cancelled: a
# stop is prompt whatever is in flight (docs/daemon.md, "Stopping"). Every root task checks the
# stop event between steps, so only one stuck in a request or a write needs the cancel.
STOP_GRACE_S = 0.5


class RootTaskDied(RuntimeError):
    def __init__(self, name: str) -> None:
        super().__init__(f"root task {name} ended before the daemon was asked to stop")
        self.name = name


async def supervise(
    roots: Mapping[str, RootTask], stop: asyncio.Event, clock: Clock, *, grace: float = STOP_GRACE_S
) -> None:
    """Run `roots` until all have returned. Raises an ExceptionGroup if one died."""

    async def guard(name: str, root: RootTask) -> None:
        try:
            await root()
        except asyncio.CancelledError:
            log.warning("task.cancelled", task=name)
            raise
        except LeaseLost as exc:  # a fenced write (runtime/leader.py): the term ends, no bug
            log.info("task.stopped_not_leading", task=name, why=str(exc))
            stop.set()
            raise
        except StoreUnavailable as exc:  # weather: the term ends, the process stands by
            log.info("task.stopped_database_unavailable", task=name, why=str(exc))
            stop.set()
            raise
        except Exception:
            log.exception("task.died", hint="stopping the daemon", task=name)
            stop.set()
            raise
        if not stop.is_set():
            log.error("task.ended", hint="stopping the daemon", task=name)
            stop.set()
            raise RootTaskDied(name)
        log.debug("task.done", task=name)

    async def deadline(tasks: list[asyncio.Task[None]]) -> None:
        await stop.wait()
        await clock.sleep(grace)
        for task in tasks:
            if not task.done():
                log.error("task.straggler_cancelled", task=task.get_name())
                task.cancel()

    watchdog: asyncio.Task[None] | None = None
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(guard(n, r), name=n) for n, r in roots.items()]
            watchdog = asyncio.ensure_future(deadline(tasks))
    finally:
        if watchdog is not None:
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog


class TaskSet:
    def __init__(
        self, on_failure: Callable[[BaseException], None], *, what: str = "cloud calls"
    ) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._on_failure = on_failure
        self._what = what  # for the logs: "cloud calls", "workload jobs"

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("task.background_failed", task=task.get_name(), exc_info=exc)
            self._on_failure(exc)

    async def drain(self, clock: Clock, within: float) -> int:
        """Wait up to `within` seconds for every task; cancel what is left. Returns how
        many were cancelled."""
        if self._tasks:
            log.info("task.draining", what=self._what, calls=len(self._tasks), within_s=within)
        sleeper = asyncio.ensure_future(clock.sleep(within))
        try:
            while self._tasks and not sleeper.done():
                await asyncio.wait({*self._tasks, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sleeper
        return await self.cancel()

    async def cancel(self) -> int:
        left = [t for t in self._tasks if not t.done()]
        for task in left:
            log.warning("task.drain_cancelled", what=self._what, task=task.get_name())
            task.cancel()
        if left:
            await asyncio.gather(*left, return_exceptions=True)
        return len(left)
