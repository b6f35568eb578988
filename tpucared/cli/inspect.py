"""`tpucared status` and `tpucared events`: read the database directly, read-only.

They never talk to the daemon, so they work while it is down, and while it runs: the
database is in WAL mode, so a reader sees the last committed state and never blocks a write.
The store is opened with `read_only=True`, which cannot create or change the file.

Exit codes follow the CLI's: 0 ok, 2 bad usage (a missing database file, a bad config, an
unknown fleet) or a database they must not read (not SQLite, corrupt, also a corrupt page met
half-way through a read, someone else's, at another schema revision: one line, never a
traceback; cli/readdb.py), 1 any other failure to read it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from tpucared.cli.readdb import reading, require_file
from tpucared.core.leadership.lease import Lease
from tpucared.core.ledger.cost import Prices
from tpucared.core.model.records import EventRecord
from tpucared.errors import UsageError
from tpucared.inspect.dbpath import resolve_db
from tpucared.inspect.events import event_json, event_line
from tpucared.inspect.ledger import ledgers, shares
from tpucared.inspect.status import status_document, status_lines
from tpucared.store import FleetStatus, Store
from tpucared.store.engine import shown
from tpucared.store.ledger_reads import LedgerRecords

FOLLOW_INTERVAL = 0.5  # seconds between polls of `events --follow`
PAGE = 500  # events per query
DEFAULT_EVENTS = 20  # `events` without --since or -n: the newest 20
GOODPUT_WINDOW = timedelta(days=1)  # status's GOODPUT: the ledger of the last 24 hours

T = TypeVar("T")


def status_command(args: argparse.Namespace) -> int:
    setting = _database(args)
    now = datetime.now(UTC)
    since = None if args.json else now - GOODPUT_WINDOW
    fleets, lease, records = _run(
        setting, lambda store: _status_and_lease(store, args.fleet, since)
    )
    if args.fleet and not fleets:
        raise UsageError(f"no fleet named {args.fleet!r} in {shown(setting)}")
    if args.json:
        text = json.dumps(status_document(fleets, now, lease), indent=2)
    elif fleets:
        goodput = shares(ledgers(records, Prices(), now, since)) if records else None
        text = "\n".join(status_lines(fleets, now, lease, goodput))
    else:
        text = f"no fleets in {shown(setting)} yet: the daemon records them when it starts"
    return _print(text)


async def _status_and_lease(
    store: Store, fleet: str | None, since: datetime | None
) -> tuple[list[FleetStatus], Lease | None, LedgerRecords | None]:
    """The fleets, the leader lease and (with `since`: the table's GOODPUT) the ledger's
    records since then, in one read transaction."""
    async with store.read() as r:
        records = await r.ledger(fleet, since=since) if since is not None else None
        return await r.status(fleet), await r.leader_lease(), records


def events_command(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 0:
        raise UsageError(f"-n must be 0 or more, got {args.limit}")
    setting = _database(args)
    render = event_json if args.json else event_line

    def emit(events: Iterable[EventRecord]) -> None:
        for e in events:
            sys.stdout.write(render(e) + "\n")
        sys.stdout.flush()  # `--follow` into a pipe must not sit in a buffer

    try:
        _run(setting, lambda store: _events(store, args, emit))
    except KeyboardInterrupt:
        return 0  # Ctrl-C is how `--follow` ends
    except BrokenPipeError:
        return _pipe_closed()
    return 0


async def _events(
    store: Store, args: argparse.Namespace, emit: Callable[[Iterable[EventRecord]], None]
) -> None:
    fleet: str | None = args.fleet
    if args.since is None:
        async with store.read() as r:
            limit = DEFAULT_EVENTS if args.limit is None else args.limit
            events = await r.events(None, limit, fleet)
            # Nothing printed: follow from the end of the log, not from its start.
            last = events[-1].id if events else await r.last_event_id()
        emit(events)
    else:
        last = args.since
        remaining = args.limit  # None: every event after --since
        while remaining is None or remaining > 0:
            size = PAGE if remaining is None else min(PAGE, remaining)
            events = await store.events(last, size, fleet)
            emit(events)
            if events:
                last = events[-1].id
            if remaining is not None:
                remaining -= len(events)
            if len(events) < size:
                break
    while args.follow:
        events = await store.events(last, PAGE, fleet)
        emit(events)
        if events:
            last = events[-1].id
        if len(events) < PAGE:  # caught up: wait for more
            await asyncio.sleep(FOLLOW_INTERVAL)


# -- shared -------------------------------------------------------------------------------------


def _database(args: argparse.Namespace) -> str:
    try:
        setting = resolve_db(args.db, args.config, os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    require_file(setting)
    return setting


def _run(setting: str, read: Callable[[Store], Awaitable[T]]) -> T:
    # A broken, foreign, empty, older or newer file, or a corrupt page met half-way: one line
    # (exit 2), never a traceback, and never a write (cli/readdb.py).
    return asyncio.run(reading(setting, read))


def _print(text: str) -> int:
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        return _pipe_closed()
    return 0


def _pipe_closed() -> int:
    """`tpucared events | head`: the reader left. Point stdout at /dev/null so the
    interpreter's final flush does not complain, and exit quietly."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0
