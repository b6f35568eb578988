"""`tpucared demo`: the emulator, the daemon and a scenario of preemptions, in one process.

    tpucared demo [--duration SECONDS] [--seed N]

Order of things:
1. a temporary directory for the demo's files (database, daemon log, checkpoints), kept at
   the end so `tpucared status --db ...` can look at what happened;
2. the daemon's logs go to `daemon.log` there, so they do not drown the view;
3. the built-in emulator starts in this process, on free loopback ports, with simulated SSH
   workers and quick timing (a node is READY 3 s after its create);
4. the daemon's engine runs deploy/examples/emulator.toml pointed at it (example.py);
5. the scenario (scenario.py) injects preemptions, a host-maintenance window (with the
   in-VM `maintenance-event` notice scaled to `MAINTENANCE_NOTICE_S`) and a stockout through
   the control API,
   while the presenter (presenter.py) shows the database and the checkpoints once a second;
6. at `--duration`, or at Ctrl-C (SIGINT) or SIGTERM: the daemon stops (calls in flight get
   a few seconds to record their outcome), then the emulator stops, which kills every
   simulated worker and every process they ran; the summary follows, then each slot's
   ledger (where its time went, as `tpucared goodput` prints it). Exit status 0.
   A second signal cuts the daemon's drain short; a third exits at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import aiohttp

from tpucared.config import Config
from tpucared.core.model.records import NodePhase
from tpucared.demo.engine import run_engine
from tpucared.demo.example import DemoPlaces, ExampleMissing, demo_config, free_port
from tpucared.demo.presenter import (
    LiveView,
    PlainView,
    Reader,
    Reading,
    View,
    elapsed_text,
    ledger_lines,
    summarize,
)
from tpucared.demo.scenario import Injector, SlotKey, drive, schedule
from tpucared.logsetup import configure_logging
from tpucared.runtime.startup import StartupError
from tpucared.store import Store
from tpucared_emulator import running_emulator

REFRESH_S = 1.0
RIPE_STEPS = 3  # steps a run makes before the scenario preempts it
QUIET_END_S = 10.0  # no new step this close to the end: the last recovery is shown
# The emulator's lifecycle: quick enough to watch several recoveries in a minute, slow enough
# to see each phase go by.
CREATE_S = 3.0
DELETE_S = 1.0
# The in-VM `maintenance-event` notice this long before a window (Google: 60 s), scaled like the
# rest, so that the demo's window (announced 8 s ahead) is met by the daemon's `on_maintenance`
# first, as a window announced days ahead would be, not by the in-VM notice.
MAINTENANCE_NOTICE_S = 2.0


class DemoError(Exception):
    """Something a person must fix before the demo can run (exit status 2)."""


@dataclass(frozen=True)
class DemoOptions:
    duration: float | None = None  # None: until Ctrl-C
    seed: int = 1
    live: bool | None = None  # None: a live view when `out` is a TTY
    log_level: str = "info"
    log_json: bool = False


def demo_command(args: argparse.Namespace) -> int:
    if args.duration is not None and args.duration <= 0:
        raise DemoError(f"--duration must be more than 0 seconds, got {args.duration:g}")
    options = DemoOptions(
        duration=args.duration,
        seed=args.seed,
        log_level=args.log_level,
        log_json=args.log_format == "json",
    )
    return run_demo(options, sys.stdout)


def run_demo(options: DemoOptions, out: TextIO) -> int:
    """The whole demo; returns the exit status. Logs go to a file for its duration."""
    directory = Path(tempfile.mkdtemp(prefix="tpucared-demo-"))
    log_path = directory / "daemon.log"
    with open(log_path, "a", encoding="utf-8") as log_file:
        configure_logging(level=options.log_level, json=options.log_json, stream=log_file)
        try:
            return asyncio.run(_run(options, out, directory, log_path))
        finally:
            # Nothing may write to the file once it is closed; stderr is still there.
            configure_logging(level="warning", json=options.log_json, stream=sys.stderr)


async def _run(options: DemoOptions, out: TextIO, directory: Path, log_path: Path) -> int:
    live = out.isatty() if options.live is None else options.live
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = _Signals(stop)
    signals.install(loop)
    try:
        ssh_port = free_port()
        async with running_emulator(
            create_seconds=CREATE_S,
            delete_seconds=DELETE_S,
            maintenance_event_lead_seconds=MAINTENANCE_NOTICE_S,
            ssh_hosts=True,
            ssh_port=ssh_port,
            seed=options.seed,
        ) as emulator:
            places = DemoPlaces(
                endpoint=emulator.url,
                ssh_port=ssh_port,
                db=directory / "state.db",
                http_port=free_port(),
                checkpoints=directory / "checkpoints",
            )
            try:
                config = demo_config(places)
            except ExampleMissing as exc:
                raise DemoError(str(exc)) from None
            header = _header(options, config, places, emulator.url, log_path)
            view: View = LiveView(out, header) if live else PlainView(out)
            signals.say = view.say
            if not live:
                for line in header:
                    view.say(line)
            code = await _show(options, config, places, emulator.url, view, stop, signals)
            view.say("stopping the emulator: its workers and every process they ran")
        # The emulator is down: every simulated worker and its processes are gone.
        lines = ["the daemon never created its database: nothing to summarize"]
        ledger: list[str] = []
        if await asyncio.to_thread(places.db.exists):
            async with Store.open(places.db, read_only=True) as store:
                lines = (await summarize(store, places.checkpoints)).lines()
                ledger = await ledger_lines(store, config.prices, datetime.now(UTC))
    finally:
        signals.remove(loop)
    view.close()
    out.write("\nsummary\n" + "".join(f"  {line}\n" for line in lines))
    if ledger:
        out.write("\nwhere the time went (tpucared goodput)\n")
        out.write("".join(f"  {line}\n" if line else "\n" for line in ledger))
    out.write(
        f"\nkept in {directory}: the database, the daemon log and the checkpoints\n"
        f"  tpucared status --db {places.db}\n"
        f"  tpucared events --db {places.db} -n 50\n"
    )
    out.flush()
    return code


def _header(
    options: DemoOptions, config: Config, places: DemoPlaces, endpoint: str, log_path: Path
) -> list[str]:
    fleets = " + ".join(f"{f.size} x {f.accelerator_type} ({f.name})" for f in config.fleets)
    until = "until Ctrl-C"
    if options.duration is not None:
        until = f"for {elapsed_text(options.duration)}, or until Ctrl-C"
    return [
        f"tpucared demo: the daemon keeps {fleets} alive on an emulated cloud, {until}",
        f"  emulator   {endpoint}  (workers: SSH on 127.x.y.z:{places.ssh_port})",
        f"  config     {config.path} (endpoint, ports, db and CHECKPOINT_DIR replaced)",
        f"  database   {places.db}",
        f"  status     http://127.0.0.1:{places.http_port}/v1/status",
        f"  page       http://127.0.0.1:{places.http_port}/",
        f"  daemon log {log_path}",
    ]


async def _show(
    options: DemoOptions,
    config: Config,
    places: DemoPlaces,
    endpoint: str,
    view: View,
    stop: asyncio.Event,
    signals: _Signals,
) -> int:
    """Run the engine, the scenario and the view until the end; the engine's exit status."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    engine = asyncio.create_task(run_engine(config, stop=stop), name="demo-engine")
    signals.engine = engine
    reader = Reader(str(places.db), places.checkpoints)
    steps = schedule(config.fleets, options.seed)
    quiet = None if options.duration is None else options.duration - QUIET_END_S
    watched = _Watched()
    try:
        async with aiohttp.ClientSession() as session:
            injector = Injector(session, endpoint, config.gcp.project)
            scenario = asyncio.create_task(
                drive(steps, injector, stop, view.injected, ripe=watched.ripe, quiet_after=quiet),
                name="demo-scenario",
            )
            try:
                await _watch(options, stop, engine, reader, view, started, watched)
            finally:
                stop.set()
                scenario.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await scenario
        code = await _engine_result(engine, view)
        reading = await reader.read()  # the last events: the daemon's stop
        if reading is not None:
            view.show(reading, loop.time() - started)
        if code != 0:
            view.say(f"the daemon stopped with status {code}: see {places.db.parent}/daemon.log")
    finally:
        await reader.close()
        if not engine.done():
            engine.cancel()
            with contextlib.suppress(BaseException):
                await engine
    return code


