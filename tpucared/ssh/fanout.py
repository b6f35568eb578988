"""Run one command on every worker of a slice (or of many slices) and collect each outcome.

Owns `run_on_all()` and `WorkerResult`. Each worker is independent: bounded concurrency (the
pool's semaphore), its own retries with backoff and jitter for failures that happen before the
command starts (sshd not up yet, keys still propagating, connection storms), and a result that
always comes back, as data: exit status, the tails of stdout and stderr, or the kind of error.
Commands are never re-run once started, so a retry cannot launch a workload twice.

The SSH launcher (tpucared/launch/) calls this with its scripts wrapped by
`shell.sh_command`, `upload.py` with its write script, and `tpucared exec` with the user's
command.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import asyncssh
import structlog

from tpucared.ssh.errors import CLASSIFIED_ERRORS, SshErrorKind, classify, describe
from tpucared.ssh.hostkeys import HostKeyMismatch
from tpucared.ssh.pool import ConnectionPool
from tpucared.ssh.retry import DEFAULT_RETRY, RetryPolicy
from tpucared.ssh.target import Target

log = structlog.get_logger(__name__)

# Failed workers named in the summary line; the rest are counted.
_MAX_FAILURES_LOGGED = 10

Sleep = Callable[[float], Awaitable[object]]
PerTarget = Callable[[Target], str]
PerTargetBytes = Callable[[Target], bytes]


@dataclass(frozen=True)
class WorkerResult:
    worker: int
    host: str
    exit_status: int | None = None  # None when it did not run to completion (see error)
    exit_signal: str | None = None  # e.g. "KILL" when the remote process died of a signal
    stdout_tail: str = ""  # the last `tail_bytes` bytes, decoded with replacement
    stderr_tail: str = ""
    error: SshErrorKind | None = None
    error_message: str | None = None
    host_key: str | None = None  # seen on this connection: persist it when pinning by TOFU
    attempts: int = 0
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_status == 0

    @property
    def completed(self) -> bool:
        """The command ran to completion (whatever its exit status)."""
        return self.error is None and (self.exit_status is not None or self.exit_signal is not None)


@dataclass(frozen=True)
class _Failure:
    """An attempt that did not get a command started (or could not connect)."""

    kind: SshErrorKind
    message: str
    host_key: str | None


@dataclass(frozen=True)
class _Outcome:
    """What one started command produced."""

    exit_status: int | None
    exit_signal: str | None
    stdout: bytes
    stderr: bytes
    error: SshErrorKind | None = None
    message: str | None = None


class _Tail:
    """Keeps the last `limit` bytes of a stream without holding the whole stream."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()

    async def drain(self, stream: asyncssh.SSHReader[bytes]) -> None:
        while chunk := await stream.read(65536):
            self.data += chunk
            if len(self.data) > 2 * self.limit:
                del self.data[: -self.limit]

    def value(self) -> bytes:
        return bytes(self.data[-self.limit :]) if self.limit else b""


async def run_on_all(
    targets: Sequence[Target],
    command: str | PerTarget,
    *,
    pool: ConnectionPool | None = None,
    key: asyncssh.SSHKey | None = None,
    concurrency: int | None = None,
    connect_timeout: float | None = None,
    stdin: bytes | PerTargetBytes | None = None,
    command_timeout: float | None = 60.0,
    retry: RetryPolicy = DEFAULT_RETRY,
    tail_bytes: int = 64 * 1024,
    sleep: Sleep = asyncio.sleep,
    rng: random.Random | None = None,
    label: str = "command",
    quiet: bool = False,
    waits: bool = False,
) -> list[WorkerResult]:
    """Run `command` on every target; results in the order of `targets`.

    Pass the daemon's long-lived `pool`, or a `key` (with optional `concurrency`, default 64,
    and `connect_timeout`, default 10 s) for a one-off pool closed on return. `command` and
    `stdin` may be functions of the target (per-worker environment). `label` names the
    operation in logs; the command and stdin are never logged. `quiet`: a fan-out where every
    worker answered is logged at debug (the daemon's periodic probe of each slot). `waits`:
    the command mostly waits (a watch that runs for minutes): it takes one of the pool's
    `limit` only to connect and start, not for its whole run, or a few dozen watches would
    hold every slot of the bound and starve every other command of the daemon.
    """

    def runner_on(p: ConnectionPool) -> _Runner:
        return _Runner(p, command, stdin, command_timeout, retry, tail_bytes, sleep,
                       rng or random.Random(), label, waits)  # fmt: skip

    if pool is None:
        if key is None:
            raise TypeError("run_on_all needs a pool or a key")
        async with ConnectionPool(
            key,
            concurrency=concurrency or 64,
            connect_timeout=10.0 if connect_timeout is None else connect_timeout,
        ) as own_pool:
            return await _fan_out(runner_on(own_pool), targets, label, quiet)
    if key is not None or concurrency is not None or connect_timeout is not None:
        raise TypeError("key, concurrency and connect_timeout are settings of the pool")
    return await _fan_out(runner_on(pool), targets, label, quiet)


