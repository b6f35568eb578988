"""Databases tpucared must not use: each is refused at the store's edge with one line naming the
file and what to do (`DatabaseError`), before a byte of it is written; and `tpucared run` /
`tpucared db upgrade` print that line and exit 2, with no traceback.

Real files and real processes: a second process holds the write lock for the busy case, and
read-only files are read-only for real (as root, whom file modes do not stop, also immutable
with `chattr +i`; a place where that cannot be done fails the test instead of skipping it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from store_support import T0, seed

from bench import daemon_config
from tpucared.store import DatabaseError, Store
from tpucared.store.migrate import (
    MIGRATION_BUSY_TIMEOUT_MS,
    current_revision,
    head_revision,
    upgrade_to_head,
)

ROOT = Path(__file__).resolve().parents[2]
HEAD = "0017"
NOT_OURS = "refusing to migrate into it; set daemon.db to another file"
CORRUPT = "restore it from a backup, or move it away to start afresh"


# --- making broken databases ---------------------------------------------------------------


async def _ours(path: Path, events: int = 0) -> bytes:
    """A tpucared database at head with a fleet (and `events` events), checkpointed; its bytes."""
    await upgrade_to_head(path)
    async with Store.open(path) as store:
        await seed(store, "sweep", 3, T0)
        for n in range(events):
            async with store.write() as tx:
                await tx.append_event("test.filler", f"event {n} " + "x" * 200, T0)
    return await asyncio.to_thread(path.read_bytes)  # closed: the WAL is in the file


def _garbage(n: int, seed_: int = 7) -> bytes:
    return random.Random(seed_).randbytes(n)


def _set_revision(path: Path, revision: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    conn.close()


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make a file or directory really read-only for this process, and writable again after."""
    mode = path.stat().st_mode
    path.chmod(mode & ~0o222)
    immutable = False
    try:
        if _writable(path):  # root: modes do not stop it
            subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True)
            immutable = True
        if _writable(path):
            pytest.fail(f"cannot make {path} read-only here (chmod and chattr +i did not)")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True, capture_output=True)
        path.chmod(mode)


