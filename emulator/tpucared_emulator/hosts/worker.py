"""One simulated worker VM: an asyncssh server on the worker's own loopback address.

`SimulatedWorker` is what `SshWorkerHosts` (manager.py) starts for each worker of a READY node.
It listens on `worker.ip:port` with the worker's host key (the key getGuestAttributes
publishes), authenticates public keys against the node's current `ssh-keys` metadata
(keys.py), or against OS Login profiles when the emulator enforces OS Login (oslogin.py),
and runs each exec request as `bash -c COMMAND` (sh without bash), like sshd runs
the login shell: a local process in its own session, in the worker's home directory, with a
fresh login environment plus the tags that let processes.py find its descendants later. Stdin,
stdout and stderr are piped over the channel; the exit status (or signal) goes back. No PTY,
no shell sessions, no SFTP, no forwarding: the SSH layer needs exec only.

Layout of a worker's directory (the manager picks where it lives):

    home/   $HOME, the login directory
    tmp/    $TMPDIR (a VM's /tmp is its own; the host's /tmp is shared by every worker)
    dev/    fake TPU device files, created by `wedge()` / `hold_accelerator()`; the login
            environment's TPUCARED_DEVICE_ROOT (this directory) puts cleanup.sh's device
            patterns and libtpu lock file here, not on the machine's own /dev and /tmp

`halt()` is the preemption: no new connections or commands, every connection dropped, every
command's process group killed; the manager then kills detached descendants by tag, and
`wait_closed()` collects what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncssh
import structlog

from tpucared_emulator.hosts import keys
from tpucared_emulator.hosts.metadata import MetadataServer
from tpucared_emulator.hosts.processes import kill_processes

if TYPE_CHECKING:
    from tpucared_emulator.oslogin import OsLoginRegistry
    from tpucared_emulator.resources import Node
    from tpucared_emulator.workers import Worker

log = structlog.get_logger(__name__)

# How long a halted worker's command handlers get to notice their process died.
_HANDLER_GRACE_SECONDS = 2.0
_CHUNK = 65536


class SimulatedWorker:
    """The SSH server and processes of one worker of one node incarnation."""

    def __init__(
        self,
        node: Node,
        worker: Worker,
        directory: Path,
        *,
        port: int,
        shell: str,
        path: str,
        tags: Mapping[str, str],
        options: Mapping[str, object],
        os_login: OsLoginRegistry | None = None,
    ) -> None:
        self.node = node  # read on every login: a metadata patch takes effect at once
        self.worker = worker
        self.directory = directory
        self.port = port
        self.shell = shell
        self.path = path
        self.tags = dict(tags)
        self._os_login = os_login
        self.spawned = False  # a command ran since start: a kill needs the /proc scan
        self._options = asyncssh.SSHServerConnectionOptions(
            server_host_keys=[worker.host_key], process_factory=self._run_command, **options
        )
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._halted = False
        self._conns: set[asyncssh.SSHServerConnection] = set()
        self._procs: set[asyncio.subprocess.Process] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.metadata = MetadataServer(node, worker.ip, worker.index)  # its GCE_METADATA_HOST

    @property
    def home(self) -> Path:
        return self.directory / "home"

    @property
    def tmp(self) -> Path:
        return self.directory / "tmp"

    @property
    def dev(self) -> Path:
        return self.directory / "dev"

    def make_dirs(self) -> None:
        """Create home and tmp (blocking file system calls: the manager runs it in a thread)."""
        for path in (self.home, self.tmp):
            path.mkdir(parents=True, exist_ok=True)

    async def start(self) -> None:
        """Start listening (raises OSError if the address:port is taken)."""
        # SSH first: its port is fixed, the metadata server's is any free one on the same
        # address, which the kernel then picks around it. The other way round, one worker in
        # ~28,000 drew the SSH port for its metadata server and could not listen (seen at
        # 3,000 workers).
        self._acceptor = await asyncssh.listen(
            self.worker.ip,
            self.port,
            server_factory=lambda: _Server(self),
            options=self._options,
            reuse_address=True,
        )
        try:
            await self.metadata.start()
        except BaseException:
            self._acceptor.close()
            self._acceptor = None
            raise

    def authorized(self, username: str, key: asyncssh.SSHKey) -> bool:
        if self._os_login is not None:  # enforced: metadata ssh-keys are ignored
            return self._os_login.authorized(username, key)
        metadata = self.node.spec.get("metadata") or {}
        return keys.is_authorized(metadata, username, key)

    # -----------------------------------------------------------------------------------------
    # Preemption.

    def halt(self) -> None:
        """Stop listening, drop every connection, SIGKILL every command's process group."""
        self._halted = True
        if self._acceptor is not None:
            self._acceptor.close()
        for conn in list(self._conns):
            conn.abort()
        # Each command is its own session and group leader (start_new_session), so its pid is
        # its group: this kills what did not detach, at once and without /proc.
        pids = [p.pid for p in self._procs if p.returncode is None]
        kill_processes(pids, groups=pids)

    async def wait_closed(self) -> None:
        """After `halt()`: wait for the listener and the command handlers to finish."""
        try:
            if self._acceptor is not None:
                await self._acceptor.wait_closed()
                self._acceptor = None
        finally:
            await self.metadata.close()
        tasks = list(self._tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=_HANDLER_GRACE_SECONDS)
            for task in pending:  # a process that outlived SIGKILL (D state): stop waiting
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    # -----------------------------------------------------------------------------------------
    # Connections and commands.

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        if self._halted:
            conn.abort()
        else:
            self._conns.add(conn)

    def connection_lost(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conns.discard(conn)

    def _track(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_command(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        self._track()
        if process.command is None or process.subsystem is not None:
            process.stderr.write(b"This simulated TPU worker runs commands only (no shell).\n")
            process.exit(1)
            return
        if self._halted:
            process.exit_with_signal("KILL")
            return
        self.spawned = True
        try:
            proc = await asyncio.create_subprocess_exec(
                self.shell,
                "-c",
                process.command,
                cwd=self.home,
                env=self._environment(process),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its pid is its group: halt() can kill it whole
            )
        except OSError as exc:  # what sshd says when the shell cannot be run
            process.stderr.write(f"{self.shell}: {exc.strerror}\n".encode())
            process.exit(127)
            return
        self._procs.add(proc)
        if self._halted:  # halted while the process was being spawned
            kill_processes([proc.pid], groups=[proc.pid])
        try:
            await self._pipe(process, proc)
        finally:
            if proc.returncode is None:  # cancelled: never leave the process behind
                kill_processes([proc.pid], groups=[proc.pid])
                with contextlib.suppress(asyncio.CancelledError):
                    await proc.wait()
            self._procs.discard(proc)

    async def _pipe(
        self, process: asyncssh.SSHServerProcess[bytes], proc: asyncio.subprocess.Process
    ) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        feed = asyncio.create_task(_pump_in(process.stdin, proc.stdin))
        try:
            # Like sshd: done when the command exited AND its stdout/stderr closed (a background
            # child still holding them keeps the session open), whatever stdin is doing.
            status, *_ = await asyncio.gather(
                proc.wait(),
                _pump_out(proc.stdout, process.stdout),
                _pump_out(proc.stderr, process.stderr),
            )
        finally:
            feed.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feed
        with contextlib.suppress(OSError, asyncssh.Error):  # the client may be gone
            name = _signal_name(-status) if status < 0 else None
            if name is not None:
                process.exit_with_signal(name)
            else:  # an exit code, or a real-time signal (no SSH name): as a shell reports it
                process.exit(status if status >= 0 else 128 - status)

    def _environment(self, process: asyncssh.SSHServerProcess[bytes]) -> dict[str, str]:
        """A login environment, as sshd + PAM build it: nothing of the emulator's own leaks in
        except PATH (the tools of this machine are the tools of the simulated VM)."""
        user = str(process.get_extra_info("username") or "")
        peer_host, peer_port = (process.get_extra_info("peername") or ("", 0))[:2]
        # What a client may set itself: Debian's sshd_config has `AcceptEnv LANG LC_*`.
        env = {
            name: value
            for name, value in process.env.items()
            if name == "LANG" or name.startswith("LC_")
        }
        env.update(
            HOME=str(self.home),
            USER=user,
            LOGNAME=user,
            SHELL=self.shell,
            PATH=self.path,
            LANG=env.get("LANG", "C.UTF-8"),
            TMPDIR=str(self.tmp),
            SSH_CLIENT=f"{peer_host} {peer_port} {self.port}",
            SSH_CONNECTION=f"{peer_host} {peer_port} {self.worker.ip} {self.port}",
            TPUCARED_EMULATOR_WORKER_DIR=str(self.directory),
            TPUCARED_DEVICE_ROOT=str(self.directory),
            # A real VM's metadata server is metadata.google.internal; this worker's is its own.
            GCE_METADATA_HOST=self.metadata.address,
        )
        env.update(self.tags)
        return env

    # -----------------------------------------------------------------------------------------
    # A wedged TPU.

    async def wedge(self) -> dict[str, Any]:
        """Simulate a TPU left held by a dead workload: a stray process holding the (fake)
        device open, and a libtpu lock file. `cleanup_script(lockfile=..., device_patterns=
        [device_pattern])` clears it; the node's preemption kills the holder like any command.
        """
        return await self.hold_accelerator()

    async def hold_accelerator(self, *, stubborn: bool = False) -> dict[str, Any]:
        """Hold this worker's accelerator as `wedge` does; `stubborn`: a bad host, whose
        holder comes back at once whenever it is killed (as a device the kernel keeps busy
        would stay busy), until the node goes away."""
        if self._halted:
            raise RuntimeError("worker is not running")
        self.dev.mkdir(parents=True, exist_ok=True)
        device = self.dev / "accel0"
        lockfile = self.tmp / "libtpu_lockfile"
        device.touch()
        holder = await self._spawn_holder(device, lockfile)
        if stubborn:
            keeper = asyncio.create_task(self._keep_holding(holder, device, lockfile))
            self._tasks.add(keeper)
            keeper.add_done_callback(self._tasks.discard)
        return {
            "worker": self.worker.index,
            "pid": holder.pid,
            "device": str(device),
            "device_pattern": str(self.dev / "accel*"),
            "lockfile": str(lockfile),
            "stubborn": stubborn,
        }

    async def _keep_holding(
        self, holder: asyncio.subprocess.Process, device: Path, lockfile: Path
    ) -> None:
        while True:
            await holder.wait()
            if self._halted:
                return
            holder = await self._spawn_holder(device, lockfile)

    async def _spawn_holder(self, device: Path, lockfile: Path) -> asyncio.subprocess.Process:
        """A process holding `device` and `lockfile` open, reaped by a task of its own."""
        fds = [os.open(device, os.O_RDWR), os.open(lockfile, os.O_RDWR | os.O_CREAT, 0o644)]
        try:
            env = {"PATH": self.path, "HOME": str(self.home), **self.tags}
            self.spawned = True
            holder = await asyncio.create_subprocess_exec(
                "sleep",
                "2147483647",
                cwd=self.home,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=fds,
            )
        finally:
            for fd in fds:
                os.close(fd)
        self._procs.add(holder)
        lockfile.write_text(f"{holder.pid}\n")  # noqa: ASYNC240 (a few bytes in tmp, as before)
        # Reaped by this task whoever kills it (cleanup or preemption); halt() waits for it.
        reaper = asyncio.create_task(self._reap(holder), name=f"wedge-{holder.pid}")
        self._tasks.add(reaper)
        reaper.add_done_callback(self._tasks.discard)
        log.info("emulator.worker.wedged", ip=self.worker.ip, pid=holder.pid)
        return holder

    async def _reap(self, proc: asyncio.subprocess.Process) -> None:
        try:
            await proc.wait()
        finally:
            if proc.returncode is None:
                kill_processes([proc.pid], groups=[proc.pid])
            self._procs.discard(proc)


def _signal_name(number: int) -> str | None:
    """The SSH name of a signal ("KILL" for 9); None for a number without a name."""
    try:
        return signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return None


class _Server(asyncssh.SSHServer):
    """Per-connection callbacks: public keys only, checked against the node's metadata."""

    def __init__(self, worker: SimulatedWorker) -> None:
        self.worker = worker
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.worker.connection_made(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.worker.connection_lost(self.conn)

    def begin_auth(self, username: str) -> bool:
        return True  # authentication is always required

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return self.worker.authorized(username, key)


async def _pump_in(src: asyncssh.SSHReader[bytes], dst: asyncio.StreamWriter) -> None:
    """Channel -> the command's stdin, then EOF (how uploads arrive)."""
    with contextlib.suppress(OSError, asyncssh.Error):
        while chunk := await src.read(_CHUNK):
            dst.write(chunk)
            await dst.drain()
    with contextlib.suppress(OSError):
        dst.close()


async def _pump_out(src: asyncio.StreamReader, dst: asyncssh.SSHWriter[bytes]) -> None:
    """The command's stdout or stderr -> the channel. If the client went away, the output is
    read and dropped, so the command does not block on a full pipe."""
    writable = True
    while chunk := await src.read(_CHUNK):
        if not writable:
            continue
        try:
            dst.write(chunk)
            await dst.drain()
        except (OSError, asyncssh.Error):
            writable = False