async def _fan_out(
    runner: _Runner, targets: Sequence[Target], label: str, quiet: bool
) -> list[WorkerResult]:
    """Every target at once, each on its own (`_Runner.run`); one summary line."""
    started = time.monotonic()
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(runner.run(t)) for t in targets]
    results = [t.result() for t in tasks]
    _log_summary(label, results, time.monotonic() - started, quiet)
    return results


def _log_summary(label: str, results: list[WorkerResult], elapsed: float, quiet: bool) -> None:
    """The one line per fan-out: counts, and which workers could not be reached and why."""
    failed = [r for r in results if r.error is not None]
    (log.warning if failed else log.debug if quiet else log.info)(
        "ssh.fanout",
        label=label,
        workers=len(results),
        ok=sum(r.ok for r in results),
        nonzero=sum(r.completed and not r.ok for r in results),
        errors=dict(Counter(r.error.value for r in failed if r.error)) or None,
        failed={
            f"{r.worker}@{r.host}": f"{r.error}: {r.error_message}"
            for r in failed[:_MAX_FAILURES_LOGGED]
        }
        or None,
        elapsed=round(elapsed, 3),
    )


@dataclass
class _Runner:
    pool: ConnectionPool
    command: str | PerTarget
    stdin: bytes | PerTargetBytes | None
    command_timeout: float | None
    retry: RetryPolicy
    tail_bytes: int
    sleep: Sleep
    rng: random.Random
    label: str
    waits: bool = False  # see run_on_all

    async def run(self, target: Target) -> WorkerResult:
        """All attempts on one worker, with backoff between failed connects."""
        started = time.monotonic()
        command = self.command(target) if callable(self.command) else self.command
        data = self.stdin(target) if callable(self.stdin) else self.stdin
        attempt = 0
        while True:
            attempt += 1
            tried = await self._attempt(target, command, data)
            if not isinstance(tried, _Failure):
                outcome, host_key = tried
                return self._result(target, outcome, host_key, attempt, started)
            fields = {
                "label": self.label,
                "worker": target.worker,
                "host": target.host,
                "error": tried.kind.value,
                "message": tried.message,
            }
            delay = self.retry.pause(tried.kind, attempt, self.rng.random)
            if delay is None:
                log.debug("ssh.worker_failed", attempts=attempt, **fields)
                return WorkerResult(
                    worker=target.worker,
                    host=target.host,
                    error=tried.kind,
                    error_message=tried.message,
                    host_key=tried.host_key,
                    attempts=attempt,
                    elapsed=time.monotonic() - started,
                )
            log.debug(
                "ssh.retry",
                attempt=f"{attempt}/{self.retry.attempts}",
                delay=round(delay, 2),
                **fields,
            )
            await self.sleep(delay)

    async def _attempt(
        self, target: Target, command: str, data: bytes | None
    ) -> tuple[_Outcome, str] | _Failure:
        """One try: lease a connection and run the command on it.

        If the session cannot even start on a pooled connection, the connection probably died
        since its last use (a preempted worker, an idle timeout): it is replaced once at once,
        without spending an attempt.
        """
        host_key: str | None = None
        for may_replace in (True, False):
            try:
                async with self._bounded() as bound, self.pool.lease(target) as lease:
                    host_key = lease.connection.host_key
                    try:
                        outcome = await _execute(
                            lease.connection.conn,
                            command,
                            data,
                            self.command_timeout,
                            self.tail_bytes,
                            on_started=bound.release if self.waits else None,
                        )
                    except CLASSIFIED_ERRORS:
                        await self.pool.discard(lease.connection)
                        if lease.reused and may_replace:
                            continue
                        raise
                    if outcome.error is SshErrorKind.LOST:
                        await self.pool.discard(lease.connection)
                    return outcome, host_key
            except CLASSIFIED_ERRORS as exc:
                seen = exc.seen if isinstance(exc, HostKeyMismatch) else host_key
                return _Failure(classify(exc), describe(exc), seen)
        raise AssertionError("unreachable: the second pass returns or raises")

    @contextlib.asynccontextmanager
    async def _bounded(self) -> AsyncIterator[_Bound]:
        """One of the pool's `limit` for the block, or until `release()` (once started)."""
        bound = _Bound(self.pool.limit)
        await self.pool.limit.acquire()
        try:
            yield bound
        finally:
            bound.release()

    def _result(
        self,
        target: Target,
        outcome: _Outcome,
        host_key: str | None,
        attempt: int,
        started: float,
    ) -> WorkerResult:
        return WorkerResult(
            worker=target.worker,
            host=target.host,
            exit_status=outcome.exit_status,
            exit_signal=outcome.exit_signal,
            stdout_tail=outcome.stdout.decode(errors="replace"),
            stderr_tail=outcome.stderr.decode(errors="replace"),
            error=outcome.error,
            error_message=outcome.message,
            host_key=host_key,
            attempts=attempt,
            elapsed=time.monotonic() - started,
        )


