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
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Connection

from tpucared.store.engine import database_url, make_engine
from tpucared.store.models import metadata

# How long a second migrator waits for the first one's transaction before giving up.
MIGRATION_BUSY_TIMEOUT_MS = 120_000

Setting = str | os.PathLike[str] | URL


class MigrationError(RuntimeError):
    pass


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


async def _run_locked(setting: Setting, action: Callable[[Config], None]) -> str | None:
    """Run an Alembic command on one connection inside one write transaction; return the
    revision the database is at afterwards."""
    url = setting if isinstance(setting, URL) else database_url(setting)
    engine = make_engine(url, foreign_keys=False, busy_timeout_ms=MIGRATION_BUSY_TIMEOUT_MS)

    def in_transaction(conn: Connection) -> str | None:
        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        action(cfg)
        if conn.dialect.name == "sqlite":
            broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise MigrationError(f"migration left dangling foreign keys: {broken[:10]}")
        return MigrationContext.configure(conn).get_current_revision()

    try:
        async with engine.begin() as conn:  # BEGIN IMMEDIATE: one migrator at a time
            return await conn.run_sync(in_transaction)
    finally:
        await engine.dispose()


async def upgrade_to_head(setting: Setting) -> str:
    """Bring the database to the newest schema (creating the file if needed); idempotent."""
    revision = await _run_locked(setting, lambda cfg: command.upgrade(cfg, "head"))
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