def _writable(path: Path) -> bool:
    try:
        if path.is_dir():
            with tempfile.TemporaryFile(dir=path):
                return True
        with path.open("r+b"):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def write_locked(path: Path) -> Iterator[None]:
    """Another process (a `sqlite3` shell, a stuck script) holding a write transaction."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "conn.execute('BEGIN IMMEDIATE')\n"
            "print('held', flush=True)\n"
            "time.sleep(600)\n",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.kill()
        holder.communicate()


@dataclass
class Case:
    """A broken database at `path` (made by `make`), the line it is refused with (`message`,
    given the path), and the context in which it is broken (read-only, locked...)."""

    make: Callable[[Path], Awaitable[None]]
    message: Callable[[Path], str]
    broken: Callable[[Path], contextlib.AbstractContextManager[None]] = lambda _: (
        contextlib.nullcontext()
    )


async def _random_bytes(path: Path) -> None:
    path.write_bytes(_garbage(16384))  # noqa: ASYNC240 - a test's own small file


async def _garbage_pages(path: Path) -> None:
    data = await _ours(path)
    path.write_bytes(data[:4096] + _garbage(len(data) - 4096))  # noqa: ASYNC240


async def _garbage_in_a_table(path: Path) -> None:
    """Only the last page (the events table's, the last to grow) is garbage: the schema and
    alembic_version read fine, `PRAGMA quick_check` does not."""
    data = await _ours(path, events=200)
    path.write_bytes(data[:-4096] + _garbage(4096))  # noqa: ASYNC240


async def _future_revision(path: Path) -> None:
    await _ours(path)
    _set_revision(path, "0099")


async def _someone_elses_revision(path: Path) -> None:
    await _ours(path)
    _set_revision(path, "ae1027a6acf")


async def _directory(path: Path) -> None:
    path.mkdir()  # noqa: ASYNC240 - a test's own directory
    (path / "inside").write_text("x")


async def _someone_elses_database(path: Path) -> None:
    """An application's SQLite file (rollback journal, as sqlite3 makes them by default)."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("CREATE VIEW v_customers AS SELECT name FROM customers")
        conn.execute("INSERT INTO customers (name) VALUES ('ada')")
    conn.close()


async def _ours_with_a_foreign_table(path: Path) -> None:
    await _ours(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    conn.close()


async def _foreign_with_an_empty_alembic_version(path: Path) -> None:
    """Someone else's database after `alembic stamp base`: alembic_version, but no row."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    conn.close()


CASES: dict[str, Case] = {
    "random bytes": Case(
        _random_bytes,
        lambda p: (
            f"{p}: not an SQLite database (file is not a database): "
            "set daemon.db to another file, or move this one away"
        ),
    ),
    "garbage pages": Case(
        _garbage_pages,
        lambda p: f"{p}: the database is corrupt (database disk image is malformed): {CORRUPT}",
    ),
    "garbage in a table": Case(
        _garbage_in_a_table,
        lambda p: (
            f"{p}: the database is corrupt (quick_check: Page {p.stat().st_size // 4096}: "
            f"btreeInitPage() returns error code 11): {CORRUPT}"
        ),
    ),
    "a future revision": Case(
        _future_revision,
        lambda p: (
            f"{p}: schema revision 0099 is newer than this tpucared (head {HEAD}): upgrade tpucared"
        ),
    ),
    "someone else's revision": Case(
        _someone_elses_revision,
        lambda p: (
            f"{p}: schema revision 'ae1027a6acf' is not one of tpucared's "
            f"(head {HEAD}): not a tpucared database; set daemon.db to another file"
        ),
    ),
    "a directory": Case(
        _directory,
        lambda p: f"{p}: is a directory, not a database file: set daemon.db to a file",
    ),
    "a read-only file": Case(
        lambda p: _ours(p),
        lambda p: f"{p}: read-only file: make it writable for tpucared's user",
        broken=read_only,
    ),
    "a read-only directory": Case(
        lambda p: _ours(p),
        lambda p: (
            f"{p}: read-only directory {p.parent} (SQLite writes {p.name}-wal and "
            f"{p.name}-shm next to the database): make it writable for tpucared's user"
        ),
        broken=lambda p: read_only(p.parent),
    ),
    "a new file in a read-only directory": Case(
        lambda p: asyncio.sleep(0),
        lambda p: (
            f"{p}: read-only directory {p.parent} (SQLite writes {p.name}-wal and "
            f"{p.name}-shm next to the database): make it writable for tpucared's user"
        ),
        broken=lambda p: read_only(p.parent),
    ),
    "held by another writer": Case(
        lambda p: _ours(p),
        lambda p: (
            f"{p}: locked by another process's write transaction "
            f"(waited {MIGRATION_BUSY_TIMEOUT_MS / 1000:g} s): find it with `fuser {p}`, stop it, "
            "and start again"
        ),
        broken=write_locked,
    ),
    "someone else's database": Case(
        _someone_elses_database,
        lambda p: (
            f"{p}: not a tpucared database (no alembic_version; it holds customers, "
            f"v_customers): {NOT_OURS}"
        ),
    ),
    "ours with a table that is not": Case(
        _ours_with_a_foreign_table,
        lambda p: (
            f"{p}: not a tpucared database (tables tpucared does not know: invoices): {NOT_OURS}"
        ),
    ),
    "someone else's, stamped base": Case(
        _foreign_with_an_empty_alembic_version,
        lambda p: (
            f"{p}: not a tpucared database (tables tpucared does not know: orders): {NOT_OURS}"
        ),
    ),
}


async def _made(name: str, tmp_path: Path) -> tuple[Case, Path]:
    """Case `name` and its database, made (not yet broken) in a folder of its own."""
    case = CASES[name]
    db = tmp_path / "state" / "state.db"
    db.parent.mkdir()
    await case.make(db)
    return case, db


def _state(path: Path) -> object:
    """What must not change: the file's bytes and mtime; a directory's listing."""
    if path.is_dir():
        return sorted(p.name for p in path.iterdir())
    if not path.exists():
        return None
    stat = path.stat()
    return path.read_bytes(), stat.st_mtime_ns, stat.st_size


def test_every_case_is_checked_against_the_current_head() -> None:
    assert head_revision() == HEAD


@pytest.mark.parametrize("name", list(CASES))
async def test_a_broken_database_is_refused_in_one_line_and_left_as_it_was(
    tmp_path: Path, name: str
) -> None:
    case, db = await _made(name, tmp_path)
    with case.broken(db):
        before = _state(db)
        started = time.monotonic()
        with pytest.raises(DatabaseError) as caught:
            await upgrade_to_head(db)
        took = time.monotonic() - started
        assert _state(db) == before
    message = str(caught.value)
    assert message == case.message(db)
    assert "\n" not in message
    # Refused at once; waiting is only for another writer, and then only the busy timeout.
    limit = MIGRATION_BUSY_TIMEOUT_MS / 1000 + 5 if name == "held by another writer" else 5
    assert took < limit, f"{name}: refused after {took:.1f} s"


async def test_an_empty_or_new_file_is_migrated_as_before(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    assert await upgrade_to_head(empty) == HEAD
    new = tmp_path / "new" / "dir" / "state.db"
    assert await upgrade_to_head(new) == HEAD
    assert await current_revision(new) == HEAD


async def test_ours_at_an_older_revision_is_migrated(tmp_path: Path) -> None:
    from tpucared.store.migrate import downgrade_to

    db = tmp_path / "state.db"
    await _ours(db)
    assert await downgrade_to(db, "0001") == "0001"
    assert await upgrade_to_head(db) == HEAD
    assert await downgrade_to(db, "base") is None  # only alembic_version is left
    assert await upgrade_to_head(db) == HEAD


# --- through the command line ---------------------------------------------------------------


def _config(directory: Path, db: Path) -> Path:
    """A config whose daemon would stop at its database: the endpoint is never called."""
    config = daemon_config.against_emulator(
        "http://127.0.0.1:9",
        daemon_config.fleet(capacity="spot"),
        daemon={"db": str(db), "http": "127.0.0.1:9"},
    )
    return daemon_config.write(directory / "fleet.toml", config)


def _tpucared(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUCARED_")}
    return subprocess.run(
        [sys.executable, "-m", "tpucared", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.parametrize("name", list(CASES))
async def test_tpucared_run_on_a_broken_database_prints_one_line_and_exits_2(
    tmp_path: Path, name: str
) -> None:
    case, db = await _made(name, tmp_path)
    config = _config(tmp_path, db)
    with case.broken(db):
        before = _state(db)
        done = await asyncio.to_thread(_tpucared, "run", "-c", str(config))
        assert _state(db) == before
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"tpucared: {case.message(db)}"]
    assert "database.ready" not in done.stdout  # stopped before the store was opened
    assert not (tmp_path / "id_ed25519").exists()


@pytest.mark.parametrize("name", ["random bytes", "a future revision", "someone else's database"])
async def test_db_upgrade_on_a_broken_database_prints_one_line_and_exits_2(
    tmp_path: Path, name: str
) -> None:
    case = CASES[name]
    db = tmp_path / "state.db"
    await case.make(db)
    before = _state(db)
    done = await asyncio.to_thread(_tpucared, "db", "upgrade", "--db", str(db))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"tpucared: {case.message(db)}"]
    assert _state(db) == before


def test_the_cases_do_not_depend_on_leftovers(tmp_path: Path) -> None:
    """`read_only` really restores: pytest can remove what the cases made."""
    target = tmp_path / "d"
    target.mkdir()
    with read_only(target):
        assert not _writable(target)
    assert _writable(target)
    shutil.rmtree(target)
