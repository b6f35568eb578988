"""Connections to the state database: URL resolution, the async engine and SQLite pragmas.

Two engines: SQLite (a file path or `sqlite://` URL; the embedded default, everything below) and
PostgreSQL (`postgresql+asyncpg://user@host:port/db`; `postgresql://`, `postgres://` and
`postgresql+psycopg2://` are taken as asyncpg). For PostgreSQL none of the SQLite machinery
applies (pragmas, `BEGIN IMMEDIATE`, file checks, the writer lock): write transactions are plain
READ COMMITTED transactions (the store's compare-and-set writes are single `UPDATE ... WHERE
phase = expected` statements whose row counts are checked, which READ COMMITTED re-evaluates on
the newest row version), and read transactions (`Store.read()`, `read_only`) are REPEATABLE
READ, READ ONLY: one snapshot for every query inside, as SQLite's read transaction gives. The
password comes from the URL, or else asyncpg reads `PGPASSWORD`, then the libpq password file
(`PGPASSFILE`, default `~/.pgpass`); URLs are only ever shown with it hidden (`shown`).

Everything that opens the database goes through `make_engine`, so the daemon, the read-only CLI
commands, the migrations and the tests all get the same connection settings. The store above it
(`tpucared.store.repository`) never sets pragmas or opens files itself.

SQLite settings, and why:

- `journal_mode=WAL`: readers (`tpucared status`, a person with `sqlite3`) never block the
  daemon's writes and never see a half-written transaction.
- `synchronous=FULL`: each commit syncs the WAL. NORMAL is already safe against a process crash
  (`kill -9`: the commit is in the OS page cache), but can lose the last commits on power loss or
  a kernel panic. We record intent before calling the cloud, so losing a recorded intent would
  orphan a node until the next observation adopts it; one fsync per commit is cheap at our write
  rate (a handful of commits per poll interval).
- `foreign_keys=ON`: SQLite leaves them off by default. Migrations turn them off (see
  `tpucared.store.migrate`) because table rebuilds must not cascade.
- `busy_timeout`: a writer waits for another writer's lock instead of failing at once. The
  switch to WAL of a new file is also retried for as long: when two connections switch the
  same file at once, SQLite fails one of them with `database is locked` at once (waiting
  could deadlock), without waiting busy_timeout.
- Transactions are started by us (`BEGIN IMMEDIATE` for writes, plain `BEGIN` for reads) instead
  of by the `sqlite3` module's legacy implicit transactions, which skip BEGIN for SELECT and DDL.
  Taking the write lock up front means a write transaction can never fail half-way with
  SQLITE_BUSY when it upgrades from reading to writing; it waits `busy_timeout` at BEGIN instead.

Files tpucared cannot use are refused at this edge with one `DatabaseError` line naming the
file and what to do: `check_file` before anything opens it (a directory, a read-only file or
directory), `database_error` for what SQLite says once it is opened (not a database, corrupt,
locked by another writer). `tpucared.store.migrate` applies both before it migrates.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, PendingRollbackError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from tpucared.store.errors import DatabaseError, StoreUnavailable

# Execution option that marks a connection's transactions as read-only: they BEGIN DEFERRED and
# never take the write lock. Set by `Store.read()`.
READ_ONLY_OPTION = "tpucared_read_only"

DEFAULT_BUSY_TIMEOUT_MS = 5000
# Cap on the WAL file left behind after a checkpoint, so weeks of uptime don't leave a huge file.
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024

# Sync drivers people may write in a config, mapped to the async driver we run on.
_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+pysqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+psycopg2": "postgresql+asyncpg",
    "postgresql+psycopg": "postgresql+asyncpg",
}

# A read transaction on PostgreSQL: one snapshot for all its statements, and no writes.
_POSTGRES_READ_OPTIONS: dict[str, Any] = {
    "isolation_level": "REPEATABLE READ",
    "postgresql_readonly": True,
}


def database_url(setting: str | os.PathLike[str]) -> URL:
    """The async SQLAlchemy URL for the `daemon.db` setting.

    A plain path (relative paths are made absolute, `~` is expanded) becomes a SQLite file URL;
    anything with a scheme is taken as a SQLAlchemy URL, with sync drivers swapped for their
    async counterparts (`sqlite:///x` -> `sqlite+aiosqlite:///x`).
    """
    text = os.fspath(setting)
    if not text.strip():
        raise ValueError("daemon.db is empty: expected a file path or a SQLAlchemy URL")
    if "://" not in text:
        path = Path(text).expanduser().resolve()
        return URL.create("sqlite+aiosqlite", database=str(path))
    try:
        url = make_url(text)
    except ArgumentError as exc:
        raise ValueError(f"daemon.db is not a valid SQLAlchemy URL: {text!r}") from exc
    return url.set(drivername=_ASYNC_DRIVERS.get(url.drivername, url.drivername))


def is_postgres(url: URL) -> bool:
    return url.get_backend_name() in ("postgresql", "postgres")


def shown(url: URL | str) -> str:
    """A URL as it may appear in logs and messages: the password, if any, as `***`."""
    if isinstance(url, str):
        if "://" not in url:
            return url
        try:
            url = make_url(url)
        except ArgumentError:
            return "(an invalid database URL)"
    return url.render_as_string(hide_password=True)


def read_options(engine: AsyncEngine) -> dict[str, Any]:
    """Execution options of `Store.read()`'s transactions on this engine."""
    options: dict[str, Any] = {READ_ONLY_OPTION: True}
    if engine.dialect.name == "postgresql":
        options.update(_POSTGRES_READ_OPTIONS)
    return options


