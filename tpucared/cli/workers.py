"""`tpucared logs`, `tpucared exec` and `tpucared cp`: a person reaching a fleet's workers.

This module reads the database (read-only, checked first as `status` does, cli/readdb.py: these
commands work beside a running daemon and write nothing, not even host-key pins, and a database
they must not read is one line, exit 2) and maps errors to exit statuses; the SSH work itself
is tpucared/runtime/workload/by_hand.py (shared with `tpucared babysit`).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex

from tpucared.cli.config_arg import load
from tpucared.errors import UsageError


def _workload_call(args: argparse.Namespace, call: str) -> int:
    """Run one of runtime/workload/by_hand.py's functions over a read-only snapshot: these
    commands work beside a running daemon and write nothing (not even host-key pins)."""
    config = load(args)
    from tpucared.cli.readdb import reading
    from tpucared.runtime.clock import SystemClock
    from tpucared.runtime.errors import StartupError
    from tpucared.runtime.oslogin import os_login_config
    from tpucared.runtime.workload import by_hand as wc

    async def go() -> int:
        nonlocal config
        # Checked and read-only, as `status` reads it: a broken file is one line (readdb.py).
        snapshot = await reading(config.daemon.db, lambda store: store.load_snapshot())
        try:  # under OS Login the user is the login profile's (runtime/oslogin.py)
            config = await os_login_config(config, SystemClock())
        except StartupError as exc:
            raise wc.CommandError(str(exc)) from None
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
