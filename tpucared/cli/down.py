"""`tpucared down` and `tpucared up`: take fleets down (deleting every node tpucared owns for
them) and want them again. The deleting is the daemon's own machinery, in
tpucared/runtime/down.py; this module asks, confirms and reports.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from tpucared.cli.config_arg import load
from tpucared.core.model import durations
from tpucared.errors import UsageError
from tpucared.runtime.errors import StartupError


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