def sqlite_path(url: URL) -> Path | None:
    """The database file of a SQLite URL; None for other backends and in-memory databases."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def make_engine(
    setting: str | os.PathLike[str] | URL,
    *,
    read_only: bool = False,
    foreign_keys: bool = True,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    synchronous: str = "FULL",
    **engine_kwargs: Any,
) -> AsyncEngine:
    """An async engine on the state database with our connection settings applied.

    For SQLite the parent directory is created if missing, unless `read_only`: then the file
    must exist (it is opened with `mode=ro`) and every connection refuses writes, which is what
    the CLI's read-only commands want. For PostgreSQL the SQLite settings are ignored, a pooled
    connection is checked before use (the server may have restarted while the daemon ran for
    weeks), and `read_only` makes every transaction REPEATABLE READ, READ ONLY. The caller owns
    the engine and must `await engine.dispose()` when done.
    """
    url = setting if isinstance(setting, URL) else database_url(setting)
    if is_postgres(url):
        engine_kwargs.setdefault("pool_pre_ping", True)
        if read_only:
            options = engine_kwargs.pop("execution_options", {})
            engine_kwargs["execution_options"] = {**options, **_POSTGRES_READ_OPTIONS}
        return create_async_engine(url, **engine_kwargs)
    path = sqlite_path(url)
    if path is not None and read_only:
        # An SQLite URI filename: percent-encoded, so "?" or "#" in a path cannot cut it.
        uri = f"file:{quote(str(path))}"
        url = url.set(database=uri, query={**url.query, "mode": "ro", "uri": "true"})
    elif path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, **engine_kwargs)
    if url.get_backend_name() == "sqlite":
        _install_sqlite_listeners(
            engine,
            read_only=read_only,
            foreign_keys=foreign_keys,
            busy_timeout_ms=busy_timeout_ms,
            synchronous=synchronous,
        )
    return engine


def _install_sqlite_listeners(
    engine: AsyncEngine,
    *,
    read_only: bool,
    foreign_keys: bool,
    busy_timeout_ms: int,
    synchronous: str,
) -> None:
    if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError(f"invalid synchronous setting {synchronous!r}")

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Hand transaction control to SQLAlchemy's `begin` event below (the sqlite3 module's
        # legacy mode would otherwise run SELECTs and DDL outside any transaction).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # busy_timeout first: switching to WAL needs a lock another process may hold.
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            if not read_only:  # a reader cannot switch modes, and needs no particular one
                mode = _switch_to_wal(cursor, busy_timeout_ms)
                if str(mode).lower() != "wal":
                    # e.g. an in-memory database, or a network filesystem without shared
                    # memory: refuse rather than run with readers that block the daemon.
                    raise RuntimeError(f"SQLite refused WAL mode (journal_mode={mode})")
            cursor.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            cursor.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
            cursor.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
            if read_only:
                cursor.execute("PRAGMA query_only = ON")
        finally:
            cursor.close()

    def on_begin(conn: Connection) -> None:
        reading = read_only or conn.get_execution_options().get(READ_ONLY_OPTION, False)
        conn.exec_driver_sql("BEGIN" if reading else "BEGIN IMMEDIATE")

    event.listen(engine.sync_engine, "connect", on_connect)
    event.listen(engine.sync_engine, "begin", on_begin)


def _switch_to_wal(cursor: Any, busy_timeout_ms: int) -> str:
    """`PRAGMA journal_mode = WAL`, retried until `busy_timeout_ms` while it reports the file
    locked: SQLite fails one of two connections switching at once without waiting (waiting
    could deadlock), and the other one finishes in milliseconds. Sleeps on the loop's thread,
    but only on a new file: one already in WAL mode never waits here."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            (mode,) = cursor.fetchone()
            return str(mode)
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(0.02)


