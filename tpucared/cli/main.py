"""The `tpucared` command line: parses arguments and hands each command to its layer.

Every command's implementation lives with the layer it belongs to (the daemon in runtime/, the
emulator in its own distribution, emulator/tpucared_emulator/, database commands in store/);
this module only parses, configures logging once, and maps failures to exit codes: 0 ok,
1 runtime failure, 2 bad usage or config or a database tpucared must not use (one line each,
no traceback).
Imports are lazy so `tpucared --version` and read-only commands start fast.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence

from tpucared import __version__
from tpucared.errors import UsageError
from tpucared.logsetup import configure_logging

Handler = Callable[[argparse.Namespace], int]


def _config_arg(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument(
        "-c",
        "--config",
        default=os.environ.get("TPUCARED_CONFIG"),
        # Not argparse's `required`: its error would not mention $TPUCARED_CONFIG; a command
        # that needs the config refuses in config_arg.load ("pass -c FILE or set ...").
        help="fleet config file (TOML); defaults to $TPUCARED_CONFIG"
        + ("" if required else " (optional)"),
    )


def _db_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        help="database path or SQLAlchemy URL (default: daemon.db of the config, "
        "$TPUCARED_DB, or /var/lib/tpucared/state.db)",
    )


EMULATOR_MISSING = (
    "the emulator is not installed: it is a distribution of its own (tpucared-emulator, the "
    "emulator/ folder of tpucared's repository), which the daemon does not need; from a clone, "
    "`pip install ./emulator` (`make demo` installs both)"
)


def _emulator_types() -> None:
    """The emulator is its own distribution (emulator/), absent from the daemon's wheel and image,
    and checks request bodies with Google's own types: say what is missing in one line, not a
    traceback. Called before anything imports tpucared_emulator (the demo does at its top)."""
    if importlib.util.find_spec("tpucared_emulator") is None:
        raise UsageError(EMULATOR_MISSING)
    from tpucared_emulator import official_tpu
    from tpucared_emulator.compute import official

    try:
        official.require()
        official_tpu.require()
    except RuntimeError as exc:
        raise UsageError(str(exc)) from None


def _cmd_emulator(args: argparse.Namespace) -> int:
    _emulator_types()
    from tpucared_emulator.server import main as emulator_main

    return emulator_main(args.passthrough_args)


def _add_status(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("status", help="fleets, slots, nodes, attempts, preemptions (read-only)")
    _config_arg(p, required=False)
    _db_arg(p)
    p.add_argument("--json", action="store_true", help="one JSON document (docs/status.md)")
    p.add_argument("--fleet", help="only this fleet")

    def handler(args: argparse.Namespace) -> int:
        from tpucared.cli.inspect import status_command

        return status_command(args)

    p.set_defaults(handler=handler, log_stream="stderr")  # stdout is the output


def _add_events(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("events", help="the event log (read-only)")
    _config_arg(p, required=False)
    _db_arg(p)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--fleet", help="only this fleet's events")
    p.add_argument("--since", type=int, metavar="ID", help="the events after event ID")
    p.add_argument(
        "-n", dest="limit", type=int, metavar="N", help="at most N events (default: last 20)"
    )
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events")

    def handler(args: argparse.Namespace) -> int:
        from tpucared.cli.inspect import events_command

        return events_command(args)

    p.set_defaults(handler=handler, log_stream="stderr")


def _add_goodput(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("goodput", help="where each slot's time went, and its cost (read-only)")
    _config_arg(p, required=False)
    _db_arg(p)
    p.add_argument("target", nargs="?", metavar="FLEET[/SLOT]", help="only this fleet or slot")
    p.add_argument("--since", metavar="DURATION", help="only the last DURATION (e.g. 7d)")
    p.add_argument("--json", action="store_true", help="one JSON document (docs/inspecting.md)")
    p.set_defaults(handler=_lazy("goodput", "goodput_command"), log_stream="stderr")


def _lazy(module: str, command: str) -> Handler:
    """A handler running `tpucared.cli.<module>.<command>`, imported only when used: a typo
    in the arguments costs no import of aiohttp, SQLAlchemy or asyncssh."""

    def handler(args: argparse.Namespace) -> int:
        result: int = getattr(importlib.import_module(f"tpucared.cli.{module}"), command)(args)
        return result

    return handler


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="the daemon: keep the fleets alive (migrates the DB first)")
    _config_arg(p)
    p.set_defaults(handler=_lazy("daemon", "run_command"))


def _add_plan(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="what the daemon would do now, changing nothing")
    _config_arg(p)
    p.add_argument("--json", action="store_true", help="the plan as JSON")
    p.set_defaults(handler=_lazy("plan", "plan_command"), log_stream="stderr")


def _add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("check", help="will this config work on this project? (read-only)")
    _config_arg(p)
    p.add_argument("--json", action="store_true", help="the checks as JSON")
    p.set_defaults(handler=_lazy("check", "check_command"), log_stream="stderr", quiet=True)


def _add_down(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "down", help="delete every node tpucared owns in the fleet(s) and keep them down"
    )
    _config_arg(p)
    p.add_argument("fleets", nargs="*", metavar="FLEET", help="default: every configured fleet")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--timeout", default="10m", help="give up after this long (default 10m)")
    p.set_defaults(handler=_lazy("down", "down_command"), log_stream="stderr", quiet=True)


def _add_up(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("up", help="undo `down`: the daemon recreates the fleet(s)")
    _config_arg(p)
    p.add_argument("fleets", nargs="*", metavar="FLEET", help="default: every configured fleet")
    p.set_defaults(handler=_lazy("down", "up_command"), log_stream="stderr", quiet=True)


def _add_db(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("db", help="database maintenance")
    db_sub = p.add_subparsers(dest="db_command", metavar="DB_COMMAND", required=True)
    upgrade = db_sub.add_parser("upgrade", help="apply the migrations (run does it too)")
    _db_arg(upgrade)
    _config_arg(upgrade, required=False)
    upgrade.set_defaults(handler=_lazy("daemon", "db_upgrade_command"), log_stream="stderr")


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo", help="the emulator + the daemon + simulated preemptions, in one process"
    )
    p.add_argument(
        "--duration", type=float, metavar="SECONDS", help="stop after this long (default: Ctrl-C)"
    )
    p.add_argument("--seed", type=int, default=1, help="which preemptions, and when (default 1)")

    def handler(args: argparse.Namespace) -> int:
        _emulator_types()
        from tpucared.demo.run import DemoError, demo_command

        try:
            return demo_command(args)
        except DemoError as exc:
            raise UsageError(str(exc)) from None

    p.set_defaults(handler=handler)


def _add_babysit(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "babysit",
        help="one slice running one command until it is done, no config file "
        "(NAME --zone Z --type T [--spot] [--setup FILE] -- CMD; see babysit --help)",
        add_help=False,
    )

    def handler(args: argparse.Namespace) -> int:
        from tpucared.demo.babysit import BabysitError, babysit_command

        try:
            return babysit_command(args)
        except BabysitError as exc:
            raise UsageError(str(exc)) from None

    # Everything after `babysit` goes to its own parser (tpucared.demo.babysit), so that
    # CMD after `--` reaches it word for word.
    p.set_defaults(handler=handler, passthrough=True, log_stream="stderr")


def _add_workload_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """logs / exec / cp: like gcloud's `--worker=all`, over the daemon's key and host pins."""
    logs = sub.add_parser("logs", help="a worker's log of a slot's newest attempt")
    _config_arg(logs)
    logs.add_argument("where", metavar="FLEET/SLOT")
    logs.add_argument("--worker", type=int, default=0, help="worker index (default 0)")
    logs.add_argument("-f", "--follow", action="store_true", help="stream until Ctrl-C")
    logs.add_argument("-n", "--lines", type=int, default=100, help="lines of the tail")
    logs.set_defaults(handler=_lazy("workers", "logs_command"), log_stream="stderr", quiet=True)

    exe = sub.add_parser("exec", help="run a command on workers, output prefixed by worker")
    _config_arg(exe)
    exe.add_argument("where", metavar="FLEET[/SLOT]")
    exe.add_argument("--worker", default="all", help="all | N | N-M (default all)")
    exe.add_argument("cmd", nargs="+", metavar="-- CMD")
    exe.set_defaults(handler=_lazy("workers", "exec_command"), log_stream="stderr", quiet=True)

    cp = sub.add_parser("cp", help="upload a local file to workers")
    _config_arg(cp)
    cp.add_argument("source", metavar="SRC")
    cp.add_argument("destination", metavar="FLEET[/SLOT]:DEST")
    cp.add_argument("--worker", default="all", help="all | N | N-M (default all)")
    cp.set_defaults(handler=_lazy("workers", "cp_command"), log_stream="stderr", quiet=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpucared",
        description="Keeps fleets of preemptible Cloud TPU VMs alive and working, unattended.",
    )
    parser.add_argument("--version", action="version", version=f"tpucared {__version__}")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("TPUCARED_LOG_LEVEL") or None,
        choices=["debug", "info", "warning", "error"],
        help="default info ($TPUCARED_LOG_LEVEL); warning for logs/exec/cp/down/up, whose "
        "output is their own",
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
    # The emulator parses its own options (tpucared_emulator.server.build_parser).
    emulator.set_defaults(handler=_cmd_emulator, passthrough=True)
    _add_run(sub)
    _add_plan(sub)
    _add_check(sub)
    _add_down(sub)
    _add_up(sub)
    _add_db(sub)
    _add_status(sub)
    _add_events(sub)
    _add_goodput(sub)
    _add_workload_commands(sub)
    _add_demo(sub)
    _add_babysit(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "passthrough", False):
        args.passthrough_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    json_logs = {"auto": None, "json": True, "console": False}[args.log_format]
    # Commands whose stdout is their output (a plan, a report) log to stderr.
    stream = sys.stderr if getattr(args, "log_stream", None) == "stderr" else None
    # Commands a person runs for their output (logs/exec/cp/down/up, `quiet`) show only
    # warnings from the libraries under them (ssh.fanout, the reconciler) unless asked.
    if args.log_level is None:
        args.log_level = "warning" if getattr(args, "quiet", False) else "info"
    configure_logging(level=args.log_level, json=json_logs, stream=stream)
    handler: Handler = args.handler
    try:
        return handler(args)
    except UsageError as exc:
        print(f"tpucared: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not _is_database_error(exc):
            raise
        print(f"tpucared: {exc}", file=sys.stderr)
        return 2


def _is_database_error(exc: Exception) -> bool:
    """A database tpucared must not use (`tpucared.store.errors.DatabaseError`: broken, newer,
    someone else's, held by another daemon), from any command: one line, exit status 2. Looked
    up without importing the store: if it was never imported, this cannot be one."""
    errors = sys.modules.get("tpucared.store.errors")
    return errors is not None and isinstance(exc, errors.DatabaseError)
