"""Schema migrations, run programmatically: `tpucared run` and `tpucared db upgrade` call
`upgrade_to_head` before anything else touches the database.

The migration scripts live in the repository's top-level `migrations/` (Alembic's env.py and
versions/); an installed wheel carries them as `tpucared/migrations/` and `migrations_dir` finds
either. The same env.py serves the `alembic` command line (see alembic.ini) and these functions,
which hand it a connection through `Config.attributes["connection"]`.

Safe when several processes start at once: the whole upgrade runs in one `BEGIN IMMEDIATE`
transaction, so SQLite lets one migrator in at a time (the others wait on the busy timeout and
then find the schema already at head), and a crash mid-migration rolls back completely. Foreign
keys are off while migrating (SQLite table rebuilds would otherwise cascade or fail half-way) and
checked with `PRAGMA foreign_key_check` before the commit.

On PostgreSQL the upgrade is one transaction too (its DDL is transactional), and migrators take
turns on a transaction-level advisory lock (`MIGRATION_LOCK_KEY`) instead of SQLite's write
lock; the schema checks below apply alike (someone else's tables, an unknown revision), the
file checks do not. The URL is only ever shown with its password hidden.

Never migrates into what it does not understand. Before the upgrade, a SQLite file is checked
without writing a byte to it (`engine.check_file`, then a read-only connection): a directory, a
read-only file or directory, a file that is not a database or is corrupt (`PRAGMA
quick_check`), a schema revision this tpucared does not know (newer: upgrade tpucared), and
someone else's database (tables but no `alembic_version`, or tables that are not ours) are each
refused with one `DatabaseError` line. Another process's write lock is waited for
`MIGRATION_BUSY_TIMEOUT_MS`, then refused the same way. An empty or missing file is migrated.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.engine import URL, Connection

from tpucared.store.engine import (
    check_file,
    database_url,
    is_postgres,
    make_engine,
    shown,
    sqlite_path,
    store_error,
)
from tpucared.store.errors import DatabaseError
from tpucared.store.models import metadata

# How long a migrator waits for another process's write transaction before giving up: a
# migration takes well under a second, so 5 s means something else holds the file.
MIGRATION_BUSY_TIMEOUT_MS = 5_000

# pg_advisory_xact_lock's key for "migrating tpucared's schema" (any constant: "tpuc" in hex).
MIGRATION_LOCK_KEY = 0x74707563

Setting = str | os.PathLike[str] | URL

# Every table any of our revisions creates (a migration that drops a table keeps its name
# here): a database at one of our revisions with another table is not ours.
OUR_TABLES = frozenset(metadata.tables) | {"alembic_version"}


class MigrationError(DatabaseError, RuntimeError):
    """The database cannot be brought to head (missing scripts, a migration's broken result)."""


def migrations_dir() -> Path:
    """Where env.py and versions/ are: inside the installed package, else the source tree."""
    here = Path(__file__).resolve().parent  # tpucared/store
    candidates = [here.parent / "migrations", here.parent.parent / "migrations"]
    for candidate in candidates:
        if (candidate / "env.py").is_file():
            return candidate
    raise MigrationError(
        "tpucared's migrations are missing; looked in " + ", ".join(map(str, candidates))
    )


def alembic_config(url: URL | None = None) -> Config:
    """An Alembic config for our migrations, independent of any alembic.ini."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("path_separator", "os")
    if url is not None:
        cfg.attributes["url"] = url
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise MigrationError("no migration scripts found")
    return head


async def _run_locked(
    setting: Setting, action: Callable[[Config], None], *, check: bool = False
) -> str | None:
    """Run an Alembic command on one connection inside one write transaction; return the
    revision the database is at afterwards. With `check`, a SQLite file is first checked to be
    one we may migrate (see the module's docstring). SQLite's errors about the file become
    `DatabaseError`s."""
    url = setting if isinstance(setting, URL) else database_url(setting)
    path = sqlite_path(url)
    where = path if path is not None else shown(url)

    def in_transaction(conn: Connection) -> str | None:
        if conn.dialect.name == "postgresql":  # one migrator at a time, until our commit
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")
        if check and (path is not None or is_postgres(url)):
            _check_schema(conn, where)  # again, now that we hold the write lock
        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        action(cfg)
        if conn.dialect.name == "sqlite":
            broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise MigrationError(f"migration left dangling foreign keys: {broken[:10]}")
        return MigrationContext.configure(conn).get_current_revision()

    try:
        if check and path is not None and await asyncio.to_thread(_existing, path):
            await _check_file_contents(url, path)
        engine = make_engine(url, foreign_keys=False, busy_timeout_ms=MIGRATION_BUSY_TIMEOUT_MS)
        try:
            async with engine.begin() as conn:  # BEGIN IMMEDIATE: one migrator at a time
                return await conn.run_sync(in_transaction)
        finally:
            await engine.dispose()
    except DatabaseError:
        raise
    except Exception as exc:
        error = store_error(exc, url, MIGRATION_BUSY_TIMEOUT_MS)
        if error is None:
            raise
        raise error from exc


def _existing(path: Path) -> bool:
    """`check_file`, then: is there a non-empty file to look into (not a new one)?"""
    check_file(path)
    return path.exists() and path.stat().st_size > 0


async def _check_file_contents(url: URL, path: Path) -> None:
    """Refuse a file that is not a sound tpucared database at a revision we know, reading it on
    a read-only connection: not a byte is written to it, not even the switch to WAL."""
    engine = make_engine(url, read_only=True, busy_timeout_ms=MIGRATION_BUSY_TIMEOUT_MS)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_check_contents, path)
    finally:
        await engine.dispose()


def _check_contents(conn: Connection, path: Path) -> None:
    if not _check_schema(conn, path):
        return  # no schema yet
    # Reads every page (about 0.2 s per 200 MB): garbage pages anywhere are caught here, not
    # by the daemon half-way through a tick.
    (verdict,) = conn.exec_driver_sql("PRAGMA quick_check(1)").one()
    if verdict != "ok":
        # "*** in database main ***\nPage 47: ...": the problem, on the one line.
        lines = [line for line in str(verdict).splitlines() if not line.startswith("***")]
        raise DatabaseError(
            f"{path}: the database is corrupt (quick_check: {'; '.join(lines) or verdict}): "
            "restore it from a backup, or move it away to start afresh"
        )


def _schema_objects(conn: Connection) -> tuple[list[str], set[str]]:
    """Every named object of the database's schema, and its tables. On PostgreSQL, those of
    the connection's default schema (`public`, or the user's `search_path`)."""
    if conn.dialect.name == "sqlite":
        objects = [
            str(name)
            for (name,) in conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
            )
        ]
        tables = {
            str(name)
            for (name,) in conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        return objects, tables
    inspector = inspect(conn)
    tables = set(inspector.get_table_names())
    return sorted(tables | set(inspector.get_view_names())), tables


def _check_schema(conn: Connection, path: Path | str) -> bool:
    """Raise unless the database (a SQLite file's path, or a URL as shown) is empty or
    tpucared's at a revision this tpucared knows; False when it has no schema at all."""
    objects, tables = _schema_objects(conn)
    another = "file" if isinstance(path, Path) else "database"
    if "alembic_version" not in tables:
        if objects:
            raise DatabaseError(
                f"{path}: not a tpucared database (no alembic_version; it holds "
                f"{_names(objects)}): refusing to migrate into it; set daemon.db to another "
                f"{another}"
            )
        return False
    revisions = [str(r) for (r,) in conn.exec_driver_sql("SELECT version_num FROM alembic_version")]
    head = head_revision()
    known = _all_revisions()
    for revision in revisions:
        if revision in known:
            continue
        if revision.isdigit() and head.isdigit() and int(revision) > int(head):
            raise DatabaseError(
                f"{path}: schema revision {revision} is newer than this tpucared "
                f"(head {head}): upgrade tpucared"
            )
        raise DatabaseError(
            f"{path}: schema revision {revision!r} is not one of tpucared's (head {head}): "
            f"not a tpucared database; set daemon.db to another {another}"
        )
    # At no revision (downgraded to base) only alembic_version itself may be there.
    foreign = tables - OUR_TABLES if revisions else tables - {"alembic_version"}
    if foreign:
        raise DatabaseError(
            f"{path}: not a tpucared database (tables tpucared does not know: "
            f"{_names(foreign)}): refusing to migrate into it; set daemon.db to another "
            f"{another}"
        )
    return True


async def check_readable(setting: Setting) -> None:
    """Refuse, as one `DatabaseError` line, a SQLite file `status` and `events` cannot read:
    not a database, corrupt where the schema lives, someone else's, without tpucared's schema,
    or at a revision other than this tpucared's head (older: not migrated by a daemon of this
    version yet; newer: written by a newer tpucared). Read-only: not a byte is written. No
    `quick_check` of every page, so a reader stays quick; the daemon's start does that.
    PostgreSQL: the same schema and revision checks, in a read-only transaction."""
    url = setting if isinstance(setting, URL) else database_url(setting)
    sqlite_file = sqlite_path(url)
    if sqlite_file is None and not is_postgres(url):
        return  # in-memory SQLite: nothing there to check
    path: Path | str = sqlite_file if sqlite_file is not None else shown(url)

    def check(conn: Connection) -> None:
        if not _check_schema(conn, path):
            raise DatabaseError(
                f"{path}: no tpucared schema yet: the daemon creates it on its first start "
                "(or run `tpucared db upgrade`)"
            )
        revision = MigrationContext.configure(conn).get_current_revision()
        head = head_revision()
        if revision != head:
            raise DatabaseError(
                f"{path}: schema revision {revision} is older than this tpucared's (head "
                f"{head}): start the daemon once, or run `tpucared db upgrade`"
            )

    try:
        engine = make_engine(url, read_only=True, busy_timeout_ms=MIGRATION_BUSY_TIMEOUT_MS)
        try:
            async with engine.connect() as conn:
                await conn.run_sync(check)
        finally:
            await engine.dispose()
    except DatabaseError:
        raise
    except Exception as exc:
        error = store_error(exc, url, MIGRATION_BUSY_TIMEOUT_MS)
        if error is None:
            raise
        raise error from exc


def _names(names: Iterable[str]) -> str:
    ordered = sorted(names)
    more = f" and {len(ordered) - 5} more" if len(ordered) > 5 else ""
    return ", ".join(ordered[:5]) + more


def _all_revisions() -> set[str]:
    return {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


async def upgrade_to_head(setting: Setting) -> str:
    """Bring the database to the newest schema (creating the file if needed); idempotent.
    A file that is not ours to migrate is a `DatabaseError` (see the module's docstring)."""
    revision = await _run_locked(setting, lambda cfg: command.upgrade(cfg, "head"), check=True)
    assert revision is not None
    return revision


async def downgrade_to(setting: Setting, revision: str = "base") -> str | None:
    """Undo migrations down to `revision` ("base": an empty schema)."""
    return await _run_locked(setting, lambda cfg: command.downgrade(cfg, revision))


def upgrade(setting: Setting) -> str:
    """Synchronous `upgrade_to_head`, for `tpucared db upgrade` outside an event loop."""
    return asyncio.run(upgrade_to_head(setting))


async def current_revision(setting: Setting) -> str | None:
    engine = make_engine(setting)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda c: MigrationContext.configure(c).get_current_revision()
            )
    finally:
        await engine.dispose()


async def check_drift(setting: Setting | None = None) -> list[Any]:
    """Differences between the models and the schema the migrations build (empty when they
    agree): CI fails when a model changed without a migration. Without `setting`, migrates a
    scratch database to head first."""
    if setting is None:
        with tempfile.TemporaryDirectory(prefix="tpucared-drift-") as tmp:
            path = Path(tmp) / "drift.db"
            await upgrade_to_head(path)
            return await check_drift(path)
    engine = make_engine(setting)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_compare)
    finally:
        await engine.dispose()


def _compare(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(conn, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


def main(argv: list[str] | None = None) -> int:
    """`python -m tpucared.store.migrate upgrade DB | current DB | check [DB]`, for CI and
    operators until `tpucared db upgrade` exists."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["upgrade"] and len(args) == 2:
        print(upgrade(args[1]))
        return 0
    if args[:1] == ["current"] and len(args) == 2:
        print(asyncio.run(current_revision(args[1])) or "(empty)")
        return 0
    if args[:1] == ["check"] and len(args) <= 2:
        diffs = asyncio.run(check_drift(args[1] if len(args) == 2 else None))
        for diff in diffs:
            print(diff)
        print("models and migrations agree" if not diffs else f"{len(diffs)} difference(s)")
        return 1 if diffs else 0
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
