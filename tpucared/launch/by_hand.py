"""The by-hand side of the SSH launcher: the `ByHand` port (tpucared/ports/launcher.py) that
`tpucared logs`, `exec` and `cp` (runtime/workload/by_hand.py) reach the workers through.

Owns `SshByHand`: a slice's workers located from their records only (the host keys the daemon
pinned; a worker it never reached is trusted on first use and not pinned: these commands
write nothing), and each command over a connection pool of its own with the daemon's key,
which is never generated here (no node would accept a new one). A reply's status is what a
shell reports (`status_of`).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

import asyncssh

from tpucared.core.model.records import IncarnationRecord, WorkerRecord
from tpucared.launch import layout
from tpucared.launch.launcher import place_of, targets_of
from tpucared.launch.scripts import log_tail_command
from tpucared.ports.launcher import HandReply, Place, Run, WorkerFile
from tpucared.ssh import (
    ConnectionPool,
    FileUpload,
    KeyFileError,
    Target,
    WorkerResult,
    ensure_client_key,
    run_on_all,
    upload,
)
from tpucared.ssh.errors import CLASSIFIED_ERRORS, classify, describe

SSH_FAILED = 255  # what ssh exits with when it cannot run the command


class SshByHand:
    """The `ByHand` port over SSH, as `user` on `port` (internal addresses if `internal_ip`),
    with the key at `key_path` and at most `concurrency` commands at once."""

    def __init__(
        self, key_path: Path, *, user: str, port: int = 22, internal_ip: bool = False,
        concurrency: int = 64,
    ) -> None:  # fmt: skip
        self._key_path = key_path
        self._login = (user, port, internal_ip)
        self._concurrency = concurrency

    def locate(self, inc: IncarnationRecord, workers: Sequence[WorkerRecord]) -> Place | str:
        return place_of(inc, workers, self._login, {w.index: w.host_keys for w in workers})

    async def log(
        self, place: Place, worker: int, run: Run, *, lines: int, follow: bool,
        out: BinaryIO, err: TextIO,
    ) -> HandReply:  # fmt: skip
        assert run.attempt is not None
        run_dir = layout.attempt_dir(run.run_id, run.attempt)
        command = log_tail_command(run_dir, lines=lines, follow=follow)
        (target,) = _targets([(place, worker)])
        async with self._connections() as pool:
            try:
                async with pool.lease(target) as lease:
                    proc = await lease.connection.conn.create_process(command, encoding=None)
                    await asyncio.gather(_copy(proc.stdout, out), _copy_text(proc.stderr, err))
                    await proc.wait_closed()
            except CLASSIFIED_ERRORS as exc:
                why = f"{classify(exc).value}: {describe(exc)}"
                return HandReply(SSH_FAILED, completed=False, why=why)
        status = proc.exit_status
        return HandReply(SSH_FAILED if status is None else status)

    async def run(self, workers: Sequence[tuple[Place, int]], command: str) -> list[HandReply]:
        async with self._connections() as pool:
            results = await run_on_all(
                _targets(workers),
                command,
                pool=pool,
                command_timeout=None,
                tail_bytes=16 * 1024 * 1024,
                label="exec",
            )
        return [_reply(r) for r in results]

    async def copy(self, workers: Sequence[tuple[Place, int]], file: WorkerFile) -> list[HandReply]:
        upload_ = FileUpload(file.remote, file.content, file.mode)
        async with self._connections() as pool:
            results = await upload(_targets(workers), [upload_], pool=pool)
        return [_reply(r) for r in results]

    @asynccontextmanager
    async def _connections(self) -> AsyncIterator[ConnectionPool]:
        """A connection pool with the daemon's key, for one command."""
        key = await asyncio.to_thread(_load_key, self._key_path)
        async with ConnectionPool(key, concurrency=self._concurrency) as pool:
            yield pool


def _targets(workers: Sequence[tuple[Place, int]]) -> list[Target]:
    by_place = {id(place): {t.worker: t for t in targets_of(place)} for place, _ in workers}
    return [by_place[id(place)][index] for place, index in workers]


def _load_key(path: Path) -> asyncssh.SSHKey:
    """The daemon's key; never generated here (no node would accept a new one)."""
    if not path.exists():
        raise ValueError(f"no SSH key at {path}: the daemon creates it when it starts")
    try:
        return ensure_client_key(path)
    except KeyFileError as exc:
        raise ValueError(str(exc)) from exc


async def _copy(stream: asyncssh.SSHReader[bytes], out: BinaryIO) -> None:
    while chunk := await stream.read(65536):
        out.write(chunk)
        out.flush()


async def _copy_text(stream: asyncssh.SSHReader[bytes], err: TextIO) -> None:
    while chunk := await stream.read(65536):
        err.write(chunk.decode(errors="replace"))


def _reply(r: WorkerResult) -> HandReply:
    return HandReply(
        status_of(r), r.completed, _failure(r), stdout=r.stdout_tail, stderr=r.stderr_tail
    )


def _failure(r: WorkerResult) -> str:
    if r.error is not None:
        return f"ssh {r.error.value}: {r.error_message}"
    if r.exit_signal is not None:
        return f"killed by SIG{r.exit_signal}"
    return f"exit {r.exit_status}"


def status_of(r: WorkerResult) -> int:
    """As a shell reports it: the exit status, 128 + the signal, 255 for SSH failures."""
    if r.error is not None:
        return SSH_FAILED
    if r.exit_signal is not None:
        try:
            return 128 + signal.Signals[f"SIG{r.exit_signal}"].value
        except KeyError:
            return SSH_FAILED
    return r.exit_status or 0
