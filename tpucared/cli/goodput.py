"""`tpucared goodput`: where every second of each slot went and what it cost (issue 42).

Read-only, like `status`: it opens the database with `cli/readdb.py` (never creates, migrates
or writes it; a database it must not read is one line, exit 2), reads the slots' records in
one transaction (`Reader.ledger`), and prints each slot's ledger (inspect/ledger.py) from its
first create, or from `--since`, to now. `-c FILE` also gives the `[prices]`; without a config
nothing is priced and the figures are in seconds and chip-hours.

    tpucared goodput -c fleet.toml [FLEET[/SLOT]] [--since 7d] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from datetime import UTC, datetime, timedelta

from tpucared.cli.readdb import reading, require_file
from tpucared.core.ledger.cost import Prices
from tpucared.core.model import durations
from tpucared.errors import UsageError
from tpucared.inspect.dbpath import CONFIG_ENV, resolve_db
from tpucared.inspect.ledger import goodput_document, goodput_lines, ledgers, since_text
from tpucared.store import Store
from tpucared.store.engine import shown
from tpucared.store.ledger_reads import LedgerRecords


def goodput_command(args: argparse.Namespace) -> int:
    fleet, slot = _target(args.target)
    now = datetime.now(UTC)
    since = now - _since(args.since) if args.since else None
    try:
        setting = resolve_db(args.db, args.config, os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    require_file(setting)
    prices = _prices(args.config or os.environ.get(CONFIG_ENV))

    async def read(store: Store) -> LedgerRecords:
        async with store.read() as r:
            return await r.ledger(fleet, slot, since)

    records = asyncio.run(reading(setting, read))
    if fleet is not None and not records.fleets:
        raise UsageError(f"no fleet named {fleet!r} in {shown(setting)}")
    if slot is not None and not records.slots:
        raise UsageError(f"fleet {fleet!r} has no slot {slot}")
    result = ledgers(records, prices, now, since)
    headline_from = since_text(since, result)
    if args.json:
        # One line: the C encoder (json's indenting one is pure Python, 5x slower on the
        # 500 MB a 10,000-slot month's intervals make); `jq .` reads it for a person.
        text = json.dumps(goodput_document(result, now, since, headline_from))
    else:
        text = "\n".join(goodput_lines(result, headline_from))
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the reader left: exit quietly
        os.close(devnull)
    return 0


def _target(text: str | None) -> tuple[str | None, int | None]:
    """FLEET or FLEET/SLOT."""
    if not text:
        return None, None
    fleet, sep, slot = text.partition("/")
    if not sep:
        return fleet, None
    if not slot.isdigit():
        raise UsageError(f"expected FLEET or FLEET/SLOT (a slot number), got {text!r}")
    return fleet, int(slot)


def _since(text: str) -> timedelta:
    try:
        return durations.parse(text)
    except ValueError as exc:
        raise UsageError(f"--since: {exc} (e.g. 7d, 12h, 30m)") from None


def _prices(config: str | None) -> Prices:
    if not config:
        return Prices()
    from tpucared.config import ConfigError, load_config

    try:
        return load_config(config).prices
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