class _Bound:
    """A held slot of a semaphore, released at most once."""

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore: asyncio.Semaphore | None = semaphore

    def release(self) -> None:
        if self._semaphore is not None:
            self._semaphore.release()
            self._semaphore = None


async def _execute(
    conn: asyncssh.SSHClientConnection,
    command: str,
    stdin: bytes | None,
    command_timeout: float | None,
    tail_bytes: int,
    on_started: Callable[[], None] | None = None,
) -> _Outcome:
    """Run one command on an open connection.

    Raises (a classified error) only if the session could not be started; once it has, every
    failure is returned as an outcome, because the command may have had effects.
    """
    proc = await conn.create_process(command, encoding=None)
    if on_started is not None:
        on_started()
    out, err = _Tail(tail_bytes), _Tail(tail_bytes)
    try:
        async with asyncio.timeout(command_timeout):
            await asyncio.gather(_feed(proc, stdin), out.drain(proc.stdout), err.drain(proc.stderr))
            await proc.wait_closed()
    except TimeoutError:
        # Closing the channel does not kill the remote process (no pty, no signal support in
        # OpenSSH); scripts that may hang bound themselves, and detached runs are probed.
        proc.close()
        return _Outcome(
            None,
            None,
            out.value(),
            err.value(),
            SshErrorKind.COMMAND_TIMEOUT,
            f"no exit status within {command_timeout} s",
        )
    except CLASSIFIED_ERRORS as exc:
        proc.close()
        return _Outcome(None, None, out.value(), err.value(), SshErrorKind.LOST, describe(exc))
    signal = proc.exit_signal
    if signal is not None:
        return _Outcome(None, signal[0], out.value(), err.value())
    if proc.exit_status is None:
        return _Outcome(
            None,
            None,
            out.value(),
            err.value(),
            SshErrorKind.LOST,
            "channel closed without an exit status",
        )
    return _Outcome(proc.exit_status, None, out.value(), err.value())


async def _feed(proc: asyncssh.SSHClientProcess[bytes], data: bytes | None) -> None:
    """Write stdin then EOF. A command that exits without reading it is not an error."""
    with contextlib.suppress(*CLASSIFIED_ERRORS):
        if data:
            proc.stdin.write(data)
            await proc.stdin.drain()
        proc.stdin.write_eof()
