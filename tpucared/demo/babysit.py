"""`tpucared babysit`: one slice running one command until it is done, no config file.

    tpucared babysit NAME --zone Z --type T [--spot|--preemptible] [--setup FILE]
                     [--retries N] [--keep] [--project P] [--endpoint URL]
                     [--credentials X] [--db PATH] ... -- CMD

Levanter's babysitting, on tpucared's engine: a one-fleet config is built in memory (fleet
NAME, size 1, workload `run = CMD`, `setup` = the contents of FILE, `restart = on-failure`
with `max_failures = N`, `on_success = delete` unless --keep) and the same daemon and
database as `tpucared run` keep the slice alive in the foreground: a preempted node is
replaced and the command relaunched on it (TPUCARED_RUN_ID stays, TPUCARED_ATTEMPT grows),
a failed command is relaunched up to N times.

It ends when the slot is done, with the workload's exit status: 0 when an attempt exited 0
on every worker; the last non-zero exit code when the failures are exhausted. Without
--keep it waits until the node is deleted first. Ctrl-C (or SIGTERM) stops the daemon and,
unless --keep, deletes the node (`tpucared down` for this fleet) and exits 130.

What it prints on stdout: the daemon's events (as `tpucared events` does) and the command's
output on worker 0 (as `tpucared logs NAME/0 --follow` does); the daemon's logs go to stderr
at warning level (all of them with --verbose). Running it again with the
same NAME and database resumes a run that was interrupted, and refuses one that finished.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import structlog

from tpucared.config import Config, ConfigError, parse_config
from tpucared.core.model.records import AttemptOutcome, NodePhase, WorkloadAttemptRecord
from tpucared.demo.engine import run_engine
from tpucared.demo.presenter import PlainView, Reader
from tpucared.logsetup import configure_logging
from tpucared.runtime.reconciler import Tick
from tpucared.runtime.startup import StartupError
from tpucared.store import Snapshot, Store
from tpucared.store.engine import shown

log = structlog.get_logger(__name__)

OWNER = "babysit"  # the tpucared-owner label of babysat nodes
SLOT = 0
INTERRUPTED = 130
DOWN_TIMEOUT_S = 600.0
REFRESH_S = 0.5
LOG_LINES = 10_000  # of an attempt's log shown when babysit starts following it
# Where babysit keeps its databases (and the SSH key next to them) unless --db says.
STATE_HOME = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")


class BabysitError(Exception):
    """Bad usage or a problem a person must fix; printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tpucared babysit",
        description="Keep one TPU slice running CMD until it succeeds (or its retries are "
        "spent), replacing the slice when it is preempted. No config file.",
        usage="tpucared babysit NAME --zone Z --type T [options] -- CMD",
    )
    p.add_argument("name", metavar="NAME", help="the fleet's name; the node is NAME-0")
    p.add_argument("--zone", required=True, help="e.g. us-central2-b")
    p.add_argument(
        "--type", dest="accelerator_type", metavar="TYPE", required=True, help="e.g. v4-32"
    )
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--spot", action="store_const", dest="capacity", const="spot")
    kind.add_argument("--preemptible", action="store_const", dest="capacity", const="preemptible")
    p.add_argument("--setup", metavar="FILE", help="a shell script run once per node first")
    p.add_argument(
        "--retries",
        type=int,
        default=3,
        metavar="N",
        help="relaunches after failures, not preemptions (default 3)",
    )
    p.add_argument("--keep", action="store_true", help="keep the node when it ends")
    p.add_argument(
        "--project",
        default=os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT"),
        help="default: $GOOGLE_CLOUD_PROJECT",
    )
    p.add_argument("--endpoint", default="https://tpu.googleapis.com")
    p.add_argument(
        "--credentials",
        default="default",
        help='"default" (ADC), a key file, or "none" (emulators only)',
    )
    p.add_argument(
        "--db", help=f"the state database (default {STATE_HOME}/tpucared/babysit-NAME.db)"
    )
    p.add_argument("--runtime-version", default="tpu-ubuntu2204-base")
    p.add_argument("--ssh-user", default="tpucared")
    p.add_argument("--ssh-port", type=int, default=22)
    p.add_argument(
        "--internal-ip", action="store_true", help="reach the workers at their internal IPs"
    )
    p.add_argument(
        "--poll-interval",
        help='how often the cloud is listed (default "10s"; "1s" with --credentials none)',
    )
    p.add_argument("-v", "--verbose", action="store_true", help="the daemon's logs on stderr")
    return p


