"""The methods compared (tpucared cold and warm, parallel-ssh, an ssh loop), the commands
they run, and what each client negotiates with a fleet."""

from __future__ import annotations

import asyncio
import itertools
import logging
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from bench.fanout.fleets import Fleet, read_text_or_empty
from bench.fanout.settings import (
    CLASSIC_KEX,
    MEASUREMENT_TIMEOUT_S,
    PARALLEL_SSH,
    TAG,
    WORKLOAD,
    Settings,
)
from tpucared.launch import LaunchState, launch_script, parse_launch
from tpucared.ssh import (
    DEFAULT_RETRY,
    ConnectionPool,
    ScriptOutputError,
    Target,
    client_options,
    open_connection,
    run_on_all,
    sh_command,
)

# ---------------------------------------------------------------------------------------------
# What each client negotiates


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def negotiated(fleet: Fleet, key: asyncssh.SSHKey) -> dict[str, dict[str, str | None]]:
    """Key exchange and cipher each client ends up with on this fleet (one probe connection).

    asyncssh does not keep the key exchange it chose; it picks the first of the client's list
    that the server offers (`_choose_alg`), and logs the server's list at debug level 2.
    """
    target = fleet.targets[0]
    options = client_options(key)
    capture, logger = _Capture(), logging.getLogger("asyncssh")
    saved = logger.level, logger.propagate
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(capture)
    asyncssh.set_debug_level(2)
    try:
        connection = await open_connection(target, options, connect_timeout=30.0)
        cipher = connection.conn.get_extra_info("send_cipher")
        connection.conn.close()
        await connection.conn.wait_closed()
    finally:
        asyncssh.set_debug_level(1)
        logger.removeHandler(capture)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
    # "Requesting key exchange" is followed by our list, "Received key exchange request" by
    # the server's.
    offered: list[bytes] = []
    received = False
    for message in capture.messages:
        received = received or "Received key exchange request" in message
        if received and "Key exchange algs:" in message:
            names = message.split("Key exchange algs:", 1)[1].strip().strip("[]")
            offered = [n.strip(" '\"").removeprefix("b'").encode() for n in names.split(",")]
            break
    kex = next((a.decode() for a in options.kex_algs if a in offered), None)
    openssh: dict[str, str | None] = {"kex": None, "cipher": None}
    argv = [
        "ssh",
        *fleet.openssh_options(log_level="DEBUG1"),
        "-l",
        fleet.user,
        target.host,
        "true",
    ]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, err = await proc.communicate()
    for line in err.decode(errors="replace").splitlines():
        if "kex: algorithm:" in line:
            openssh["kex"] = line.split("kex: algorithm:", 1)[1].strip()
        elif "kex: client->server cipher:" in line:
            openssh["cipher"] = line.split("cipher:", 1)[1].split()[0]
    return {"tpucared": {"kex": kex, "cipher": cipher}, "openssh": openssh}


# ---------------------------------------------------------------------------------------------
# Commands


@dataclass(frozen=True)
class Command:
    name: str
    text: str
    tag: str | None = None  # environment tag of the processes it leaves behind

    def check(self, stdout: str) -> str | None:
        """None if this worker's output is a success, else why not."""
        if self.name != "launch":
            return None
        try:
            launched = parse_launch(stdout)
        except ScriptOutputError as exc:
            return str(exc)
        if launched.state is not LaunchState.STARTED:
            return f"launch state {launched.state} ({launched.reason})"
        return None


def launch_command(base: str, tag: str) -> str:
    """The daemon's launch script, run in `<base>/<this worker's address>/run`.

    One command line for every worker (parallel-ssh cannot vary it per host): the worker's own
    address comes from SSH_CONNECTION, which sshd and the emulator both set, so workers that
    share this machine's file system still get a run directory each.
    """
    script = launch_script("run", WORKLOAD, env={TAG: tag})
    return (
        f'set -- $SSH_CONNECTION; d={shlex.quote(base)}/"$3" && mkdir -p "$d" && cd "$d" && '
        + sh_command(script)
    )


# ---------------------------------------------------------------------------------------------
# Methods


@dataclass(frozen=True)
class HostOutcome:
    host: str
    ok: bool
    error: str | None = None
    attempts: int = 1


@dataclass(frozen=True)
class Method:
    name: str  # tpucared | tpucared-warm | parallel-ssh | ssh-loop
    concurrency: int | None  # None: sequential
    kex: str | None = None  # OpenSSH tools: KexAlgorithms forced (None: OpenSSH's default)

    @property
    def label(self) -> str:
        if self.name == "ssh-loop":
            return "ssh loop"
        flag = "-p" if self.name == "parallel-ssh" else "c="
        kex = f" kex={self.kex.split('-')[0]}" if self.kex else ""
        return f"{self.name.replace('-warm', ' warm')} {flag}{self.concurrency}{kex}"

    def effective(self, workers: int) -> int:
        return 1 if self.concurrency is None else min(self.concurrency, workers)


