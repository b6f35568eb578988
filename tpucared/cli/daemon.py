"""`tpucared run` (the daemon) and `tpucared db upgrade`.

Exit statuses: 0 ok; 1 a runtime failure; 2 a config, usage or start-up problem a person must
fix, or a database tpucared must not use (`tpucared.store.errors.DatabaseError`, printed by
`tpucared.cli.main`: broken, newer than this tpucared, someone else's, or held by another
daemon). Heavy modules (aiohttp, SQLAlchemy, Alembic, asyncssh) are imported only once the
arguments and the config were found sound: a typo costs no import time. The daemon itself is
`tpucared.runtime.daemon.run_daemon`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import resource

from tpucared.cli.config_arg import DEFAULT_DB, load
from tpucared.errors import UsageError
from tpucared.runtime.errors import StartupError

# The daemon's heap is large and long-lived (at 10,000 nodes about a million objects: the
# records, the last lists), and every tick allocates a few hundred thousand short-lived ones;
# with the default thresholds full collections keep walking the whole heap, ~25% of the CPU
# (docs/benchmarks.md, "Scale"). Fewer young collections, and the start-up objects frozen out
# of the collector's reach, cost a little memory.
GC_THRESHOLD = 100_000


def raise_open_files_limit() -> None:
    """The soft limit on open files up to the hard one (systemd's default soft limit is 1024,
    its hard one 524288): the SSH pool keeps one connection per worker it probes, and sizes
    itself from this limit (launch/launcher.py `pool_size`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_command(args: argparse.Namespace) -> int:
    config = load(args)
    from tpucared.runtime.daemon import run_daemon

    gc.freeze()
    gc.set_threshold(GC_THRESHOLD)
    raise_open_files_limit()
    try:
        return asyncio.run(run_daemon(config))
    except StartupError as exc:
        raise UsageError(str(exc)) from None


def db_upgrade_command(args: argparse.Namespace) -> int:
    if args.db:
        db = args.db
    elif args.config:
        db = load(args).daemon.db
    else:
        db = os.environ.get("TPUCARED_DB") or DEFAULT_DB
    from tpucared.store.engine import shown
    from tpucared.store.lock import WriterLock
    from tpucared.store.migrate import upgrade_to_head

    with WriterLock(db):  # not under a running daemon: its schema would change beneath it
        revision = asyncio.run(upgrade_to_head(db))
    print(f"{shown(db)}: at revision {revision}")
    return 0