async def _watch(
    options: DemoOptions,
    stop: asyncio.Event,
    engine: asyncio.Task[int],
    reader: Reader,
    view: View,
    started: float,
    watched: _Watched,
) -> None:
    """Refresh the view until the duration is up, a signal came, or the engine ended."""
    loop = asyncio.get_running_loop()
    end = None if options.duration is None else started + options.duration
    while not stop.is_set() and not engine.done():
        reading = await reader.read()
        if reading is not None:
            watched.last = reading
            view.show(reading, loop.time() - started)
        wait = REFRESH_S if end is None else min(REFRESH_S, end - loop.time())
        if wait <= 0:
            view.say(f"[demo +{elapsed_text(loop.time() - started)}] time is up: stopping")
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_first(stop, engine), wait)


@dataclass
class _Watched:
    """The latest reading, for the scenario to time its preemptions by."""

    last: Reading | None = None

    def ripe(self, key: SlotKey) -> bool:
        """The slot's current attempt runs on a READY node and has checkpointed
        `RIPE_STEPS` steps since it started."""
        if self.last is None:
            return False
        status = next(
            (s for f in self.last.fleets for s in f.slots if (s.slot.fleet, s.slot.index) == key),
            None,
        )
        if status is None or status.node is None or status.node.phase is not NodePhase.READY:
            return False
        attempt = status.last_attempt
        if attempt is None or attempt.outcome is not None:
            return False
        p = self.last.progress.get(key)
        return (
            p is not None and p.attempt == attempt.number and p.step - p.resumed_from >= RIPE_STEPS
        )


async def _first(stop: asyncio.Event, engine: asyncio.Task[int]) -> None:
    """Returns when `stop` is set or the engine has ended (the engine is not cancelled)."""
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({waiter, engine}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


async def _engine_result(engine: asyncio.Task[int], view: View) -> int:
    try:
        return await engine
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # this task is being cancelled, not only the engine
        view.say("the daemon's drain was cut short by a second signal")
        return 0
    except StartupError as exc:
        raise DemoError(str(exc)) from None


class _Signals:
    """Ctrl-C / SIGTERM: the first stops the demo, the second cuts the daemon's drain short
    (the emulator is still stopped, so no worker process survives), the third exits at once."""

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self.engine: asyncio.Task[int] | None = None
        self.say: Callable[[str], None] = lambda text: print(text, file=sys.stderr)
        self._count = 0

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._handle, sig)

    def remove(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

    def _handle(self, sig: signal.Signals) -> None:
        self._count += 1
        if self._count == 1:
            self.say(f"{sig.name}: stopping the daemon, then the emulator (again: faster)")
            self._stop.set()
        elif self._count == 2 and self.engine is not None and not self.engine.done():
            self.say(f"{sig.name}: cutting the daemon's drain short")
            self.engine.cancel()
        else:
            os._exit(128 + int(sig))
