"""The daemon's engine for commands that own their process: `tpucared demo` and `babysit`.

`run_engine` does what `tpucared.runtime.daemon.run_daemon` does (migrate the database, open
the store, make sure the SSH key exists, build the credentials and the API client, record the
calls a previous run left without an outcome, optionally serve /healthz, /metrics and
/v1/status, then run the `Daemon`), except for how it stops: `run_daemon` installs its own
SIGINT/SIGTERM handlers and stops only on a signal, while these commands stop when their own
event is set (a demo's duration is up, Ctrl-C caught by the command) or when `until(tick)`
says the job is done (babysit: the slot is finished). Signals stay with the caller, which also
has an emulator to stop after the daemon.

If `run_daemon` grows `stop=` and `until=` parameters, this module can shrink to a call to it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from tpucared.config import Config
from tpucared.gcp import TpuClient
from tpucared.runtime.calls import record_interrupted_calls
from tpucared.runtime.clock import Clock, SystemClock
from tpucared.runtime.daemon import Daemon
from tpucared.runtime.reconciler import Tick
from tpucared.runtime.startup import node_template, token_source
from tpucared.runtime.telemetry import Telemetry
from tpucared.store import Store

log = structlog.get_logger(__name__)

# Calls in flight at stop get this long to record their outcome (`tpucared run`: 30 s). A
# person waiting at a terminal, and an emulator that answers in milliseconds: shorter.
DRAIN_TIMEOUT_S = 10.0


async def run_engine(
    config: Config,
    *,
    stop: asyncio.Event,
    until: Callable[[Tick], bool] | None = None,
    serve_http: bool = True,
    clock: Clock | None = None,
    drain_timeout: float = DRAIN_TIMEOUT_S,
) -> int:
    """Run the daemon over `config` until `stop` is set or `until(tick)` is true; returns its
    exit status (0 after a requested stop, 1 when a part of it died). StartupError and
    MigrationError propagate, as from `run_daemon`."""
    from tpucared.store.migrate import upgrade_to_head  # Alembic: only commands that migrate

    await upgrade_to_head(config.daemon.db)
    clock = clock or SystemClock()
    store = Store.open(config.daemon.db)
    telemetry = Telemetry(config, store, clock)
    client: TpuClient | None = None
    relay: asyncio.Task[None] | None = None
    try:
        template = node_template(config)
        tokens = await asyncio.to_thread(token_source, config)
        client = TpuClient(
            config.gcp.endpoint, token_source=tokens, on_request=telemetry.api_request
        )
        daemon = Daemon(
            config,
            store,
            client,
            template,
            clock=clock,
            on_tick=telemetry.on_tick,
            on_attempt=telemetry.create_attempt,
        )
        await record_interrupted_calls(store, clock)
        if serve_http:
            await telemetry.start()
        relay = asyncio.create_task(_relay(stop, daemon.stop), name="engine-stop")
        code = await daemon.run(until=until, drain_timeout=drain_timeout)
    finally:
        if relay is not None:
            relay.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relay
        await telemetry.stop()
        if client is not None:
            await client.aclose()
        await store.close()
    log.info("engine stopped", exit_code=code)
    return code


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()
