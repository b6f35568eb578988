"""The commands of the runtime layer, as the CLI calls them: `run`, `plan`, `down`,
`db upgrade`. Each takes parsed arguments and returns an exit status; cli.py only parses.

Exit statuses: 0 ok; 1 a runtime failure; 2 a config, usage or start-up problem a person must
fix (raised as `UsageError` with a one-line message per problem naming the file and key).
Heavy modules (aiohttp, SQLAlchemy, Alembic, asyncssh) are imported only by the command that
needs them, after its arguments and config were found sound: a typo costs no import time.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shlex
import sys
from typing import TYPE_CHECKING

from tpucared.core.model import durations
from tpucared.errors import UsageError
from tpucared.runtime.errors import StartupError

if TYPE_CHECKING:
    from tpucared.config import Config

DEFAULT_DB = "/var/lib/tpucared/state.db"


def load(args: argparse.Namespace) -> Config:
    from tpucared.config import ConfigError, load_config, resolve_config_path

    try:
        return load_config(resolve_config_path(args.config))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


# The daemon's heap is large and long-lived (at 10,000 nodes about a million objects: the
# records, the last lists), and every tick allocates a few hundred thousand short-lived ones;
# with the default thresholds full collections keep walking the whole heap, ~25% of the CPU
# (docs/benchmarks.md, "Scale"). Fewer young collections, and the start-up objects frozen out
# of the collector's reach, cost a little memory.
GC_THRESHOLD = 100_000


def run_command(args: argparse.Namespace) -> int:
    config = load(args)
    from tpucared.runtime.daemon import run_daemon

    gc.freeze()
    gc.set_threshold(GC_THRESHOLD)
    try:
        return asyncio.run(run_daemon(config))
    except StartupError as exc:
        raise UsageError(str(exc)) from None


def plan_command(args: argparse.Namespace) -> int:
    config = load(args)
    from tpucared.cli.plan import preview

    try:
        plan = asyncio.run(preview(config))
    except StartupError as exc:
        raise UsageError(str(exc)) from None
    print(plan.to_json() if args.json else plan.render())
    return 0


def down_command(args: argparse.Namespace) -> int:
    config = load(args)
    try:
        timeout = durations.parse(args.timeout).total_seconds()
    except ValueError as exc:
        raise UsageError(f"--timeout: {exc}") from None
    names = list(args.fleets) or [f.name for f in config.fleets]
    if not names:
        raise UsageError(f"{config.path}: no fleets to take down")
    if not args.yes and not _confirm(names):
        raise UsageError("not confirmed; pass --yes to run without asking")
    from tpucared.runtime.down import down

    try:
        result = asyncio.run(down(config, names, give_up_after=timeout))
    except StartupError as exc:
        raise UsageError(str(exc)) from None
    fleets = ", ".join(result.fleets)
    if result.finished:
        print(
            f"down: {fleets}: {len(result.deleted)} node(s) deleted; nothing of ours is left. "
            "The fleet stays down (a running daemon will not recreate it)."
        )
    else:
        left = ", ".join(result.left) or "unknown (a zone could not be listed)"
        print(f"down: {fleets}: gave up after {args.timeout}; still there: {left}")
    return result.exit_code


def up_command(args: argparse.Namespace) -> int:
    """Undo `down`: the fleets are wanted again; a running daemon recreates their nodes."""
    config = load(args)
    names = list(args.fleets) or [f.name for f in config.fleets]
    from tpucared.runtime.down import up

    try:
        changed = asyncio.run(up(config, names))
    except StartupError as exc:
        raise UsageError(str(exc)) from None
    for name in names:
        state = "up again: its nodes will be recreated" if name in changed else "was not down"
        print(f"up: fleet {name} {state}")
    return 0


def _confirm(names: list[str]) -> bool:
    if not sys.stdin.isatty():
        return False
    answer = input(f"delete every node tpucared owns in fleet(s) {', '.join(names)}? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def db_upgrade_command(args: argparse.Namespace) -> int:
    if args.db:
        db = args.db
    elif args.config:
        db = load(args).daemon.db
    else:
        db = os.environ.get("TPUCARED_DB") or DEFAULT_DB
    from tpucared.store.migrate import upgrade_to_head

    revision = asyncio.run(upgrade_to_head(db))
    print(f"{db}: at revision {revision}")
    return 0


def _workload_call(args: argparse.Namespace, call: str) -> int:
    """Run one of runtime/workload_commands' functions over a read-only snapshot: these
    commands work beside a running daemon and write nothing (not even host-key pins)."""
    config = load(args)
    from tpucared.runtime.workload import by_hand as wc
    from tpucared.store import Store

    async def go() -> int:
        store = Store.open(config.daemon.db, read_only=True)
        try:
            snapshot = await store.load_snapshot()
        finally:
            await store.close()
        if call == "logs":
            return await wc.logs(
                config, snapshot, args.where, worker=args.worker, follow=args.follow,
                lines=args.lines,
            )  # fmt: skip
        if call == "exec":
            command = args.cmd[0] if len(args.cmd) == 1 else shlex.join(args.cmd)
            return await wc.exec_command(config, snapshot, args.where, command, workers=args.worker)
        return await wc.copy(config, snapshot, args.source, args.destination, workers=args.worker)

    try:
        return asyncio.run(go())
    except wc.CommandError as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        return 0 if call == "logs" else 130


def logs_command(args: argparse.Namespace) -> int:
    return _workload_call(args, "logs")


def exec_command(args: argparse.Namespace) -> int:
    return _workload_call(args, "exec")


def cp_command(args: argparse.Namespace) -> int:
    return _workload_call(args, "cp")
