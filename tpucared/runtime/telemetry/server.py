"""The daemon's small HTTP server: liveness, Prometheus metrics and the status document.

- `GET /healthz`: 200 `ok` while the reconcile loop completes ticks (`ok: standby` while a
  standby's lease attempts are answered: it does not tick); 503 with the reason
  once none completed for `Health.threshold` seconds (a hung or crash-looping tick), and
  while no zone of some fleet could be listed for `UNREACHABLE_AFTER` ticks in a row (the
  API is unreachable: the daemon runs but can keep nothing alive). Docker's HEALTHCHECK and
  a systemd watchdog script can poll it.
- `GET /metrics`: the Prometheus text format of `DaemonMetrics` (docs/metrics.md).
- `GET /v1/status`: the `tpucared status --json` document (`tpucared.inspect.status`).
- the page (`/`, `/slots`, `/v1/overview`, `/v1/slots`: tpucared.runtime.page), when given.

It listens on `daemon.http` ("127.0.0.1:9464" by default): loopback, because the endpoints
are unauthenticated. The runtime starts it next to the reconcile loop:

    health = Health.for_poll_interval(config.daemon.poll_interval)
    server = await start_http(config.daemon.http_host, config.daemon.http_port,
                              health=health, metrics=metrics, status=store_status(store))
    ...                                  # health.tick() after each completed tick
    await server.stop()
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from aiohttp import web

from tpucared.core.leadership.lease import Role
from tpucared.inspect.status import status_document
from tpucared.runtime.page import Gate, Page, middleware
from tpucared.runtime.telemetry.metrics import CONTENT_TYPE, DaemonMetrics
from tpucared.store import Store

log = structlog.get_logger(__name__)

StatusSource = Callable[[], Awaitable[dict[str, Any]]]

# Unhealthy after this many poll intervals without a completed tick, but never sooner than
# MIN_THRESHOLD: one slow tick (API retries with backoff) is not a dead daemon.
DEFAULT_TICKS = 3.0
MIN_THRESHOLD = 30.0


class Health:
    """Whether the reconcile loop is alive: it calls `tick()` after every completed tick."""

    def __init__(self, threshold: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if threshold <= 0:
            raise ValueError(f"health threshold must be positive, got {threshold}")
        self.threshold = threshold
        self._clock = clock
        # Before the first tick, the daemon gets the same grace from its start.
        self.started_at = clock()
        self.last_tick_at: float | None = None
        # Why the daemon cannot do its job although it ticks (no zone of a fleet listable).
        self.zones_down: str | None = None
        # The leader lease (runtime/leader.py): a standby does not tick; its lease attempts
        # that the database answered move `last_tick_at` instead, and "ok" says "standby".
        self.standby = False
        # Why the last term ended, while the database has not answered since (telemetry).
        self.database: str | None = None

    @classmethod
    def for_poll_interval(
        cls,
        poll_interval: float,
        *,
        ticks: float = DEFAULT_TICKS,
        clock: Callable[[], float] = time.monotonic,
    ) -> Health:
        return cls(max(ticks * poll_interval, MIN_THRESHOLD), clock=clock)

    def tick(self) -> None:
        self.last_tick_at = self._clock()

    def set_zones_down(self, reason: str | None) -> None:
        """Unhealthy with `reason` until called again with None (the runtime, each tick)."""
        self.zones_down = reason

    def check(self) -> tuple[bool, str]:
        """(healthy, reason); the reason says how long since the last tick, or which fleet
        cannot list any of its zones."""
        if self.last_tick_at is None:
            age = self._clock() - self.started_at
            what = "no reconcile tick completed since the start"
        else:
            age = self._clock() - self.last_tick_at
            what = "the last reconcile tick completed"
        if self.standby:
            what = "no lease attempt answered" if self.last_tick_at is None else what
            what = what.replace("reconcile tick completed", "lease attempt answered")
        if self.database is not None:
            return False, f"database unavailable, standing by: {self.database}"
        if age <= self.threshold:
            if self.standby:
                return True, "ok: standby"
            if self.zones_down is not None:
                return False, self.zones_down
            return True, "ok"
        return False, f"{what} {age:.1f}s ago (threshold {self.threshold:.1f}s)"


def store_status(
    store: Store,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    role: Callable[[], Role] | None = None,
) -> StatusSource:
    """The `status` source for `start_http`: the CLI's document, read from `store`, with the
    serving daemon's `role` in `leader.role`."""

    async def read() -> dict[str, Any]:
        async with store.read() as r:
            fleets, lease = await r.status(), await r.leader_lease()
        return status_document(fleets, clock(), lease, None if role is None else role())

    return read


@dataclass
class HttpServer:
    runner: web.AppRunner
    host: str
    port: int  # the bound port (useful when asked for port 0)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        await self.runner.cleanup()


# A connection that sends no complete request (or stays idle between two) this long is closed.
IDLE_TIMEOUT_S = 10.0


async def start_http(
    host: str,
    port: int,
    *,
    health: Health,
    metrics: DaemonMetrics,
    status: StatusSource,
    idle_timeout: float = IDLE_TIMEOUT_S,
    page: Page | None = None,
    gate: Gate | None = None,
) -> HttpServer:
    """`page`: the page's routes (runtime/page/), behind `gate` (its token and loopback rule)."""
    app = web.Application(middlewares=[middleware(gate)] if gate is not None else [])
    app.router.add_get("/healthz", _healthz(health))
    app.router.add_get("/metrics", _metrics(metrics))
    app.router.add_get("/v1/status", _status(status))
    if page is not None:
        page.add_routes(app)
    # aiohttp's keep-alive timeout also bounds a connection that has not sent a whole request
    # yet: without it, 300 connections trickling headers held 300 descriptors for an hour.
    runner = web.AppRunner(app, keepalive_timeout=idle_timeout)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()  # e.g. the port is taken: leave nothing half-open
        raise
    bound_port = int(runner.addresses[0][1])
    log.info("http.serving", host=host, port=bound_port)
    return HttpServer(runner, host, bound_port)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _healthz(health: Health) -> Handler:
    async def handle(_request: web.Request) -> web.StreamResponse:
        ok, reason = health.check()
        return web.Response(status=200 if ok else 503, text=reason + "\n")

    return handle


def _metrics(metrics: DaemonMetrics) -> Handler:
    async def handle(_request: web.Request) -> web.StreamResponse:
        # CONTENT_TYPE carries a version and charset, which `content_type=` would refuse.
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    return handle


def _status(status: StatusSource) -> Handler:
    async def handle(_request: web.Request) -> web.StreamResponse:
        try:
            document = await status()
        except Exception as exc:
            # A JSON error for scripts, rather than aiohttp's HTML page; the log has the trace.
            log.exception("http.status_failed")
            return web.json_response({"error": f"status read failed: {exc}"}, status=500)
        return web.json_response(document)

    return handle