def _is_busy(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "")
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in str(exc)


def check_file(path: Path) -> None:
    """Refuse, before anything opens it, a database path SQLite could not write: a directory,
    a read-only file, a read-only directory (WAL writes `NAME-wal` and `NAME-shm` beside the
    file). A missing file and missing directories are fine: they are created."""
    if path.is_dir():
        raise DatabaseError(f"{path}: is a directory, not a database file: set daemon.db to a file")
    directory = path.parent
    while not directory.exists() and directory.parent != directory:
        directory = directory.parent  # the first directory that exists gets the new ones
    if not os.access(directory, os.W_OK | os.X_OK):
        raise DatabaseError(
            f"{path}: read-only directory {directory} (SQLite writes {path.name}-wal and "
            f"{path.name}-shm next to the database): make it writable for tpucared's user"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise DatabaseError(f"{path}: read-only file: make it writable for tpucared's user")


def database_error(exc: BaseException, path: Path, busy_timeout_ms: int) -> DatabaseError | None:
    """What SQLite's error (wrapped by SQLAlchemy or not) means for the file at `path`, as one
    line; None when it is not about the file (a bug, a broken migration: let it propagate)."""
    error = _sqlite_error(exc)
    if error is None:
        return None
    text = str(error)
    name = getattr(error, "sqlite_errorname", "")
    if name == "SQLITE_NOTADB" or "file is not a database" in text:
        return DatabaseError(
            f"{path}: not an SQLite database ({text}): "
            "set daemon.db to another file, or move this one away"
        )
    if name.startswith("SQLITE_CORRUPT") or "malformed" in text:
        return DatabaseError(
            f"{path}: the database is corrupt ({text}): "
            "restore it from a backup, or move it away to start afresh"
        )
    if _is_busy(error):
        seconds = f"{busy_timeout_ms / 1000:g}"
        return DatabaseError(
            f"{path}: locked by another process's write transaction (waited {seconds} s): "
            f"find it with `fuser {path}`, stop it, and start again"
        )
    if name.startswith("SQLITE_READONLY") or "readonly" in text:
        return DatabaseError(f"{path}: read-only ({text}): make it writable for tpucared's user")
    if name == "SQLITE_FULL" or "disk is full" in text:
        return DatabaseError(f"{path}: the disk is full ({text}): free some space")
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_IOERR", "SQLITE_PERM")):
        return DatabaseError(
            f"{path}: cannot open or read it ({text}): check the file and its disk"
        )
    return None


# PostgreSQL's SQLSTATEs for a server that refuses us (asyncpg's exceptions carry `.sqlstate`).
_POSTGRES_REFUSALS = {
    "28P01": "wrong password (from the URL, PGPASSWORD or the password file)",
    "28000": "not allowed to connect (pg_hba.conf, or no password given)",
    "3D000": "no such database: create it first (CREATE DATABASE)",
    "42501": "permission denied",
    "53300": "too many connections",
    "57P03": "the server is starting up or shutting down",
    "57P01": "the server was shut down (administrator command)",
    "57P02": "the server crashed and is restarting",
}
# SQLSTATE class 08: the connection itself failed or was lost.
_POSTGRES_CONNECTION_CLASS = "08"


def store_error(exc: BaseException, url: URL, busy_timeout_ms: int) -> DatabaseError | None:
    """`database_error` for a SQLite file, `postgres_error` for PostgreSQL."""
    path = sqlite_path(url)
    if path is not None:
        return database_error(exc, path, busy_timeout_ms)
    return postgres_error(exc, url) if is_postgres(url) else None


def postgres_error(exc: BaseException, url: URL) -> DatabaseError | None:
    """A PostgreSQL server we cannot reach or that refuses us, as one line naming the URL
    (password hidden); None for anything else (a bug, a failed statement: let it propagate)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        sqlstate = getattr(current, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate in _POSTGRES_REFUSALS:
            return DatabaseError(f"{shown(url)}: {_POSTGRES_REFUSALS[sqlstate]} ({current})")
        if isinstance(sqlstate, str) and sqlstate.startswith(_POSTGRES_CONNECTION_CLASS):
            return DatabaseError(f"{shown(url)}: the connection to the server was lost ({current})")
        if isinstance(current, OSError | TimeoutError) and not isinstance(current, sqlite3.Error):
            return DatabaseError(
                f"{shown(url)}: cannot connect to the PostgreSQL server ({current or 'timed out'})"
                ": check that it runs and that host and port are right"
            )
        orig = getattr(current, "orig", None)
        current = (
            orig
            if isinstance(orig, BaseException) and id(orig) not in seen
            else (current.__cause__ or current.__context__)
        )
    return None


def unavailable_error(
    exc: BaseException, url: URL, busy_timeout_ms: int
) -> StoreUnavailable | None:
    """A running process's failed transaction as `StoreUnavailable` when the database went
    away or cannot take a write (what `store_error` names, or a connection SQLAlchemy found
    dead); None for anything else: a bug or a failed statement propagates as it is."""
    known = store_error(exc, url, busy_timeout_ms)
    if known is not None:
        return StoreUnavailable(str(known))
    if connection_lost(exc):
        return StoreUnavailable(f"{shown(url)}: the connection to the database was lost ({exc})")
    return None


def connection_lost(exc: BaseException) -> bool:
    """SQLAlchemy's DBAPIError on a lost link (`connection_invalidated`), here or among the
    causes; or its PendingRollbackError for a connection invalidated inside the transaction,
    which is what a commit raises after a statement lost the link. No work of such a
    transaction can succeed (`Tx.apply_each` runs none again)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "connection_invalidated", False):
            return True
        if isinstance(current, PendingRollbackError) and "reconnect" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def lock_file_error(exc: OSError, path: Path) -> DatabaseError:
    """An OSError on a file next to the database (the writer lock) as one line."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return DatabaseError(
            f"{path}: read-only directory {path.parent} ({exc.strerror}): "
            "make it writable for tpucared's user"
        )
    return DatabaseError(f"{path}: {exc.strerror or exc}: check the file and its directory")


def _sqlite_error(exc: BaseException) -> sqlite3.Error | None:
    """The sqlite3 error behind `exc`: itself, SQLAlchemy's `.orig`, or a cause."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sqlite3.Error):
            return current
        orig = getattr(current, "orig", None)
        if isinstance(orig, sqlite3.Error):
            return orig
        current = current.__cause__ or current.__context__
    return None
