"""What the daemon shows of itself while it runs: /healthz, /metrics, /v1/status and the page.

Wires tpucared.runtime.telemetry.server and tpucared.runtime.telemetry.metrics to the runtime:
every TPU API request is counted (the client's `on_request` hook), every create attempt when it is
recorded, and after each completed tick the health clock moves and the metrics are refreshed from
the store. A metrics refresh that fails is logged and does not stop the reconcile loop: nodes
matter more than graphs. The server listens on `daemon.http`; a port that cannot be bound is a
start-up error (exit 2), like any other setting a person must fix.
"""

from __future__ import annotations

import structlog

from tpucared.config import Config
from tpucared.core.leadership.lease import Role
from tpucared.core.model.records import CreateAttemptRecord
from tpucared.core.planning.zone_health import unlistable_fleets
from tpucared.runtime.clock import Clock
from tpucared.runtime.errors import StartupError
from tpucared.runtime.page import Gate, Page, TokenMissing
from tpucared.runtime.reconciler import Tick
from tpucared.runtime.telemetry.metrics import DaemonMetrics
from tpucared.runtime.telemetry.server import Health, HttpServer, start_http, store_status
from tpucared.store import Store

log = structlog.get_logger(__name__)


# Addresses that listen on every interface.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "", "*"})


class Telemetry:
    def __init__(self, config: Config, store: Store, clock: Clock) -> None:
        self._config = config
        self._store = store
        self._clock = clock
        self.metrics = DaemonMetrics(prices=config.prices)  # the ledger's dollars
        self.health = Health.for_poll_interval(config.daemon.poll_interval)
        self.server: HttpServer | None = None
        self.page: Page | None = None
        self.role = Role.STANDBY  # until the lease keeper says otherwise (role_changed)
        self.metrics.set_role(False, None)

    def api_request(self, call: str, status: str, seconds: float) -> None:
        self.metrics.api_request(call, status, seconds)

    def create_attempt(self, attempt: CreateAttemptRecord) -> None:
        self.metrics.record_create(attempt)

    def role_changed(self, role: Role, epoch: int | None) -> None:
        """The lease keeper's hook: the role gauge, and what /healthz and /v1/status say."""
        self.role = role
        self.metrics.set_role(role is Role.LEADER, epoch)
        self.health.standby = role is Role.STANDBY
        if role is Role.LEADER:
            self.health.tick()  # a new term: its first tick gets the health grace again

    def database_unavailable(self, why: str) -> None:
        """A term ended because the database went away: /healthz fails saying so until a
        lease attempt is answered again."""
        self.health.database = why

    def lease_answered(self, role: Role, epoch: int) -> None:
        """After every lease attempt the database answered: a standby's sign of life, and the
        lease's epoch as the database has it (a standby shows the leader's)."""
        self.health.database = None
        self.metrics.set_role(role is Role.LEADER, epoch)
        if role is Role.STANDBY:
            self.health.tick()

    async def on_tick(self, tick: Tick) -> None:
        self.health.tick()
        self.health.set_zones_down(zones_down_reason(self._config, tick))
        self.metrics.observe_tick(tick.seconds, at=self._clock.now())
        self.metrics.set_zones(
            ((f.project, z) for f in self._config.fleets for z in f.zones),
            tick.zone_health,
            self._clock.now(),
        )
        try:
            await self.metrics.refresh(self._store, self._clock.now())
        except Exception:
            log.exception("metrics.refresh_failed", hint="the daemon carries on")

    async def start(self) -> None:
        daemon = self._config.daemon
        if daemon.http_host in WILDCARD_HOSTS:
            # /v1/status names every node and slot, /metrics the fleet's shape: no
            # authentication guards them, so reaching them from the network is a choice.
            log.warning(
                "http.exposed",
                hint="/v1/status and /metrics are unauthenticated (the page needs "
                "daemon.http_token_env): bind 127.0.0.1 or firewall the port",
                host=daemon.http_host,
                port=daemon.http_port,
            )
        try:
            gate = Gate.from_config(daemon.http_host, daemon.http_port, daemon.http_token_env)
        except TokenMissing as exc:
            raise StartupError(f"{self._config.path}: {exc}") from exc
        status = store_status(self._store, self._clock.now, lambda: self.role)
        self.page = Page(
            self._store, status, self._clock.now, str(self._config.path), self._config.prices
        )
        try:
            self.server = await start_http(
                daemon.http_host,
                daemon.http_port,
                health=self.health,
                metrics=self.metrics,
                status=status,
                page=self.page,
                gate=gate,
            )
        except OSError as exc:
            raise StartupError(
                f"{self._config.path}: daemon.http: cannot listen on "
                f"{daemon.http_host}:{daemon.http_port}: {exc.strerror or exc}"
            ) from exc

    async def stop(self) -> None:
        if self.page is not None:
            await self.page.stop()
        if self.server is not None:
            await self.server.stop()
            self.server = None


def zones_down_reason(config: Config, tick: Tick) -> str | None:
    """Why /healthz fails while ticks complete: the fleets none of whose zones can be listed."""
    down = unlistable_fleets(config.fleets, tick.zone_health)
    if not down:
        return None
    name, zones = down[0]
    last = zones[-1]
    more = f" (and {len(down) - 1} more fleets)" if len(down) > 1 else ""
    return (
        f"fleet {name}{more}: no zone can be listed for {last.failures} ticks "
        f"({', '.join(z.zone for z in zones)}): {last.error_text}"
    )
