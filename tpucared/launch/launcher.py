"""The SSH launcher: the Launcher port (tpucared/ports/launcher.py) over tpucared/ssh/.

Owns `SshLauncher`, what the daemon runs workloads with: every operation is one fan-out
(`ssh.run_on_all`) of one of this package's scripts over the daemon's long-lived
`ConnectionPool`, each worker's answer parsed into the port's values (`Reply`), never raised.
A slice's workers are located from their records (addresses) and the host keys the runtime
pinned for their incarnation (the port's `HostKeys`: runtime/workload/hosts.py `WorkerHosts`,
given in by the wiring), and the host key each unpinned worker presents goes back to it to be
pinned on first use. Where a run lives on a worker is `layout.py`; the environment contract is
`environment.py`; the scripts and their parsers are `scripts.py`.

`LaunchOptions` are the SSH side's settings (timeouts, retries, what counts as the TPU for a
cleanup, how many connections are kept: `pool_size`).
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

import asyncssh

from tpucared.core.model.observed import WorkerEndpoint
from tpucared.core.model.records import IncarnationRecord, WorkerRecord
from tpucared.launch import layout
from tpucared.launch.environment import workload_environment
from tpucared.launch.provision import secrets_file_contents
from tpucared.launch.scripts import (
    DEFAULT_DEVICE_PATTERNS,
    DEFAULT_LIBTPU_LOCKFILE,
    cleanup_script,
    launch_script,
    notice_wait_script,
    parse_cleanup,
    parse_launch,
    parse_notice_wait,
    parse_probe,
    probe_script,
    signal_script,
)
from tpucared.ports.launcher import (
    CleanupResult,
    HealthCheck,
    HostKeys,
    Launch,
    LaunchResult,
    NoticeResult,
    NoticeWait,
    Place,
    ProbeResult,
    Reply,
    Run,
    WorkerFile,
    WorkerLost,
)
from tpucared.ssh import (
    DEFAULT_RETRY,
    NO_RETRY,
    ConnectionPool,
    FileUpload,
    RetryPolicy,
    ScriptOutputError,
    Target,
    WorkerResult,
    run_on_all,
    sh_command,
    targets_for_node,
    upload,
)

T = TypeVar("T")

# The first probe of a node: ~20 s of retrying a connection that fails before the command
# starts (refused: sshd not up; keys still propagating), 0.5 s doubling up to 5 s.
FIRST_PROBE_RETRY = RetryPolicy(attempts=8, initial_delay=0.5, multiplier=2.0, max_delay=5.0)


@dataclass(frozen=True)
class LaunchOptions:
    # One short command per worker per tick, never retried (the next tick is the retry).
    probe_timeout: float = 20.0
    # Launch waits up to 60 s for a concurrent launch's lock; uploads carry the files.
    command_timeout: float = 120.0
    retry: RetryPolicy = DEFAULT_RETRY
    first_probe_retry: RetryPolicy = FIRST_PROBE_RETRY
    # Cleanup: how long the run's process group gets after TERM before KILL; what counts as
    # the TPU (device files and the libtpu lock file) on the workers.
    cleanup_grace: float = 5.0
    device_patterns: tuple[str, ...] = DEFAULT_DEVICE_PATTERNS
    lockfile: str = DEFAULT_LIBTPU_LOCKFILE
    # Pooled connections kept, least recently used idle ones closed first; None: `pool_size()`.
    max_idle_connections: int | None = None


# File descriptors kept for everything but pooled connections: the commands in flight beyond
# the pool (ssh.concurrency), the database, the HTTP server and API clients, the logs.
FD_RESERVE = 1024
MIN_POOL = 64


def pool_size(open_files_limit: int | None = None) -> int:
    """How many connections the pool keeps: one per worker probed, as far as the open files
    limit allows (the daemon raises its soft limit to the hard one at start). Every probe
    visits every worker in turn, so a pool smaller than the workers helps no probe at all
    (the least recently used connection is always the next one needed) and each pays a
    handshake (~4 ms of CPU) instead of a channel. A connection costs ~23 KiB of RSS
    (asyncssh 2.24): 4,000 workers ~90 MB; 40,000 (10,000 v4-32 slices) ~0.9 GB."""
    if open_files_limit is None:
        open_files_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_files_limit == resource.RLIM_INFINITY:
        open_files_limit = 1 << 20
    # Half of a small limit (1024: 512 pooled, as before the limit was raised).
    return max(MIN_POOL, open_files_limit - min(FD_RESERVE, open_files_limit // 2))


def why_failed(r: WorkerResult) -> str:
    """Why a worker's command did not succeed, in one line: the SSH error, the signal, or the
    exit status with the last line of stderr."""
    if r.error is not None:
        return f"{r.error.value}: {r.error_message}"
    if r.exit_signal is not None:
        return f"killed by SIG{r.exit_signal}"
    tail = r.stderr_tail.strip().splitlines()[-1:] or [""]
    return f"exit {r.exit_status}" + (f": {tail[0][:200]}" if tail[0] else "")


def parsed(r: WorkerResult, parse: Callable[[str], T], *, launch: bool = False) -> Reply[T]:
    """A worker's answer parsed, or why there is none: the command did not succeed, or its
    answer is unreadable. A `launch` answer is read whatever its exit status (launch.sh says
    why it could not start in its marker line), and an unreadable one says how it ended."""
    if not r.completed or (r.exit_status != 0 and not launch):
        return Reply(r.worker, why=why_failed(r))
    try:
        return Reply(r.worker, parse(r.stdout_tail))
    except ScriptOutputError as exc:
        return Reply(r.worker, why=f"{why_failed(r)}: {exc}" if launch else str(exc))


Login = tuple[str, int, bool]  # user, port, internal_ip


def place_of(
    inc: IncarnationRecord,
    workers: Sequence[WorkerRecord],
    login: Login,
    pins: Mapping[int, Sequence[str]],
) -> Place | str:
    """The workers' SSH targets as `login` reaches them, host keys pinned as `pins` says, or
    why there are none (e.g. no external IP)."""
    user, port, internal_ip = login
    try:
        targets = targets_for_node(
            [WorkerEndpoint(w.index, w.internal_ip, w.external_ip) for w in workers],
            user=user,
            port=port,
            internal_ip=internal_ip,
            pinned_host_keys=pins,
            incarnation=str(inc.id),
        )
    except ValueError as exc:
        return str(exc)
    return Place(inc, len(targets), targets)


def targets_of(place: Place) -> list[Target]:
    """The targets this launcher located (`SshLauncher.locate`)."""
    return cast(list[Target], place.handle)


class SshLauncher:
    """The Launcher port over SSH: one long-lived pool, host keys pinned through `hosts`.
    Workers are reached as `user` on `port`, at their external address unless `internal_ip`
    (as gcloud does)."""

    def __init__(
        self,
        key: asyncssh.SSHKey,
        hosts: HostKeys,
        *,
        user: str,
        port: int = 22,
        internal_ip: bool = False,
        concurrency: int = 64,
        options: LaunchOptions | None = None,
    ) -> None:
        self._options = options or LaunchOptions()
        self._hosts = hosts
        self._login = (user, port, internal_ip)
        self.on_lost: Callable[[WorkerLost], None] | None = None
        self._pool = ConnectionPool(
            key,
            concurrency=concurrency,
            max_connections=self._options.max_idle_connections or pool_size(),
            on_lost=self._connection_lost,
        )

    def _connection_lost(self, target: Target) -> None:
        if self.on_lost is not None:
            known = target.incarnation  # str(IncarnationRecord.id), as `locate` names it
            inc = int(known) if known and known.isdigit() else None
            self.on_lost(WorkerLost(inc, target.worker, target.host))

    async def close(self) -> None:
        await self._pool.close()

    async def forget(self, live: set[int]) -> None:
        await self._pool.prune_incarnations({str(i) for i in live})

    async def locate(self, inc: IncarnationRecord, workers: Sequence[WorkerRecord]) -> Place | str:
        """The workers' SSH targets, with every pin known, or why there are none (e.g. no
        external IP)."""
        return place_of(inc, workers, self._login, await self._hosts.pins(inc, workers))

    async def _remember(
        self, inc: IncarnationRecord, targets: Iterable[Target], results: Iterable[WorkerResult]
    ) -> None:
        """Trust on first use: the key each worker without a pin presented, to be pinned."""
        unpinned = {t.worker for t in targets if not t.pinned_host_keys}
        seen = {r.worker: r.host_key for r in results if r.host_key and r.worker in unpinned}
        if seen:  # the usual case is none: every worker pinned, nothing to read or write
            await self._hosts.remember(inc, seen)

    async def _run(
        self, place: Place, command: str | Callable[[Target], str], label: str,
        seconds: float | None = None,
    ) -> list[WorkerResult]:  # fmt: skip
        """One fan-out over the place's workers; the host keys seen are pinned."""
        targets = targets_of(place)
        results = await run_on_all(
            targets,
            command,
            pool=self._pool,
            retry=self._options.retry,
            command_timeout=seconds or self._options.command_timeout,
            label=label,
        )
        await self._remember(place.inc, targets, results)
        return results

    async def probe(
        self, runs: Sequence[tuple[Place, Run]], *, patient: bool = False, quiet: bool = False,
        only: bool = False,
    ) -> list[list[Reply[ProbeResult]]]:  # fmt: skip
        """One fan-out over every worker of every place (`probe.sh` in the run's directory)."""
        commands: dict[Target, str] = {}
        for place, run in runs:
            command = sh_command(probe_script(layout.attempt_dir(run.run_id, run.attempt)))
            commands.update({t: command for t in targets_of(place)})
        results: list[WorkerResult] = []
        if commands:
            results = await run_on_all(
                list(commands),
                lambda t: commands[t],
                pool=self._pool,
                retry=self._options.first_probe_retry if patient else NO_RETRY,
                command_timeout=self._options.probe_timeout,
                label="probe",
                quiet=quiet,  # one line per slot per poll: at info only when a worker failed
            )
        by_target = dict(zip(commands, results, strict=True))
        replies: list[list[Reply[ProbeResult]]] = []
        for place, _ in runs:
            answers = [by_target[t] for t in targets_of(place)]
            await self._remember(place.inc, targets_of(place), answers)
            replies.append([parsed(r, parse_probe) for r in answers])
        if only:
            await self._pool.prune(commands)
        return replies

    async def install(
        self, place: Place, run_id: str, files: Sequence[WorkerFile], secrets: Mapping[str, str]
    ) -> dict[int, str]:
        uploads = [FileUpload(f.remote, f.content, f.mode) for f in files]
        if secrets:
            # Overwritten at every launch: the values are the daemon's current ones.
            contents = secrets_file_contents(secrets)
            uploads.append(FileUpload(layout.secrets_path(run_id), contents, 0o600))
        targets = targets_of(place)
        results = await upload(
            targets,
            uploads,
            pool=self._pool,
            retry=self._options.retry,
            command_timeout=self._options.command_timeout,
        )
        await self._remember(place.inc, targets, results)
        return {r.worker: why_failed(r) for r in results if not r.ok}

    async def launch(self, place: Place, launch: Launch) -> list[Reply[LaunchResult]]:
        """`launch.sh` on every worker, with each worker's contract environment."""
        run = launch.run
        assert run.attempt is not None
        run_dir = layout.attempt_dir(run.run_id, run.attempt)
        command = layout.workload_command(launch.spec)
        secrets_file = layout.secrets_path(run.run_id) if launch.secrets else None

        def launch_for(t: Target) -> str:
            env = workload_environment(
                fleet=launch.fleet,
                slot=launch.slot,
                node=place.inc.node_name,
                worker=t.worker,
                num_workers=place.size,
                run_id=run.run_id,
                attempt=run.attempt or 0,
                preemptions=launch.preemptions,
                failures=launch.failures,
                env=launch.spec.env,
                slice_of=launch.slice_of,
            )
            stop = launch.spec.stop_signal
            return sh_command(launch_script(run_dir, command, env, secrets_file, stop_signal=stop))

        results = await self._run(place, launch_for, "launch")
        return [parsed(r, parse_launch, launch=True) for r in results]

    async def cleanup(
        self, place: Place, run: Run | None, health: HealthCheck | None = None
    ) -> list[Reply[CleanupResult]]:
        """`cleanup.sh` on every worker: the run's group, then whatever holds the TPU, then
        the fleet's health check; one command per worker (the pre-launch check)."""
        script = cleanup_script(
            layout.attempt_dir(run.run_id, run.attempt) if run is not None else None,
            grace_seconds=self._options.cleanup_grace,
            device_patterns=self._options.device_patterns,
            lockfile=self._options.lockfile,
            health_check=health.command if health is not None else None,
            health_timeout=health.timeout if health is not None else 60.0,
        )
        timeout = self._options.command_timeout
        if health is not None:  # the check's own time on top of the cleanup's
            timeout += health.timeout + 5
        results = await self._run(place, sh_command(script), "cleanup", timeout)
        return [parsed(r, parse_cleanup) for r in results]

    async def wait_notice(
        self, place: Place, run: Run, what: NoticeWait, seconds: float
    ) -> NoticeResult | str:
        """`notice_wait.sh` on the place's worker 0."""
        run_dir = layout.attempt_dir(run.run_id, run.attempt)
        (result,) = await run_on_all(
            targets_of(place)[:1],
            sh_command(notice_wait_script(run_dir, what, seconds)),
            pool=self._pool,
            retry=NO_RETRY,
            command_timeout=seconds + 30,
            label="notice",
            quiet=True,
            waits=True,  # minutes long, one per running slice: must not hold the pool's bound
        )
        reply = parsed(result, parse_notice_wait)
        return reply.value if reply.value is not None else reply.why or "no answer"

    async def signal(self, place: Place, run: Run, signal: str) -> int:
        """`signal.sh` on every worker: the signal to the run's process group."""
        script = sh_command(signal_script(layout.attempt_dir(run.run_id, run.attempt), signal))
        done = await run_on_all(
            targets_of(place),
            script,
            pool=self._pool,
            retry=self._options.retry,
            command_timeout=self._options.probe_timeout,
            label="signal",
        )
        return sum(1 for r in done if r.completed and "state=sent" in r.stdout_tail)
