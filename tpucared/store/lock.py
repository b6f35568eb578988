"""The single-writer lock: one `tpucared run` per SQLite database, held for the process's life.

An exclusive, non-blocking `flock` on a file next to the database (`state.db.lock`; never on the
database itself, whose POSIX locks are SQLite's: a `lockf` there would break them). The kernel
releases it when the process exits, however it exits (`kill -9` included), so it is never stale
and never needs clearing by hand. Once it holds the lock, the holder writes its pid and host
into the file; a second daemon reads them to say who holds the database, and touches nothing
else: not the database, not the HTTP port, not the calls the first one has in flight.

Where it sits: the daemon (`tpucared run`, and the demo and babysit through it) takes it first
thing in `runtime.resources.open_resources`, before it migrates or opens anything, and holds it
until the process ends; `tpucared db upgrade` holds it while it migrates (a schema must not change
under a running daemon). Readers (`status`, `events`, `plan`, `logs`, `exec`, `cp`) never take
it, and neither do `down` / `up`, which are meant to run beside a daemon: they only mark fleets
and delete nodes, in short transactions the daemon's store is built to share. For databases
that are not SQLite files (in-memory, PostgreSQL) it does nothing.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from sqlalchemy.engine import URL

from tpucared.store.engine import check_file, database_url, lock_file_error, sqlite_path
from tpucared.store.errors import DatabaseError

# How long a second process waits for the holder to write its pid (it does so right after
# taking the lock) before saying it does not know the pid.
_HOLDER_WAIT_S = 1.0


class LockHeld(DatabaseError):
    """Another process holds the database's writer lock."""

    def __init__(self, database: Path, pid: int | None, host: str | None) -> None:
        who = "pid unknown" if pid is None else f"pid {pid}"
        if host and host != socket.gethostname():
            who += f" on {host}"
        super().__init__(f"another tpucared ({who}) holds {database}")
        self.database = database
        self.pid = pid
        self.host = host


def lock_path(database: Path) -> Path:
    """`DB.lock`, next to the file SQLite really opens: a symlink to the database, or a
    `sqlite:///` URL naming it another way, leads to the same lock as the plain path."""
    real = database.resolve()
    return real.with_name(real.name + ".lock")


class WriterLock:
    """`with WriterLock(setting):` holds the database's writer lock, or raises `LockHeld` (or a
    `DatabaseError` when the lock file cannot be made: a directory, a read-only place)."""

    def __init__(self, setting: str | os.PathLike[str] | URL) -> None:
        url = setting if isinstance(setting, URL) else database_url(setting)
        self.database = sqlite_path(url)
        self.path = None if self.database is None else lock_path(self.database)
        self._fd: int | None = None

    def acquire(self) -> None:
        if self.database is None or self.path is None or self._fd is not None:
            return
        check_file(self.database)  # a directory, a read-only file: refused as the migration would
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Not O_TRUNC: the file may be the holder's, with its pid in it.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise lock_file_error(exc, self.database) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise lock_file_error(exc, self.database) from exc
            raise LockHeld(self.database, *self._holder()) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # still ours: no stale pid for a person to puzzle over
        finally:
            os.close(fd)  # releases the lock

    def _holder(self) -> tuple[int | None, str | None]:
        """The holder's pid and host, from the lock file."""
        assert self.path is not None
        deadline = time.monotonic() + _HOLDER_WAIT_S
        while True:
            try:
                holder = json.loads(self.path.read_text(encoding="utf-8"))
                return int(holder["pid"]), str(holder.get("host") or "") or None
            except (OSError, ValueError, KeyError, TypeError):
                if time.monotonic() >= deadline:
                    return None, None
            time.sleep(0.02)

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
