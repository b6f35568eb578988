"""Terms of leadership: a `tpucared run` stands by until it leads, runs the daemon while it
leads, and stands by again when it loses the lease.

`lead_while_elected` runs the lease keeper (runtime/leader.py) beside the terms. Each term is a
fresh daemon (`start_term` builds it: new caches, new operation watcher, its cloud calls
guarded by the keeper), which first records the calls the previous leader left without an
outcome (`record_interrupted_calls`, as after a crash: the previous leader may have died or
been paused in the middle of one), then reconciles as usual. A term ends:
- when the process stops (`stopped`, signals or an embedder): the calls in flight drain, then
  the lease is released, so a standby takes over at its next attempt;
- when the lease is lost (`keeper.lost`): the daemon stops at once, and the calls in flight
  are cancelled after `LOST_DRAIN_S` (their outcome writes are fenced anyway: the next leader
  records them interrupted); this process stands by and may lead again later;
- when the daemon itself ends (`until`, or a failure: exit status 1, as before).

While it stands by, the process keeps its caches warm (`keep_warm`): it reads the store's
snapshot every poll, so the store's record cache (store/cache.py) holds the fleet's records
when it takes over, and its first tick turns only the rows that changed into records (a cold
read of 10,000 nodes costs most of a second).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog

from tpucared.core.leadership.lease import Role
from tpucared.runtime.leader import LeaseKeeper

log = structlog.get_logger(__name__)

# How long a term that lost its lease waits for its calls in flight before cancelling them.
LOST_DRAIN_S = 1.0
# At the end, how long the lease keeper and the warm reads get to finish an attempt in flight
# (a database that does not answer must not hold up the stop), and the lease's release.
BACKGROUND_GRACE_S = 0.5
RELEASE_WITHIN_S = 0.5

# One term: run the daemon until `lost` or `stopped`; its exit status.
Term = Callable[[asyncio.Event], Awaitable[int]]


async def lead_while_elected(
    keeper: LeaseKeeper,
    stopped: asyncio.Event,
    term: Term,
    *,
    warm: Callable[[], Awaitable[object]] | None = None,
    every: float = 10.0,
) -> int:
    """Stand by and lead by turns until `stopped` or a term ends on its own; the exit status.
    `warm`: what a standby reads every `every` seconds to keep its caches warm."""
    code = 0
    warming = keep_warm(keeper, stopped, warm, every) if warm is not None else _idle()
    try:
        async with _background(keeper.run(stopped), "lease"), _background(warming, "warm"):
            try:
                while await keeper.wait_leading(stopped):
                    lost = keeper.lost
                    code = await term(lost)
                    if not lost.is_set() or stopped.is_set():
                        break
                    log.info(
                        "term.standing_by", hint="another tpucared leads now", epoch=keeper.epoch
                    )
                    code = 0
            finally:
                stopped.set()  # the keeper's loop ends: a term that ended ends the process
    finally:
        # Also after a failure: a standby need not wait the lease out. Bounded: a database
        # that does not answer lets the lease expire by itself.
        try:
            async with asyncio.timeout(RELEASE_WITHIN_S):
                await keeper.release()
        except TimeoutError:
            log.warning("lease.release_timed_out", hint="it expires by itself")
    return code


async def keep_warm(
    keeper: LeaseKeeper,
    stopped: asyncio.Event,
    read: Callable[[], Awaitable[object]],
    every: float,
) -> None:
    """While this process stands by, `read` every `every` seconds (reads only: a standby
    writes nothing but its lease). A failed read is logged and tried again next time."""
    while not stopped.is_set():
        if keeper.role is Role.STANDBY:
            try:
                await read()
            except Exception as exc:  # a database briefly away: the next read tries again
                log.debug("standby.snapshot_failed", error=repr(exc))
        try:
            async with asyncio.timeout(every):
                await stopped.wait()
        except TimeoutError:
            pass


async def _idle() -> None:
    """The warm task of a caller that keeps nothing warm."""


@contextlib.asynccontextmanager
async def _background(coro: Awaitable[None], name: str) -> AsyncIterator[None]:
    task = asyncio.ensure_future(coro)
    task.set_name(name)
    try:
        yield
    finally:
        if not task.done():
            try:
                async with asyncio.timeout(BACKGROUND_GRACE_S):
                    await asyncio.shield(task)
            except TimeoutError:
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
