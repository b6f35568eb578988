"""EmulatorThread: an emulator on its own event loop in a background thread, for sync callers.

Synchronous code (Google's official client, CLI commands that call `asyncio.run`, sync tests)
cannot share the event loop an async emulator runs on: while the caller blocks, that loop does
not run. This runs an `EmulatorServer` on a private loop in a daemon thread instead:

    with EmulatorThread(EmulatorOptions(create_seconds=0.2)) as emulator:
        TpuClient(..., client_options={"api_endpoint": emulator.url})

`call(fn)` runs `fn(state)` on the emulator's loop and returns its result, which is the only
safe way to touch the state from another thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

from tpucared_emulator.host_hook import WorkerHosts
from tpucared_emulator.options import EmulatorOptions
from tpucared_emulator.server import EmulatorServer
from tpucared_emulator.state import EmulatorState

T = TypeVar("T")
START_TIMEOUT_S = 30.0


class EmulatorThread:
    def __init__(
        self,
        options: EmulatorOptions | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        worker_hosts: WorkerHosts | None = None,
    ) -> None:
        self.server = EmulatorServer(options, worker_hosts=worker_hosts)
        self._host = host
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        """Start serving; returns once the port is bound (or raises what start() raised)."""
        if self._thread is not None:
            raise RuntimeError("emulator thread already started")
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(started,), name="tpu-emulator", daemon=True
        )
        self._thread.start()
        try:
            started.result(timeout=START_TIMEOUT_S)
        except BaseException:
            self._thread.join(timeout=START_TIMEOUT_S)
            self._thread = None
            raise

    def _run(self, started: concurrent.futures.Future[None]) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopped = asyncio.Event()
            try:
                await self.server.start(self._host, self._port)
            except BaseException as exc:
                started.set_exception(exc)
                return
            started.set_result(None)
            try:
                await self._stopped.wait()
            finally:
                await self.server.stop()

        asyncio.run(serve())

    def call(self, fn: Callable[[EmulatorState], T]) -> T:
        """Run `fn(state)` on the emulator's loop and return its result."""
        if self._loop is None:
            raise RuntimeError("emulator thread not started")

        async def run() -> T:
            return fn(self.server.state)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(START_TIMEOUT_S)

    def stop(self) -> None:
        if self._thread is None or self._loop is None or self._stopped is None:
            return
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(timeout=START_TIMEOUT_S)
        self._thread = None
        self._loop = None

    def __enter__(self) -> EmulatorThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
