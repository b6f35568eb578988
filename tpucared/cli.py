"""The `tpucared` command line: parses arguments and hands each command to its layer.

Every command's implementation lives with the layer it belongs to (the daemon in runtime/, the
emulator in emulator/, database commands in store/); this module only parses, configures
logging once, and maps failures to exit codes: 0 ok, 1 runtime failure, 2 bad usage or config.
Imports are lazy so `tpucared --version` and read-only commands start fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from tpucared import __version__
from tpucared.logging import configure_logging

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def _config_arg(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument(
        "-c",
        "--config",
        default=os.environ.get("TPUCARED_CONFIG"),
        required=required and not os.environ.get("TPUCARED_CONFIG"),
        help="fleet config file (TOML); defaults to $TPUCARED_CONFIG",
    )


def _db_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        help="database path or SQLAlchemy URL (default: daemon.db of the config, "
        "$TPUCARED_DB, or /var/lib/tpucared/state.db)",
    )


def _cmd_emulator(args: argparse.Namespace) -> int:
    from tpucared.emulator.server import main as emulator_main

    return emulator_main(args.passthrough_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpucared",
        description="Keeps fleets of preemptible Cloud TPU VMs alive and working, unattended.",
    )
    parser.add_argument("--version", action="version", version=f"tpucared {__version__}")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("TPUCARED_LOG_LEVEL", "info"),
        choices=["debug", "info", "warning", "error"],
    )
    parser.add_argument(
        "--log-format",
        choices=["auto", "json", "console"],
        default="auto",
        help="auto: JSON when stdout is not a TTY, console otherwise",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    emulator = sub.add_parser(
        "emulator", help="the local TPU API emulator with simulated workers", add_help=False
    )
    # The emulator parses its own options (tpucared.emulator.server.build_parser).
    emulator.set_defaults(handler=_cmd_emulator, passthrough=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "passthrough", False):
        args.passthrough_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    json_logs = {"auto": None, "json": True, "console": False}[args.log_format]
    configure_logging(level=args.log_level, json=json_logs)
    handler: Handler = args.handler
    try:
        return handler(args)
    except UsageError as exc:
        print(f"tpucared: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
