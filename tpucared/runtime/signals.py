"""Two-stage shutdown on SIGTERM / SIGINT (uvicorn's and arq's pattern).

The first signal sets the stop event: the reconcile loop plans nothing more, cloud calls in
flight get a bounded time to finish and record their outcome (daemon.py), and the process
exits 0. The second signal exits at once, without cleanup: that is safe because every intent
is recorded before its call (a restart picks up where this run stopped). Stopping never
deletes or touches a node.

How a stop travels once set: `relayed` passes one stop event on to another (the signals' to
the run's, the run's to each term's daemon), and `told_on_stop` tells systemd STOPPING=1 the
moment it is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterable

import structlog

from tpucared.runtime.sdnotify import TickNotifier

log = structlog.get_logger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TwoStageSignals:
    def __init__(
        self,
        stop: asyncio.Event,
        *,
        signals: Iterable[signal.Signals] = SIGNALS,
        exit_now: Callable[[int], None] = os._exit,
    ) -> None:
        self._stop = stop
        self._signals = tuple(signals)
        self._exit_now = exit_now
        self._received: signal.Signals | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> None:
        self._loop = asyncio.get_running_loop()
        for sig in self._signals:
            self._loop.add_signal_handler(sig, self.handle, sig)

    def remove(self) -> None:
        if self._loop is None:
            return
        for sig in self._signals:
            self._loop.remove_signal_handler(sig)
        self._loop = None

    def __enter__(self) -> TwoStageSignals:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def handle(self, sig: signal.Signals) -> None:
        if self._received is None:
            self._received = sig
            log.info(
                "signal.stopping",
                hint="no new work, letting calls in flight finish; send the signal again to exit "
                "at once (nodes are left running either way)",
                signal=sig.name,
            )
            self._stop.set()
            return
        log.warning("signal.second", hint="exiting at once", signal=sig.name)
        sys.stdout.flush()
        sys.stderr.flush()
        self._exit_now(128 + int(sig))


@contextlib.asynccontextmanager
async def told_on_stop(stop: asyncio.Event, systemd: TickNotifier) -> AsyncIterator[None]:
    """`systemd.stopping()` as soon as `stop` is set, or when the block ends at the latest."""
    if not systemd.notifier.enabled:
        yield
        return
    teller = asyncio.create_task(_tell_stopping(stop, systemd), name="daemon-sd-stopping")
    try:
        yield
    finally:
        teller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await teller
        systemd.stopping()


async def _tell_stopping(stop: asyncio.Event, systemd: TickNotifier) -> None:
    await stop.wait()
    systemd.stopping()


@contextlib.asynccontextmanager
async def relayed(source: asyncio.Event, target: asyncio.Event) -> AsyncIterator[None]:
    """Set `target` when `source` is set, while the block runs."""
    relay = asyncio.create_task(_relay(source, target), name="daemon-stop-relay")
    try:
        yield
    finally:
        relay.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relay


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()
