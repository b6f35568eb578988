"""The daemon for commands that own their process: `tpucared demo` and `babysit`.

`run_engine` is `tpucared.runtime.daemon.run_daemon` (the one start-up path: migrate, open
the store, SSH key, credentials, workload runner, interrupted calls, /healthz) with the
stopping left to the caller: the daemon stops when the command's own `stop` event is set (a
demo's duration is up, Ctrl-C caught by the command) or when `until(tick)` says the job is
done (babysit: the slot is finished). Signals stay with the caller, which also has an
emulator to stop after the daemon.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tpucared.config import Config
from tpucared.runtime.clock import Clock
from tpucared.runtime.daemon import run_daemon
from tpucared.runtime.reconciler import Tick

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
    DatabaseError (another daemon holds the database, or it is broken) propagate, as from
    `run_daemon`."""
    return await run_daemon(
        config,
        clock=clock,
        stop=stop,
        until=until,
        serve_http=serve_http,
        handle_signals=False,
        drain_timeout=drain_timeout,
    )
