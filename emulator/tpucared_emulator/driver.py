"""The driver: runs the state's timers on the event loop and feeds the worker-hosts hook.

Two tasks. The timer task sleeps until the state's next timer is due (or until the state says
something changed), then calls `state.advance()`. The hosts task takes the host events that
transitions produced and awaits `WorkerHosts.start/stop` one at a time, in order, so a node's
hosts are never stopped before they were started, and a slow hook never delays timers.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from tpucared_emulator.host_hook import WorkerHosts
from tpucared_emulator.state import EmulatorState, HostEvent

log = structlog.get_logger(__name__)


class Driver:
    def __init__(self, state: EmulatorState, hosts: WorkerHosts) -> None:
        self.state = state
        self.hosts = hosts
        self._wake = asyncio.Event()
        self._events: asyncio.Queue[HostEvent] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self.state.on_change = self._wake.set
        self._tasks = [
            asyncio.create_task(self._run_timers(), name="emulator-timers"),
            asyncio.create_task(self._run_hosts(), name="emulator-hosts"),
        ]

    async def stop(self) -> None:
        self.state.on_change = lambda: None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.hosts.close()

    def _collect(self) -> None:
        for event in self.state.take_host_events():
            self._events.put_nowait(event)

    async def _run_timers(self) -> None:
        while True:
            self._wake.clear()
            self.state.advance()
            self._collect()
            due = self.state.next_due()
            timeout = None if due is None else max(0.0, due - self.state.now())
            # asyncio.timeout, not wait_for: on Python 3.11, wait_for swallows a cancellation
            # that arrives just as the wake-up does, and stop() then waits for this loop forever
            # (seen at teardown with instance timers firing, compute/).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    async def _run_hosts(self) -> None:
        while True:
            event = await self._events.get()
            hook = {
                "start": self.hosts.start,
                "notice": self.hosts.notice,
                "stop": self.hosts.stop,
            }[event.kind]
            try:
                await hook(event.node)
            except Exception:
                log.exception("emulator.hosts_hook_failed", kind=event.kind, node=event.node.name)
