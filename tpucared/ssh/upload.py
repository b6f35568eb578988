"""Copying files to every worker: `tpucared cp`, the workload's `files`, the secrets file.

Owns `FileUpload`, `upload()` and `write_file_script` (sh/write_file.sh, the one script of
the transport's own). Content travels on the SSH channel's stdin into that script (atomic,
size-checked, created under umask 077), so it needs only an exec-capable server (no SFTP
subsystem: the emulator's simulated hosts qualify) and a secret never appears in a command
line.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from tpucared.ssh import shfiles
from tpucared.ssh.fanout import Sleep, WorkerResult, run_on_all
from tpucared.ssh.pool import ConnectionPool
from tpucared.ssh.retry import DEFAULT_RETRY, RetryPolicy
from tpucared.ssh.shell import path_expr, quote, sh_command
from tpucared.ssh.target import Target


def write_file_script(remote_path: str, *, mode: int, size: int) -> str:
    """A script (sh/write_file.sh) that writes its stdin to `remote_path` atomically with
    `mode`.

    Created under umask 077 (a secret is never readable by others, not even between write and
    chmod), size-checked against `size` so a connection dropped mid-transfer cannot install a
    truncated file, then renamed into place. Missing parent directories are created 0700.
    Prints `TPUCARED_WRITE state=ok bytes=N`.
    """
    if not 0 <= mode <= 0o7777:
        raise ValueError(f"invalid file mode {mode:o}")
    args = [path_expr(remote_path), quote(str(int(size))), quote(f"{mode:04o}")]
    return shfiles.script("write_file", args)


@dataclass(frozen=True)
class FileUpload:
    remote: str  # absolute, relative to the login home, or "~/..."
    content: bytes
    mode: int = 0o644

    @classmethod
    def from_local(
        cls, local: str | os.PathLike[str], remote: str, mode: int | None = None
    ) -> FileUpload:
        """Read a local file; by default the remote file gets the local permission bits."""
        path = Path(local)
        if not path.is_file():
            raise ValueError(f"{path} is not a regular file (directories are not supported)")
        return cls(remote, path.read_bytes(), path.stat().st_mode & 0o777 if mode is None else mode)

    def __repr__(self) -> str:
        # Never print the content: it may be the secrets file.
        return (
            f"FileUpload(remote={self.remote!r}, bytes={len(self.content)}, mode={self.mode:04o})"
        )


async def upload(
    targets: Sequence[Target],
    files: Sequence[FileUpload],
    *,
    pool: ConnectionPool | None = None,
    key: asyncssh.SSHKey | None = None,
    concurrency: int | None = None,
    connect_timeout: float | None = None,
    command_timeout: float | None = 300.0,
    retry: RetryPolicy = DEFAULT_RETRY,
    sleep: Sleep = asyncio.sleep,
    rng: random.Random | None = None,
) -> list[WorkerResult]:
    """Write each file to every target; one result per target, in order.

    Files go one after the other, workers in parallel. A worker's result is its first failed
    write, or its last write if all succeeded; a worker that failed one file is not sent the
    rest. The keyword arguments are those of `run_on_all`.
    """
    results: list[WorkerResult | None] = [None] * len(targets)
    remaining = list(range(len(targets)))
    for file in files:
        if not remaining:
            break
        script = write_file_script(file.remote, mode=file.mode, size=len(file.content))
        batch = await run_on_all(
            [targets[i] for i in remaining],
            sh_command(script),
            stdin=file.content,
            pool=pool,
            key=key,
            concurrency=concurrency,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
            retry=retry,
            sleep=sleep,
            rng=rng,
            label="upload",
        )
        for i, result in zip(remaining, batch, strict=True):
            results[i] = result
        remaining = [i for i, r in zip(remaining, batch, strict=True) if r.ok]
    return [r for r in results if r is not None]
