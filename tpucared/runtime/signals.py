"""Two-stage shutdown on SIGTERM / SIGINT (uvicorn's and arq's pattern).

The first signal sets the stop event: the reconcile loop plans nothing more, cloud calls in
flight get a bounded time to finish and record their outcome (daemon.py), and the process
exits 0. The second signal exits at once, without cleanup: that is safe because every intent
is recorded before its call (a restart picks up where this run stopped). Stopping never
deletes or touches a node.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Iterable

import structlog

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
