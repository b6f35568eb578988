"""One simulated worker's metadata server: what `instance/preempted` says, and when it changes.

A real VM asks `http://metadata.google.internal/computeMetadata/v1/...` (or
`$GCE_METADATA_HOST`, as google-auth and gcloud honour), with the header `Metadata-Flavor:
Google`. A spot or preemptible VM about to be preempted sees `instance/preempted` turn `TRUE`
(about 30 s before power-off); `?wait_for_change=true` holds the request until the value
differs from `last_etag` (or from the current value without one), up to `timeout_sec`.

`instance/upcoming-maintenance` shows the node's announced host-maintenance window
(`Node.maintenance`, emulator/maintenance.py); `instance/maintenance-event` is NONE, or
TERMINATE_ON_HOST_MAINTENANCE from the notice until the node is back (maintenance_run.py),
watched like `instance/preempted`. It also serves the instance attributes
(`instance/attributes/` lists them, `.../{key}` gives one): the node's metadata plus the
worker id keys a TPU VM has, `agent-worker-number` and `tpu-env` (`WORKER_ID: '0'`), per
`Node.metadata_attributes` (resources.py; on Compute Engine VMs, which of them is an emulator
option).

Each `SimulatedWorker` (worker.py) runs one on its own address and a port of its own, and puts
`GCE_METADATA_HOST=<ip>:<port>` in every command's environment. `notify()` wakes the waiting
requests once the emulator gives the node its notice (`Node.notice_at`, lifecycle.py) or its
maintenance-event changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from tpucared_emulator import maintenance
from tpucared_emulator.maintenance_run import run_of

if TYPE_CHECKING:
    from tpucared_emulator.resources import Node

PREEMPTED = "/computeMetadata/v1/instance/preempted"
UPCOMING_MAINTENANCE = "/computeMetadata/v1/instance/upcoming-maintenance"
MAINTENANCE_EVENT = "/computeMetadata/v1/instance/maintenance-event"
ATTRIBUTES = "/computeMetadata/v1/instance/attributes/"
MAX_WAIT_S = 3600.0  # the longest a wait_for_change request is held without a timeout_sec


class MetadataServer:
    def __init__(self, node: Node, host: str, worker_index: int = 0) -> None:
        self.node = node
        self.host = host
        self.worker_index = worker_index
        self.port = 0
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._closing = False

    @property
    def address(self) -> str:
        """What GCE_METADATA_HOST says: `ip:port`."""
        return f"{self.host}:{self.port}"

    def value(self) -> str:
        return "TRUE" if self.node.notice_at is not None else "FALSE"

    @staticmethod
    def etag(value: str) -> str:
        return hashlib.sha256(value.encode()).hexdigest()[:16]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(PREEMPTED, self._preempted)
        app.router.add_get(UPCOMING_MAINTENANCE, self._upcoming_maintenance)
        app.router.add_get(MAINTENANCE_EVENT, self._maintenance_event)
        app.router.add_get(ATTRIBUTES, self._attribute)
        app.router.add_get(ATTRIBUTES + "{key}", self._attribute)
        # A client that hangs up (the watcher stopped with its run) ends its waiting request.
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, handler_cancellation=True
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, 0)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])

    def notify(self) -> None:
        """The node's notice changed: answer every request waiting for a change."""
        self._changed.set()

    async def close(self) -> None:
        # Taken before the first await: two closes at once (a node's stop racing the hosts'
        # shutdown) would both clean the runner up, and aiohttp's cleanup is not reentrant.
        runner, self._runner = self._runner, None
        if runner is not None:
            self._closing = True
            self._changed.set()  # release the waiting requests first
            await runner.cleanup()

    async def _attribute(self, request: web.Request) -> web.Response:
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.\n")
        attributes = self.node.metadata_attributes(self.worker_index)
        key = request.match_info.get("key")
        if key is None:
            text = "".join(f"{name}\n" for name in sorted(attributes))
        elif key in attributes:
            text = attributes[key]
        else:
            return web.Response(status=404, text="Not Found\n")
        headers = {"Metadata-Flavor": "Google"}
        return web.Response(text=text, headers=headers, content_type="application/text")

    async def _upcoming_maintenance(self, request: web.Request) -> web.Response:
        """The node's announced window as JSON (emulator/maintenance.py), or the body the TPU
        page documents when there is none."""
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.\n")
        text = maintenance.metadata_value(self.node.maintenance)
        headers = {"Metadata-Flavor": "Google"}
        return web.Response(text=text, headers=headers, content_type="application/text")

    def maintenance_event(self) -> str:
        """`instance/maintenance-event` as this worker reads it (maintenance_run.py)."""
        return self.node.maintenance_event(self.worker_index)

    async def _maintenance_event(self, request: web.Request) -> web.Response:
        """NONE or TERMINATE_ON_HOST_MAINTENANCE, watched like `instance/preempted`. Every read
        counts as the VM having asked since its last event, which Google requires before it
        warns (getting-live-migration-notice; the key must be queried directly)."""
        if request.headers.get("Metadata-Flavor") == "Google":
            run_of(self.node).polled = True
        return await self._watched(request, self.maintenance_event)

    async def _preempted(self, request: web.Request) -> web.Response:
        return await self._watched(request, self.value)

    async def _watched(self, request: web.Request, current: Callable[[], str]) -> web.Response:
        """A key with `?wait_for_change=true` (held until its value's ETag differs from
        `last_etag`, or from the current value's, up to `timeout_sec`) and its ETag."""
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.\n")
        value = current()
        if request.query.get("wait_for_change", "").lower() == "true":
            since = request.query.get("last_etag", self.etag(value))
            try:
                timeout = float(request.query.get("timeout_sec", MAX_WAIT_S))
            except ValueError:
                return web.Response(status=400, text="bad timeout_sec\n")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + min(max(timeout, 0.0), MAX_WAIT_S)
            while self.etag(current()) == since and not self._closing:
                left = deadline - loop.time()
                if left <= 0:
                    break
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), left)
            value = current()
        return web.Response(
            text=value,
            headers={"ETag": self.etag(value), "Metadata-Flavor": "Google"},
            content_type="application/text",
        )