def split_command(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """(babysit's own arguments, CMD): CMD is everything after the first `--` as one shell
    string (a single word is used as is, e.g. `-- 'python3 train.py > out'`); None if absent."""
    if "--" not in argv:
        return list(argv), None
    cut = list(argv).index("--")
    words = list(argv[cut + 1 :])
    if not words:
        return list(argv[:cut]), None
    return list(argv[:cut]), words[0] if len(words) == 1 else shlex.join(words)


def babysit_config(args: argparse.Namespace, command: str) -> Config:
    """The one-fleet config, validated by the config file's own rules."""
    if not args.project:
        raise BabysitError("--project is required (or set GOOGLE_CLOUD_PROJECT)")
    emulator = args.credentials == "none"
    setup = None
    if args.setup:
        try:
            setup = Path(args.setup).read_text(encoding="utf-8")
        except OSError as exc:
            raise BabysitError(f"--setup {args.setup}: {exc.strerror or exc}") from None
    db = args.db or str(STATE_HOME / "tpucared" / f"babysit-{args.name}.db")
    workload: dict[str, Any] = {
        "run": command,
        "restart": "on-failure",
        "max_failures": args.retries,
        "on_success": "keep" if args.keep else "delete",
    }
    if setup is not None and setup.strip():
        workload["setup"] = setup
    data: dict[str, Any] = {
        "daemon": {
            "db": db,
            "owner": OWNER,
            "poll_interval": args.poll_interval or ("1s" if emulator else "10s"),
        },
        "gcp": {
            "project": args.project,
            "endpoint": args.endpoint,
            "credentials": args.credentials,
        },
        "ssh": {"user": args.ssh_user, "port": args.ssh_port, "internal_ip": args.internal_ip},
        "fleet": [
            {
                "name": args.name,
                "zones": [args.zone],
                "accelerator_type": args.accelerator_type,
                "runtime_version": args.runtime_version,
                "size": 1,
                "capacity": args.capacity or "on-demand",
                "workload": workload,
            }
        ],
    }
    try:
        # Relative paths (--db, --credentials) are relative to the working directory.
        return parse_config(data, Path.cwd() / "tpucared-babysit")
    except ConfigError as exc:
        raise BabysitError(str(exc)) from None


def babysit_command(args: argparse.Namespace) -> int:
    own, command = split_command(args.passthrough_args)
    options = build_parser().parse_args(own)  # --help, and usage errors (exit 2)
    if command is None:
        raise BabysitError("missing `-- CMD`: the command to run, after a `--`")
    config = babysit_config(options, command)
    level = args.log_level if options.verbose else "warning"
    configure_logging(level=level, json=args.log_format == "json", stream=sys.stderr)
    try:
        return asyncio.run(babysit(config, keep=options.keep, out=sys.stdout))
    except StartupError as exc:
        raise BabysitError(str(exc)) from None


async def babysit(config: Config, *, keep: bool, out: TextIO) -> int:
    """Run until the slot is done; the workload's exit status (130 when interrupted)."""
    from tpucared.runtime.down import down, up
    from tpucared.runtime.resources import migrated_beside_a_daemon

    name = config.fleets[0].name
    view = _FlagView(out)
    # Its daemon (run_engine) takes the writer lock; this first look must not migrate a
    # database another daemon holds beneath it.
    await migrated_beside_a_daemon(config.daemon.db)
    before = await _before(config, name)
    if before.finished is not None:
        raise BabysitError(
            f"{name} already finished in {shown(config.daemon.db)} ({before.finished}); "
            "pick another NAME or --db to run again"
        )
    if before.down:
        await up(config, [name])
        view.say(f"{name}: wanted again after an interrupted babysit")
    spec = config.fleets[0]
    view.say(
        f"babysitting {name}: {spec.accelerator_type} in {spec.zones[0]}, "
        f"database {shown(config.daemon.db)}"
    )
    stop = asyncio.Event()
    interrupted = _on_signals(stop)
    engine = asyncio.create_task(
        run_engine(config, stop=stop, until=_slot_finished(name, keep), serve_http=False)
    )
    reader = Reader(config.daemon.db, last_event=before.last_event)
    output = _Output(config, name, out)
    try:
        await _follow(engine, reader, view, output)
        code = await engine
    finally:
        _restore_signals()
        if not engine.done():
            engine.cancel()
            with contextlib.suppress(BaseException):
                await engine
        await output.stop()
        reading = await reader.read()
        if reading is not None:
            view.show(reading, 0.0)
        await reader.close()
    if interrupted():
        if not keep:
            view.say(f"interrupted: deleting {name}'s node (--keep keeps it)")
            await down(config, [name], give_up_after=DOWN_TIMEOUT_S, report=view.say)
        return INTERRUPTED
    if code != 0:
        view.say(f"the daemon stopped with status {code} (see the logs on stderr)")
        return code
    return await _exit_status(config, name, view)


def _slot_finished(name: str, keep: bool) -> Callable[[Tick], bool]:
    """Done when the slot is, and (unless --keep) its node is gone: the planner deletes a
    finished slot's node by itself (on_success = delete)."""

    def until(tick: Tick) -> bool:
        slot = tick.snapshot.slots.get((name, SLOT))
        if slot is None or not slot.done:
            return False
        return keep or (name, SLOT, 0) not in tick.snapshot.nodes

    return until


async def _follow(
    engine: asyncio.Task[int], reader: Reader, view: PlainView, output: _Output
) -> None:
    while not engine.done():
        reading = await reader.read()
        if reading is not None:
            view.show(reading, 0.0)
            await output.follow(reader)
        await asyncio.wait({engine}, timeout=REFRESH_S)


# The daemon's messages name config keys; babysit has no config file, only flags.
_CONFIG_TO_FLAGS = (
    ("unless on_success = keep", "unless --keep"),
    ("(on_success = delete)", "(no --keep)"),
    ("on_success = keep", "--keep"),
)


def _in_flags(text: str) -> str:
    """`text` speaking of babysit's flags where it speaks of the config they stand for."""
    for config_words, flag_words in _CONFIG_TO_FLAGS:
        text = text.replace(config_words, flag_words)
    return text


class _FlagView(PlainView):
    """PlainView whose lines say `--keep` where the daemon's say `on_success = keep`."""

    def say(self, text: str) -> None:
        super().say(_in_flags(text))


class _Output:
    """The command's output: worker 0's log of the running attempt, streamed to `out` as
    `tpucared logs NAME/0 --follow` would, switching to each new attempt (a relaunch after a
    failure, or on the replacement of a preempted node). Best effort: what an attempt prints
    in the moment before its node is deleted may be missed, and a worker that cannot be
    reached is skipped (logged); the daemon's work does not depend on it."""

    def __init__(self, config: Config, name: str, out: TextIO) -> None:
        self._config = config
        self._name = name
        self._out = out
        self._following: int | None = None  # the attempt id
        self._task: asyncio.Task[None] | None = None

    async def follow(self, reader: Reader) -> None:
        if reader.store is None:
            return
        snapshot = await reader.store.load_snapshot()
        key = (self._name, SLOT)
        attempt, node = snapshot.last_attempts.get(key), snapshot.nodes.get((*key, 0))
        if (
            attempt is None
            or attempt.ended_at is not None
            or attempt.id == self._following
            or node is None
            or node.id != attempt.incarnation_id
            or node.phase is not NodePhase.READY
        ):
            return
        await self.stop()
        self._following = attempt.id
        self._task = asyncio.create_task(self._stream(snapshot, attempt.number))

    async def _stream(self, snapshot: Snapshot, attempt: int) -> None:
        from tpucared.runtime.workload.by_hand import CommandError, logs

        self._out.flush()
        errors = io.StringIO()
        try:
            await logs(self._config, snapshot, f"{self._name}/{SLOT}", follow=True,
                       lines=LOG_LINES, attempt=attempt, out=self._out.buffer,
                       err=errors)  # fmt: skip
        except (CommandError, OSError) as exc:
            errors.write(str(exc))
        if errors.getvalue().strip():
            # Usually the node went away (preempted, deleted): the events say so already.
            log.info("babysit.output_unfollowed",
                        attempt=attempt, why=errors.getvalue().strip())  # fmt: skip

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


@dataclass(frozen=True)
class _Before:
    """What the database remembers of NAME from an earlier babysit."""

    finished: str | None  # how it finished, if it did
    down: bool  # interrupted: its node was deleted and the fleet marked down
    last_event: int


async def _before(config: Config, name: str) -> _Before:
    async with Store.open(config.daemon.db, read_only=True) as store, store.read() as r:
        fleet = await r.fleet(name)
        slot = await r.slot(name, SLOT)
        attempts = await r.workload_attempts(name, SLOT, limit=1)
        last_event = await r.last_event_id()
    finished = None
    if slot is not None and slot.done:
        finished = _story(attempts[0]) if attempts else "done"
    return _Before(finished, fleet is not None and fleet.down, last_event)


async def _exit_status(config: Config, name: str, view: PlainView) -> int:
    async with Store.open(config.daemon.db, read_only=True) as store, store.read() as r:
        attempts = await r.workload_attempts(name, SLOT, limit=1)
    if not attempts:
        view.say(f"{name}: finished without running the command")
        return 1
    last = attempts[0]
    view.say(f"{name}: {_story(last)}")
    return exit_status(last)


def exit_status(attempt: WorkloadAttemptRecord) -> int:
    """0 for a success; else the attempt's non-zero exit code (worker 0's if it has one),
    or 1 when no worker reported one (killed, hung)."""
    if attempt.outcome is AttemptOutcome.SUCCEEDED:
        return 0
    codes = [attempt.exit_codes.get(0)] + [
        code for worker, code in sorted(attempt.exit_codes.items()) if worker != 0
    ]
    return next((c for c in codes if c), 1)


def _story(a: WorkloadAttemptRecord) -> str:
    outcome = a.outcome.value if a.outcome is not None else "running"
    codes = ", ".join(f"worker {w}: {c}" for w, c in sorted(a.exit_codes.items()))
    return f"attempt {a.number} {outcome}" + (f" (exit codes {codes})" if codes else "")


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _on_signals(stop: asyncio.Event) -> Callable[[], bool]:
    """The first SIGINT/SIGTERM stops the engine; a second exits at once. Returns whether a
    signal came."""
    loop = asyncio.get_running_loop()
    count = 0

    def handle(sig: signal.Signals) -> None:
        nonlocal count
        count += 1
        if count > 1:
            os._exit(128 + int(sig))
        stop.set()

    for sig in _SIGNALS:
        loop.add_signal_handler(sig, handle, sig)
    return lambda: count > 0


def _restore_signals() -> None:
    loop = asyncio.get_running_loop()
    for sig in _SIGNALS:
        loop.remove_signal_handler(sig)
