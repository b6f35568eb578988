"""Alembic environment for tpucared's state database (Alembic's async template, adapted).

Two ways in:
- programmatically (`tpucared.store.migrate`): a connection already inside our write
  transaction arrives in `config.attributes["connection"]`; we run on it and never commit;
- the `alembic` command line (see alembic.ini): the URL comes from `-x db=PATH_OR_URL`, else
  the TPUCARED_DB environment variable, else `sqlalchemy.url`; we open our own engine with the
  same pragmas as the daemon, foreign keys off, in one BEGIN IMMEDIATE transaction.

`render_as_batch=True` makes autogenerate emit SQLite-safe "move and copy" table rebuilds, and
`render_item` writes our column types as their generic SQL types, so revision files never import
application code.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig
from typing import Any

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy.engine import URL, Connection
from sqlalchemy.types import TypeDecorator

from tpucared.store.engine import database_url, make_engine
from tpucared.store.migrate import MIGRATION_BUSY_TIMEOUT_MS
from tpucared.store.models import metadata

config = context.config

# Only the command line configures logging; inside the daemon, logging is the daemon's.
if config.config_file_name is not None and "connection" not in config.attributes:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = metadata


def render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | bool:
    if type_ == "type" and isinstance(obj, TypeDecorator):
        return f"sa.{obj.impl_instance!r}"
    return False


def _configure_options() -> dict[str, Any]:
    return {
        "target_metadata": target_metadata,
        "render_as_batch": True,
        "compare_type": True,
        "render_item": render_item,
    }


def _url() -> URL:
    given = config.attributes.get("url")
    if given is not None:
        return database_url(given) if not isinstance(given, URL) else given
    setting = (
        context.get_x_argument(as_dictionary=True).get("db")
        or os.environ.get("TPUCARED_DB")
        or config.get_main_option("sqlalchemy.url")
    )
    if not setting:
        raise SystemExit("no database: pass -x db=PATH_OR_URL or set TPUCARED_DB")
    return database_url(setting)


def run_migrations_offline() -> None:
    """`alembic upgrade head --sql`: print the SQL instead of running it."""
    context.configure(
        url=_url(),
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        **_configure_options(),
    )
    with context.begin_transaction():
        context.run_migrations()


def do_run_migrations(connection: Connection) -> None:
    context.configure(connection=connection, **_configure_options())
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations() -> None:
    engine = make_engine(_url(), foreign_keys=False, busy_timeout_ms=MIGRATION_BUSY_TIMEOUT_MS)
    try:
        async with engine.begin() as connection:  # BEGIN IMMEDIATE: one migrator at a time
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        do_run_migrations(connection)
    else:
        asyncio.run(run_async_migrations())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
