"""The single-writer lock (`tpucared.store.lock`) between real processes: a holder started with
`python -c`, and this test's process trying to take the same lock.

The holder's pid comes back in the refusal, exactly as the daemon prints it; the lock dies with
its holder, `kill -9` included; a holder that wrote no pid is `pid unknown`; the database file
itself is never locked (SQLite keeps its own locks on it); a symlink to the database is the same
database; databases that are not SQLite files take no lock at all.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tpucared.store.errors import DatabaseError
from tpucared.store.lock import LockHeld, WriterLock, lock_path

# Takes the daemon's lock on argv[1], says so, and keeps it until a line arrives on stdin.
HOLD = """
import sys
from tpucared.store.lock import WriterLock
lock = WriterLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
sys.stdin.readline()
lock.release()
print("released", flush=True)
sys.stdin.readline()
"""

# An flock on the lock file argv[1] with nothing written in it (a holder that died before it
# wrote its pid, or someone's `flock DB.lock sleep 1000`).
HOLD_SILENTLY = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""

Holder = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def holder() -> Iterator[Holder]:
    """`holder(path)` starts a process holding the lock and returns once it holds it; every
    holder still running when the test ends is killed."""
    started: list[subprocess.Popen[str]] = []

    def start(path: Path | str, script: str = HOLD) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline() == "held\n"
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def tell(proc: subprocess.Popen[str], expect: str) -> None:
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == expect


def test_a_second_process_is_refused_with_the_holders_pid(tmp_path: Path, holder: Holder) -> None:
    db = tmp_path / "state.db"
    first = holder(db)

    assert json.loads(lock_path(db).read_text()) == {
        "pid": first.pid,
        "host": socket.gethostname(),
        "since": pytest.approx(time.time(), abs=60),
    }
    started = time.monotonic()
    with pytest.raises(LockHeld) as refused:
        WriterLock(db).acquire()
    assert time.monotonic() - started < 0.5  # non-blocking: no wait when the pid is there
    assert str(refused.value) == f"another tpucared (pid {first.pid}) holds {db}"
    assert (refused.value.pid, refused.value.database) == (first.pid, db)
    assert isinstance(refused.value, DatabaseError)  # the CLI's one line, exit 2

    # Only the lock file was made, and the database itself is not locked: SQLite writes it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db.lock"]
    with sqlite3.connect(db, timeout=0) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute("INSERT INTO t VALUES (1)")
    conn.close()

    # Released by its holder: free, and the file no longer names anyone.
    tell(first, "released\n")
    assert lock_path(db).read_text() == ""
    with WriterLock(db) as mine:
        assert mine.path == lock_path(db)
        assert json.loads(lock_path(db).read_text())["pid"] == os.getpid()
        # Now this process holds it: another process is refused, naming this one.
        other = subprocess.run(
            [sys.executable, "-c", HOLD, str(db)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert other.returncode != 0
        assert other.stdout == ""
        assert other.stderr.splitlines()[-1] == (
            f"tpucared.store.lock.LockHeld: another tpucared (pid {os.getpid()}) holds {db}"
        )
    assert lock_path(db).read_text() == ""


def test_the_lock_dies_with_its_process(tmp_path: Path, holder: Holder) -> None:
    db = tmp_path / "state.db"
    first = holder(db)
    first.send_signal(signal.SIGKILL)  # no clean-up of any kind
    first.wait(10)
    assert json.loads(lock_path(db).read_text())["pid"] == first.pid  # its pid is left behind

    with WriterLock(db):  # and is no obstacle: the kernel released the lock
        assert json.loads(lock_path(db).read_text())["pid"] == os.getpid()
    second = holder(db)  # and a process after this one takes it too
    assert json.loads(lock_path(db).read_text())["pid"] == second.pid


def test_a_holder_that_wrote_no_pid_is_pid_unknown(tmp_path: Path, holder: Holder) -> None:
    db = tmp_path / "state.db"
    holder(lock_path(db), HOLD_SILENTLY)
    with pytest.raises(LockHeld) as refused:
        WriterLock(db).acquire()
    assert str(refused.value) == f"another tpucared (pid unknown) holds {db}"
    assert refused.value.pid is None


def test_a_symlink_to_the_database_is_the_same_database(tmp_path: Path, holder: Holder) -> None:
    real = tmp_path / "data" / "state.db"
    real.parent.mkdir()
    link = tmp_path / "link.db"
    link.symlink_to(real)
    first = holder(f"sqlite:///{link}")  # an URL naming the file through the link

    assert lock_path(link) == lock_path(real) == real.with_name("state.db.lock")
    assert not (tmp_path / "link.db.lock").exists()
    for setting in (real, f"sqlite+aiosqlite:///{real}"):
        with pytest.raises(LockHeld) as refused:
            WriterLock(setting).acquire()
        assert refused.value.pid == first.pid


@pytest.mark.parametrize(
    "setting",
    [
        "sqlite+aiosqlite:///:memory:",
        "sqlite://",
        "sqlite:///file:state.db?mode=memory&uri=true",
        "postgresql+asyncpg://tpucared@db.example/tpucared",
    ],
)
def test_no_lock_without_a_sqlite_file(
    setting: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with WriterLock(setting) as one, WriterLock(setting) as two:
        assert one.path is None
        assert two.path is None
    assert list(tmp_path.iterdir()) == []  # no lock file, no database
