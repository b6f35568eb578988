"""Fan-out benchmark: one command on 16 / 64 / 256 workers, tpucared vs parallel-ssh vs ssh loop.

Issue "Benchmarks", item 4. Target: 256 workers in <= 5 s, and faster than parallel-ssh.

Two fleets of workers, both on loopback addresses of this machine, each worker its own address:

    sshd      real OpenSSH sshd processes, 16 addresses each (sshd's compiled-in limit on listen
              sockets is 16), MaxStartups/MaxSessions raised so bursts are not dropped, a temp
              client key in AuthorizedKeysFile, host keys generated in a temp dir. Commands run
              as the user running the benchmark (root in CI).
    emulator  the tpucared emulator in its own process (`ssh_hosts` on), v4-32 nodes created
              through the v2 API with the benchmark's key in `ssh-keys` metadata; each worker
              is an asyncssh server on its own 127.x address, host keys pinned from
              getGuestAttributes as the daemon does.

Commands:

    true      connection cost: handshake, auth, one session, nothing else
    launch    the daemon's detached launch (`tpucared.ssh.launch_script`) of `sleep 30` into a
              fresh run directory per worker and measurement; timed until every worker has
              answered `TPUCARED_LAUNCH state=started`. The workloads are killed afterwards by
              an environment tag (all workers are on this machine), outside the timing.

Methods, each timed from start to every worker having returned its result:

    tpucared        run_on_all with a fresh ConnectionPool (what a first contact costs:
                    connect + command + closing the pool), concurrency 64 (the default) and 256
    tpucared warm   run_on_all through a pool already connected to every worker (what the
                    daemon pays on every later command: one channel per worker)
    parallel-ssh    Debian's pssh 2.3.4, -p 64 and -p 256, same key and OpenSSH options;
                    against sshd also with `KexAlgorithms=curve25519-sha256`, the exchange
                    tpucared gets (OpenSSH pairs pick the costlier sntrup761 by default)
    ssh loop        one `ssh` after the other; above `sequential_max_workers` it is not run
                    but extrapolated from the largest measured size (labelled so)

Concurrency values that are >= the number of workers behave alike, so only the first of them is
run (e.g. at 64 workers -p 256 would be -p 64 again). Methods are interleaved and their order
rotated every repetition, so slow phases of a noisy machine spread over all of them. CPU time of
the client side (this process, or pssh + its ssh children) and of the servers (the sshd or
emulator process trees, live and reaped) is measured per run, and the key exchange and cipher
each client negotiates are recorded per fleet.

`python -m bench.fanout profile [--fleet sshd|emulator] [--workers N] [--reps R]` shows where a
cold tpucared fan-out spends its time: client vs server CPU with asyncssh's default cipher
order and with AES-GCM first, then a cProfile (CPU timer) of the client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import getpass
import io
import itertools
import logging
import math
import os
import pstats
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import asyncssh

from bench import common
from tpucared.emulator.hosts.processes import find_tagged, kill_tagged
from tpucared.logsetup import configure_logging
from tpucared.ssh import (
    DEFAULT_RETRY,
    ConnectionPool,
    LaunchState,
    ScriptOutputError,
    Target,
    client_options,
    ensure_client_key,
    host_keys_from_guest_attributes,
    launch_script,
    open_connection,
    openssh_public_key,
    parse_launch,
    run_on_all,
    sh_command,
    ssh_keys_metadata_entry,
)

SSHD = "/usr/sbin/sshd"
PARALLEL_SSH = "parallel-ssh"
# sshd refuses more ListenAddress sockets than this (MAX_LISTEN_SOCKS in OpenSSH's sshd.c).
SSHD_MAX_LISTEN = 16
# Loopback block of the sshd fleet: 127.66.<i // 250>.<i % 250 + 1>; the emulator allocates
# from 127.1.0.1 up, the test suites use 127.88.x.y.
SSHD_BLOCK = "127.66"
WORKLOAD = "sleep 30"
TAG = "TPUCARED_BENCH_TAG"
EMULATOR_PROJECT, EMULATOR_ZONE = "bench", "us-central2-b"
EMULATOR_USER = "bench"
EMULATOR_ACCELERATOR, EMULATOR_WORKERS_PER_NODE = "v4-32", 4
TARGET_WORKERS, TARGET_SECONDS = 256, 5.0
# OpenSSH 9.x clients and servers agree on sntrup761x25519-sha512 (post-quantum) by default;
# asyncssh (without liboqs) and OpenSSH 9.2 agree on this one. The variant isolates the tools
# from their key exchange.
CLASSIC_KEX = "curve25519-sha256"

# Bounds: no measurement may take longer than this (a hung worker fails the run instead of
# hanging it); Settings refuses sizes and repetition counts beyond a sane budget.
MEASUREMENT_TIMEOUT_S = 180.0
# After a launch: how long to wait for every workload to show up before killing them.
WORKLOAD_APPEAR_S = 10.0
PAUSE_BETWEEN_RUNS_S = 0.5


@dataclass(frozen=True)
class Settings:
    workers: tuple[int, ...]
    reps: int
    fleets: tuple[str, ...] = ("sshd", "emulator")
    commands: tuple[str, ...] = ("true", "launch")
    concurrencies: tuple[int, ...] = (64, 256)
    sequential_max_workers: int = 64  # the ssh loop runs up to here and is extrapolated above
    warm: bool = True
    # Also run parallel-ssh with the key exchange tpucared gets from sshd (see CLASSIC_KEX).
    openssh_classic_kex: bool = True

    def __post_init__(self) -> None:
        if not self.workers or min(self.workers) < 1 or max(self.workers) > 1000:
            raise ValueError("workers must be in 1..1000")
        if not 1 <= self.reps <= 50:
            raise ValueError("reps must be in 1..50")
        if set(self.fleets) - {"sshd", "emulator"} or set(self.commands) - {"true", "launch"}:
            raise ValueError(f"unknown fleet or command in {self.fleets} / {self.commands}")


FULL = Settings(workers=(16, 64, 256), reps=5)
QUICK = Settings(workers=(16, 64), reps=2, sequential_max_workers=16)


def settings_for(quick: bool) -> Settings:
    return QUICK if quick else FULL


# ---------------------------------------------------------------------------------------------
# Fleets


def _loopback(block: str, index: int) -> str:
    return f"{block}.{index // 250}.{index % 250 + 1}"


def free_port(addresses: Sequence[str]) -> int:
    """A port nothing listens on at any of `addresses` right now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            port = int(probe.getsockname()[1])
        try:
            with contextlib.ExitStack() as stack:
                for address in addresses[1:]:
                    sock = stack.enter_context(socket.socket())
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((address, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on every address")


def _listening(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


async def _wait_listening(addresses: Sequence[str], port: int, what: str, patience: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    pending = list(addresses)
    while pending:
        if _listening(pending[0], port):
            pending.pop(0)
            continue
        if loop.time() > deadline:
            raise RuntimeError(f"{what}: nothing listens on {pending[0]}:{port} after {patience} s")
        await asyncio.sleep(0.02)


@dataclass
class Fleet:
    """Workers reachable over SSH, and what the OpenSSH-based tools need to reach them."""

    name: str
    description: str
    user: str
    port: int
    key_path: Path
    targets: list[Target]
    server_pids: list[int]
    details: dict[str, Any] = field(default_factory=dict)

    def server_cpu(self) -> float:
        return common.tree_cpu_seconds(self.server_pids)

    def openssh_options(self, kex: str | None = None, *, log_level: str = "ERROR") -> list[str]:
        """The same client settings for parallel-ssh and the ssh loop."""
        return [
            *(["-o", f"KexAlgorithms={kex}"] if kex else []),
            "-i", str(self.key_path),
            "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null",
            "-o", "BatchMode=yes",
            "-o", f"LogLevel={log_level}",
            "-p", str(self.port),
        ]  # fmt: skip


def _sshd_config(
    directory: Path,
    addresses: Sequence[str],
    port: int,
    host_keys: list[Path],
    authorized_keys: Path,
    home: Path,
) -> str:
    listen = "\n".join(f"ListenAddress {a}:{port}" for a in addresses)
    keys = "\n".join(f"HostKey {p}" for p in host_keys)
    return f"""\
{listen}
{keys}
PidFile {directory / "sshd.pid"}
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
PrintLastLog no
UseDNS no
# Defaults 10:30:100 and 10 would drop a burst of handshakes ("kex_exchange_identification:
# Connection closed by remote host"), which measures sshd's throttle, not the client.
MaxStartups 1000:30:1000
MaxSessions 1000
LogLevel ERROR
SetEnv HOME={home}
"""


def _start_sshds(
    workers: int, key: asyncssh.SSHKey, directory: Path
) -> tuple[list[subprocess.Popen[bytes]], list[str], int, str]:
    """Start the sshd processes (blocking: run in a thread). Returns (processes, addresses,
    port, host public key)."""
    if not os.access(SSHD, os.X_OK) or shutil.which("ssh-keygen") is None:
        raise RuntimeError(f"{SSHD} and ssh-keygen are needed: apt-get install -y openssh-server")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    directory.mkdir(parents=True, exist_ok=True)
    host_key = directory / "ssh_host_ed25519_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(host_key)], check=True
    )
    host_public = " ".join(host_key.with_suffix(".pub").read_text().split()[:2])
    authorized = directory / "authorized_keys"
    authorized.write_text(openssh_public_key(key) + "\n")
    # A clean home: bash sources ~/.bashrc for commands run by sshd, and a developer's rc
    # (pyenv, conda) would cost more than the fan-out itself.
    home = directory / "home"
    home.mkdir(exist_ok=True)
    addresses = [_loopback(SSHD_BLOCK, i) for i in range(workers)]
    port = free_port(addresses)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with (directory / "sshd.log").open("ab") as log:
            for n, start in enumerate(range(0, workers, SSHD_MAX_LISTEN)):
                own = directory / f"sshd{n}"
                own.mkdir()
                config = own / "sshd_config"
                listen = addresses[start : start + SSHD_MAX_LISTEN]
                config.write_text(_sshd_config(own, listen, port, [host_key], authorized, home))
                processes.append(
                    subprocess.Popen(
                        [SSHD, "-D", "-e", "-f", str(config)],
                        stdout=log,
                        stderr=log,
                        stdin=subprocess.DEVNULL,
                    )
                )
    except BaseException:
        _stop_processes(processes)
        raise
    return processes, addresses, port, host_public


def _stop_processes(processes: Sequence[subprocess.Popen[bytes]], grace: float = 10.0) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL (blocking: run in a thread)."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(grace)


@contextlib.asynccontextmanager
async def sshd_fleet(
    workers: int, key: asyncssh.SSHKey, key_path: Path, directory: Path
) -> AsyncIterator[Fleet]:
    """`workers` loopback addresses served by ceil(workers / 16) OpenSSH sshd processes."""
    processes, addresses, port, host_public = await asyncio.to_thread(
        _start_sshds, workers, key, directory
    )
    try:
        try:
            await _wait_listening(addresses, port, "sshd", 30.0)
        except RuntimeError as exc:
            log = await asyncio.to_thread(_read_text, directory / "sshd.log")
            raise RuntimeError(f"{exc}; sshd log: {log[-2000:]}") from None
        user = getpass.getuser()
        targets = [
            Target(i, a, port, user, pinned_host_keys=(host_public,), incarnation="bench")
            for i, a in enumerate(addresses)
        ]
        yield Fleet(
            name="sshd",
            description=(
                f"OpenSSH sshd on loopback: {len(processes)} process(es) x <= {SSHD_MAX_LISTEN} "
                "ListenAddress each, MaxStartups 1000:30:1000, MaxSessions 1000, UsePAM no, "
                f"user {user}"
            ),
            user=user,
            port=port,
            key_path=key_path,
            targets=targets,
            server_pids=[p.pid for p in processes],
            details={"sshd_processes": len(processes), "addresses_per_process": SSHD_MAX_LISTEN},
        )
    finally:
        await asyncio.to_thread(_stop_processes, processes)


def _start_emulator(directory: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start `tpucared emulator` in its own process (blocking). Returns (process, API port,
    SSH port)."""
    directory.mkdir(parents=True, exist_ok=True)
    api_port = free_port(["127.0.0.1"])
    ssh_port = free_port(["0.0.0.0"])  # free on every address (only probed, never listened)
    argv = [
        sys.executable, "-c",
        "import sys; from tpucared.emulator.server import main; sys.exit(main(sys.argv[1:]))",
        "--port", str(api_port), "--ssh-port", str(ssh_port), "--create-seconds", "0.05",
        "--delete-seconds", "0.05", "--hosts-dir", str(directory / "hosts"),
    ]  # fmt: skip
    with (directory / "emulator.log").open("ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    return process, api_port, ssh_port


@contextlib.asynccontextmanager
async def emulator_fleet(
    workers: int, key: asyncssh.SSHKey, key_path: Path, directory: Path
) -> AsyncIterator[Fleet]:
    """ceil(workers / 4) v4-32 nodes of an emulator running in its own process."""
    process, api_port, ssh_port = await asyncio.to_thread(_start_emulator, directory)
    base = f"http://127.0.0.1:{api_port}/v2/projects/{EMULATOR_PROJECT}/locations/{EMULATOR_ZONE}"
    try:
        await _wait_listening(["127.0.0.1"], api_port, "emulator", 30.0)
        nodes = math.ceil(workers / EMULATOR_WORKERS_PER_NODE)
        entry = ssh_keys_metadata_entry(EMULATOR_USER, key)
        targets: list[Target] = []
        async with aiohttp.ClientSession(raise_for_status=True) as http:
            for i in range(nodes):
                body = {
                    "acceleratorType": EMULATOR_ACCELERATOR,
                    "runtimeVersion": "tpu-ubuntu2204-base",
                    "networkConfig": {"enableExternalIps": True},
                    "metadata": {"ssh-keys": entry},
                }
                async with http.post(f"{base}/nodes", json=body, params={"nodeId": f"w{i}"}):
                    pass
            for i in range(nodes):
                targets += await _emulator_targets(http, f"{base}/nodes/w{i}", ssh_port)
        targets = [replace(t, worker=i) for i, t in enumerate(targets[:workers])]
        await _wait_listening([t.host for t in targets], ssh_port, "emulator hosts", 60.0)
        yield Fleet(
            name="emulator",
            description=(
                f"tpucared emulator in its own process, {nodes} x {EMULATOR_ACCELERATOR} nodes, "
                "one asyncssh server per worker on its own 127.x address, user "
                f"{EMULATOR_USER} from ssh-keys metadata, host keys pinned from guest attributes"
            ),
            user=EMULATOR_USER,
            port=ssh_port,
            key_path=key_path,
            targets=targets,
            server_pids=[process.pid],
            details={"nodes": nodes, "accelerator_type": EMULATOR_ACCELERATOR},
        )
    finally:
        # SIGTERM: the emulator stops every simulated host and kills their processes.
        await asyncio.to_thread(_stop_processes, [process], 30.0)


async def _emulator_targets(http: aiohttp.ClientSession, node_url: str, port: int) -> list[Target]:
    for _ in range(500):  # READY within 0.05 s of emulator time; bounded at ~10 s
        async with http.get(node_url) as response:
            node = await response.json()
        if node.get("state") == "READY":
            break
        await asyncio.sleep(0.02)
    else:
        raise RuntimeError(f"{node_url} never became READY")
    async with http.post(
        f"{node_url}:getGuestAttributes", json={"queryPath": "hostkeys/"}
    ) as response:
        attributes = await response.json()
    targets = []
    for index, (endpoint, worker) in enumerate(
        zip(node["networkEndpoints"], attributes["guestAttributes"], strict=True)
    ):
        items = [(i["key"], i["value"]) for i in worker["queryValue"]["items"]]
        targets.append(
            Target(
                worker=index,
                host=endpoint["ipAddress"],
                port=port,
                user=EMULATOR_USER,
                pinned_host_keys=host_keys_from_guest_attributes(items),
                incarnation=node["id"],
            )
        )
    return targets


FLEETS: dict[str, Callable[..., contextlib.AbstractAsyncContextManager[Fleet]]] = {
    "sshd": sshd_fleet,
    "emulator": emulator_fleet,
}


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
                out = _read_text(work / "out" / t.host)
                error = command.check(out)
            else:
                error = f"{error} {_read_text(work / 'err' / t.host).strip()[-200:]}"
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


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


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


# ---------------------------------------------------------------------------------------------
# Measurement


@dataclass
class Run:
    seconds: float
    ok_workers: int
    client_cpu_s: float
    server_cpu_s: float
    retried_workers: int
    errors: list[str]


@dataclass
class Row:
    fleet: str
    workers: int
    command: str
    method: str
    concurrency: int | None
    label: str
    kex: str | None = None
    runs: list[Run] = field(default_factory=list)
    extrapolated_from: int | None = None
    estimate: float | None = None  # extrapolated rows: seconds estimated, no runs

    def median(self) -> float | None:
        if self.estimate is not None:
            return self.estimate
        seconds = [r.seconds for r in self.runs]
        return common.percentile(seconds, 50) if seconds else None


async def measure(
    runner: Runner, method: Method, targets: Sequence[Target], command: Command
) -> Run:
    own, children = common.own_cpu_seconds(), common.children_cpu_seconds()
    server = runner.fleet.server_cpu()
    started = time.perf_counter()
    async with asyncio.timeout(MEASUREMENT_TIMEOUT_S):
        outcomes = await runner.run(method, targets, command)
    seconds = time.perf_counter() - started
    client = common.own_cpu_seconds() - own + common.children_cpu_seconds() - children
    server = runner.fleet.server_cpu() - server
    errors = [f"{o.host}: {o.error}" for o in outcomes if not o.ok]
    return Run(
        seconds=seconds,
        ok_workers=sum(o.ok for o in outcomes),
        client_cpu_s=client,
        server_cpu_s=server,
        retried_workers=sum(o.attempts > 1 for o in outcomes),
        errors=errors[:5],
    )


async def _cleanup(command: Command, workers: int) -> None:
    """Kill what a launch left running (outside the timing).

    A launch returns once the wrapper wrote its pid; the workload itself (the tagged
    process) may appear a moment later, so wait for one per worker before killing.
    """
    if command.tag is None:
        return
    tags = {TAG: command.tag}
    for _ in range(int(WORKLOAD_APPEAR_S / 0.05)):
        if len(await asyncio.to_thread(find_tagged, tags)) >= workers:
            break
        await asyncio.sleep(0.05)
    survivors = await kill_tagged(tags, patience=10.0)
    if survivors:
        raise RuntimeError(f"workloads survived SIGKILL: {survivors}")


async def measure_fleet(
    settings: Settings,
    fleet: Fleet,
    key: asyncssh.SSHKey,
    scratch: Path,
    progress: Callable[[str], None],
) -> list[Row]:
    runner = Runner(fleet, key, scratch)
    rows: list[Row] = []
    try:
        for workers in settings.workers:
            targets = fleet.targets[:workers]
            methods = methods_for(settings, workers, fleet.name)
            if any(m.name == "tpucared-warm" for m in methods):
                await runner.warm_up(targets)
            for command_name in settings.commands:
                group = {
                    m: Row(fleet.name, workers, command_name, m.name, m.concurrency, m.label, m.kex)
                    for m in methods
                }
                for rep in range(settings.reps):
                    shift = rep % len(methods)
                    for method in methods[shift:] + methods[:shift]:
                        command = _command(command_name, scratch, fleet.name)
                        try:
                            run = await measure(runner, method, targets, command)
                        finally:
                            await _cleanup(command, workers)
                        group[method].runs.append(run)
                        progress(
                            f"{fleet.name:8} n={workers:<4} {command_name:6} {method.label:34} "
                            f"rep {rep + 1}/{settings.reps}: {run.seconds:7.3f} s, "
                            f"{run.ok_workers}/{workers} ok"
                            + (f" ({run.errors[0]})" if run.errors else "")
                        )
                        await asyncio.sleep(PAUSE_BETWEEN_RUNS_S)
                rows.extend(group.values())
    finally:
        await runner.close()
    return rows


def _command(name: str, scratch: Path, fleet: str) -> Command:
    if name == "true":
        return Command("true", "true")
    tag = secrets.token_hex(8)
    base = scratch / "runs" / f"{fleet}-{tag}"
    return Command("launch", launch_command(str(base), tag), tag=tag)


def extrapolate_sequential(settings: Settings, rows: list[Row]) -> list[Row]:
    """ssh-loop rows for sizes above sequential_max_workers: per-worker time of the largest
    measured size times the number of workers (no runs; labelled as extrapolated)."""
    extra = []
    for fleet, command in itertools.product(settings.fleets, settings.commands):
        measured = [
            r for r in rows if (r.fleet, r.command, r.method) == (fleet, command, "ssh-loop")
        ]
        if not measured:
            continue
        base = max(measured, key=lambda r: r.workers)
        per_worker = (base.median() or 0.0) / base.workers
        for workers in settings.workers:
            if workers > base.workers:
                extra.append(
                    Row(
                        fleet,
                        workers,
                        command,
                        "ssh-loop",
                        None,
                        f"ssh loop (extrapolated from {base.workers})",
                        extrapolated_from=base.workers,
                        estimate=per_worker * workers,
                    )
                )
    return extra


# ---------------------------------------------------------------------------------------------
# Result


def _row_dict(row: Row, rows: list[Row]) -> dict[str, Any]:
    same = [
        r for r in rows if (r.fleet, r.workers, r.command) == (row.fleet, row.workers, row.command)
    ]
    pssh = [r for r in same if r.method == "parallel-ssh" and r.median() is not None]
    median = row.median()
    # The reference: parallel-ssh with OpenSSH's defaults at the same effective concurrency.
    effective = min(row.concurrency or 64, row.workers)
    reference = next(
        (
            r.median()
            for r in pssh
            if r.kex is None and min(r.concurrency or 0, r.workers) == effective
        ),
        None,
    )
    best = min((m for r in pssh if (m := r.median()) is not None), default=None)
    return {
        "fleet": row.fleet,
        "workers": row.workers,
        "command": row.command,
        "method": row.method,
        "concurrency": row.concurrency,
        "kex": row.kex,
        "label": row.label,
        "extrapolated_from": row.extrapolated_from,
        "runs": len(row.runs),
        "all_workers_ok": all(r.ok_workers == row.workers for r in row.runs) if row.runs else None,
        "ok_workers_min": min((r.ok_workers for r in row.runs), default=None),
        "median_s": None if median is None else round(median, 4),
        "seconds": common.summarize([r.seconds for r in row.runs]),
        "client_cpu_s": common.summarize([r.client_cpu_s for r in row.runs], 3),
        "server_cpu_s": common.summarize([r.server_cpu_s for r in row.runs], 3),
        "retried_workers_max": max((r.retried_workers for r in row.runs), default=None),
        "errors": sorted({e for r in row.runs for e in r.errors})[:5],
        "ratio_vs_parallel_ssh_same_p": common.ratio(median, reference),
        "ratio_vs_best_parallel_ssh": common.ratio(median, best),
    }


def _verdicts(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The target, per fleet and command, at the largest size measured: tpucared's best cold
    fan-out against 5 s and against the best parallel-ssh variant (classic kex included)."""
    out = []
    for fleet, command in sorted({(r["fleet"], r["command"]) for r in results}):
        mine = [r for r in results if (r["fleet"], r["command"]) == (fleet, command)]
        workers = max(r["workers"] for r in mine)
        at = [r for r in mine if r["workers"] == workers and r["median_s"] is not None]

        def best(method: str, rows: list[dict[str, Any]] = at) -> dict[str, Any] | None:
            chosen = min(
                (r for r in rows if r["method"] == method),
                key=lambda r: r["median_s"],
                default=None,
            )
            return chosen and {"label": chosen["label"], "median_s": chosen["median_s"]}

        default = next(
            (r["median_s"] for r in at if r["method"] == "tpucared" and r["concurrency"] == 64),
            None,
        )
        tpucared, pssh = best("tpucared"), best("parallel-ssh")
        out.append(
            {
                "fleet": fleet,
                "command": command,
                "workers": workers,
                "tpucared_default_median_s": default,
                "tpucared_best": tpucared,
                "tpucared_warm": best("tpucared-warm"),
                "parallel_ssh_best": pssh,
                "within_5_s": (
                    None
                    if workers != TARGET_WORKERS or tpucared is None
                    else tpucared["median_s"] <= TARGET_SECONDS
                ),
                "faster_than_parallel_ssh": (
                    None
                    if tpucared is None or pssh is None
                    else tpucared["median_s"] < pssh["median_s"]
                ),
            }
        )
    return out


async def run_async(settings: Settings, progress: Callable[[str], None] = print) -> dict[str, Any]:
    if shutil.which(PARALLEL_SSH) is None:
        raise RuntimeError("parallel-ssh is missing: apt-get install -y pssh")
    configure_logging(level="warning", json=True, stream=sys.stderr)
    started = time.monotonic()
    fleets: dict[str, dict[str, Any]] = {}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="tpucared-bench-fanout-") as tmp:
        scratch = Path(tmp)
        key_path = scratch / "client" / "id_ed25519"
        key = ensure_client_key(key_path, comment="tpucared-bench")
        for name in settings.fleets:
            async with FLEETS[name](max(settings.workers), key, key_path, scratch / name) as fleet:
                fleets[name] = {
                    "description": fleet.description,
                    **fleet.details,
                    "negotiated": await negotiated(fleet, key),
                }
                rows += await measure_fleet(settings, fleet, key, scratch, progress)
    rows += extrapolate_sequential(settings, rows)
    rows.sort(
        key=lambda r: (
            settings.fleets.index(r.fleet),
            r.workers,
            settings.commands.index(r.command),
        )
    )
    results = [_row_dict(r, rows) for r in rows]
    return {
        "settings": asdict(settings),
        "workload": WORKLOAD,
        "target": {"workers": TARGET_WORKERS, "seconds": TARGET_SECONDS},
        "fleets": fleets,
        "results": results,
        "verdicts": _verdicts(results),
        "seconds_total": round(time.monotonic() - started, 1),
    }


def run(
    quick: bool,
    *,
    workers: Sequence[int] | None = None,
    reps: int | None = None,
    fleets: Sequence[str] | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The benchmark (bench.run's entry). Keyword overrides make the tiny mode of the tests."""
    settings = settings_for(quick)
    if workers is not None:
        settings = replace(settings, workers=tuple(workers), sequential_max_workers=max(workers))
    if reps is not None:
        settings = replace(settings, reps=reps)
    if fleets is not None:
        settings = replace(settings, fleets=tuple(fleets))
    return asyncio.run(run_async(settings, progress))


def versions() -> dict[str, str | None]:
    return {"parallel-ssh": common._command_output([PARALLEL_SSH, "--version"])}


def render(result: dict[str, Any], *, markdown: bool = False) -> str:
    headers = [
        "fleet",
        "N",
        "command",
        "method",
        "runs",
        "ok",
        "median s",
        "p99 s",
        "min s",
        "max s",
        "client CPU s",
        "server CPU s",
        "vs pssh same -p",
    ]
    rows = []
    for r in result["results"]:
        s = r["seconds"]
        extrapolated = r["extrapolated_from"] is not None
        rows.append(
            [
                r["fleet"],
                str(r["workers"]),
                r["command"],
                r["label"],
                str(r["runs"]) if not extrapolated else "-",
                ("yes" if r["all_workers_ok"] else f"NO (min {r['ok_workers_min']})")
                if not extrapolated
                else "-",
                ("~" + common.format_seconds(r["median_s"]))
                if extrapolated
                else common.format_seconds(r["median_s"]),
                common.format_seconds(s.get("p99")),
                common.format_seconds(s.get("min")),
                common.format_seconds(s.get("max")),
                common.format_seconds(r["client_cpu_s"].get("median")),
                common.format_seconds(r["server_cpu_s"].get("median")),
                common.format_ratio(r["ratio_vs_parallel_ssh_same_p"]),
            ]
        )
    lines = [common.table(headers, rows, markdown=markdown), ""]
    for v in result["verdicts"]:
        lines.append(_verdict_line(v))
    return "\n".join(lines)


def _verdict_line(v: dict[str, Any]) -> str:
    """One fleet/command's verdict; a question not measured in this run is left out (the
    5 s target is judged at TARGET_WORKERS only)."""

    def said(best: dict[str, Any] | None) -> str:
        if best is None:
            return "not measured"
        return f"{common.format_seconds(best['median_s'])} s ({best['label']})"

    line = (
        f"{v['fleet']} {v['command']} at {v['workers']} workers: best tpucared "
        f"{said(v['tpucared_best'])} vs best parallel-ssh {said(v['parallel_ssh_best'])}"
    )
    if v["within_5_s"] is not None:
        verdict = "within" if v["within_5_s"] else "NOT within"
        line += f"; {verdict} {TARGET_SECONDS:g} s at {TARGET_WORKERS} workers"
    if v["faster_than_parallel_ssh"] is not None:
        line += (
            "; faster than parallel-ssh"
            if v["faster_than_parallel_ssh"]
            else ("; slower than parallel-ssh")
        )
    return line


# ---------------------------------------------------------------------------------------------
# Profiling (for the analysis in docs/benchmarks.md)


# AES-GCM first, as the emulator's servers order them: what the "ciphers" comparison tries.
AES_GCM_FIRST = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr", "aes256-ctr")


async def _profile(fleet_name: str, workers: int, concurrency: int, command: str, reps: int) -> str:
    """Where a cold tpucared fan-out spends its time, in three parts:

    1. the split of CPU between client and servers (no profiler), `reps` times, alternating
       asyncssh's default cipher order (chacha20-poly1305 first) with AES-GCM first;
    2. one run under cProfile with a CPU-time timer (the machine is shared, so wall-clock
       profiles mostly show waiting for a core). The profiler's own overhead inflates the
       Python-heavy parts: read the proportions, not the totals.
    """
    configure_logging(level="warning", json=True, stream=sys.stderr)
    out = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="tpucared-bench-profile-") as tmp:
        scratch = Path(tmp)
        key_path = scratch / "client" / "id_ed25519"
        key = ensure_client_key(key_path)
        async with FLEETS[fleet_name](workers, key, key_path, scratch / fleet_name) as fleet:
            targets = fleet.targets[:workers]
            await run_on_all(targets[:4], "true", key=key)  # first-use costs, untimed
            base = client_options(key)
            variants = {
                "default ciphers": base,
                "AES-GCM first": asyncssh.SSHClientConnectionOptions(
                    options=base, encryption_algs=list(AES_GCM_FIRST)
                ),
            }
            samples: dict[str, list[tuple[float, float, float]]] = {v: [] for v in variants}
            for _ in range(reps):
                for name, options in variants.items():
                    server, cpu = fleet.server_cpu(), time.process_time()
                    started = time.perf_counter()
                    async with ConnectionPool(
                        key, concurrency=concurrency, connect_timeout=60.0, options=options
                    ) as pool:
                        results = await run_on_all(targets, command, pool=pool)
                    wall = time.perf_counter() - started
                    if not all(r.ok for r in results):
                        raise RuntimeError(f"{name}: {[r for r in results if not r.ok][:3]}")
                    samples[name].append(
                        (wall, time.process_time() - cpu, fleet.server_cpu() - server)
                    )
                    await asyncio.sleep(PAUSE_BETWEEN_RUNS_S)
            out.write(
                f"{fleet_name}, {workers} workers, c={concurrency}, {command!r}, {reps} reps "
                "(medians; all workers ok):\n"
            )
            for name, runs in samples.items():
                wall, client, server = (
                    common.percentile([r[i] for r in runs], 50) for i in range(3)
                )
                out.write(
                    f"  {name:16} wall {wall:6.3f} s  client CPU {client:6.3f} s  "
                    f"server CPU {server:6.3f} s  per worker: client "
                    f"{client / workers * 1000:.1f} ms, server "
                    f"{server / workers * 1000:.1f} ms\n"
                )
            profiler = cProfile.Profile(time.process_time)
            profiler.enable()
            await run_on_all(targets, command, key=key, concurrency=concurrency)
            profiler.disable()
    out.write("\ncProfile (CPU time, default ciphers), by own time:\n")
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(20)
    stats.sort_stats("cumulative").print_stats(30)
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout")
    sub = parser.add_subparsers(dest="what", required=True)
    profile = sub.add_parser("profile", help="where a cold tpucared fan-out spends its time")
    profile.add_argument("--fleet", choices=list(FLEETS), default="sshd")
    profile.add_argument("--workers", type=int, default=256)
    profile.add_argument("--concurrency", type=int, default=64)
    profile.add_argument("--command", default="true")
    profile.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    if not 1 <= args.reps <= 20 or not 1 <= args.workers <= 1000:
        parser.error("--reps must be in 1..20 and --workers in 1..1000")
    text = asyncio.run(
        _profile(args.fleet, args.workers, args.concurrency, args.command, args.reps)
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