class Runner:
    """Runs one method's command on a fleet's targets and says how each worker fared."""

    def __init__(self, fleet: Fleet, key: asyncssh.SSHKey, scratch: Path) -> None:
        self.fleet = fleet
        self.key = key
        self.scratch = scratch
        self.warm_pool: ConnectionPool | None = None
        self._counter = itertools.count()

    async def close(self) -> None:
        if self.warm_pool is not None:
            await self.warm_pool.close()
            self.warm_pool = None

    async def warm_up(self, targets: Sequence[Target]) -> None:
        """Connect the warm pool to `targets` (not timed)."""
        if self.warm_pool is None:
            self.warm_pool = ConnectionPool(self.key, concurrency=64, connect_timeout=60.0)
        results = await run_on_all(targets, "true", pool=self.warm_pool, label="bench.warmup")
        failed = [r for r in results if not r.ok]
        if failed:
            raise RuntimeError(f"warm-up failed on {len(failed)} workers: {failed[:3]}")

    async def run(
        self, method: Method, targets: Sequence[Target], command: Command
    ) -> list[HostOutcome]:
        if method.name in ("tpucared", "tpucared-warm"):
            return await self._tpucared(method, targets, command)
        if method.name == "parallel-ssh":
            return await self._parallel_ssh(method, targets, command)
        if method.name == "ssh-loop":
            return await self._ssh_loop(targets, command)
        raise ValueError(method.name)

    async def _tpucared(
        self, method: Method, targets: Sequence[Target], command: Command
    ) -> list[HostOutcome]:
        if method.name == "tpucared-warm":
            assert self.warm_pool is not None, "warm_up() first"
            results = await run_on_all(
                targets, command.text, pool=self.warm_pool, command_timeout=120.0, label="bench"
            )
        else:
            results = await run_on_all(
                targets,
                command.text,
                key=self.key,
                concurrency=method.concurrency,
                connect_timeout=60.0,
                command_timeout=120.0,
                retry=DEFAULT_RETRY,
                label="bench",
            )
        outcomes = []
        for r in results:
            if r.ok:
                error = command.check(r.stdout_tail)
            else:
                error = f"{r.error or 'exit'}: {r.error_message or r.exit_status}"
                error += f" {r.stderr_tail.strip()[-200:]}"
            outcomes.append(HostOutcome(r.host, error is None, error, r.attempts))
        return outcomes

    async def _parallel_ssh(
        self, method: Method, targets: Sequence[Target], command: Command
    ) -> list[HostOutcome]:
        work = self.scratch / f"pssh-{next(self._counter)}"
        work.mkdir(parents=True)
        hosts = work / "hosts"
        hosts.write_text("".join(f"{t.host}\n" for t in targets))
        argv = [
            PARALLEL_SSH, "-h", str(hosts), "-p", str(method.concurrency), "-l", self.fleet.user,
            "-t", str(int(MEASUREMENT_TIMEOUT_S)), "-o", str(work / "out"), "-e", str(work / "err"),
            "-x", shlex.join(self.fleet.openssh_options(method.kex)), command.text,
        ]  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        stdout, _ = await _communicate(proc)
        # "[3] 14:40:00 [SUCCESS] 127.66.0.3" per host (or "[FAILURE] host reason").
        status: dict[str, str | None] = {}
        for line in stdout.decode(errors="replace").splitlines():
            fields = line.split(maxsplit=4)
            if len(fields) >= 4 and fields[2] in ("[SUCCESS]", "[FAILURE]"):
                status[fields[3]] = None if fields[2] == "[SUCCESS]" else line
        outcomes = []
        for t in targets:
            error = status.get(t.host, "no status line from parallel-ssh")
            if error is None:
                out = read_text_or_empty(work / "out" / t.host)
                error = command.check(out)
            else:
                error = f"{error} {read_text_or_empty(work / 'err' / t.host).strip()[-200:]}"
            outcomes.append(HostOutcome(t.host, error is None, error))
        shutil.rmtree(work, ignore_errors=True)
        return outcomes

    async def _ssh_loop(self, targets: Sequence[Target], command: Command) -> list[HostOutcome]:
        outcomes = []
        for t in targets:
            proc = await asyncio.create_subprocess_exec(
                "ssh",
                *self.fleet.openssh_options(),
                "-l",
                self.fleet.user,
                t.host,
                command.text,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            out, err = await _communicate(proc)
            if proc.returncode == 0:
                error = command.check(out.decode(errors="replace"))
            else:
                error = f"ssh exit {proc.returncode}: {err.decode(errors='replace')[-200:]}"
            outcomes.append(HostOutcome(t.host, error is None, error))
        return outcomes


async def _communicate(proc: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
    """proc.communicate(), killing the process if the measurement is cancelled (timeout)."""
    try:
        return await proc.communicate()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise


def methods_for(settings: Settings, workers: int, fleet: str) -> list[Method]:
    """The methods run at this size: one per distinct effective concurrency per tool.

    The classic-kex parallel-ssh variant only runs against sshd: the emulator's asyncssh
    servers do not offer OpenSSH's post-quantum exchange, so OpenSSH picks CLASSIC_KEX anyway.
    """
    variants: list[tuple[str, str | None]] = [("tpucared", None), ("parallel-ssh", None)]
    if settings.openssh_classic_kex and fleet == "sshd":
        variants.append(("parallel-ssh", CLASSIC_KEX))
    methods: list[Method] = []
    for tool, kex in variants:
        seen: set[int] = set()
        for c in settings.concurrencies:
            if min(c, workers) not in seen:
                seen.add(min(c, workers))
                methods.append(Method(tool, c, kex))
    if settings.warm:
        methods.append(Method("tpucared-warm", settings.concurrencies[0]))
    if workers <= settings.sequential_max_workers:
        methods.append(Method("ssh-loop", None))
    return methods
