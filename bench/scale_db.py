"""The daemon's database in bench/scale.py: a SQLite file (the default) or a PostgreSQL database.

`--db postgresql` runs one real PostgreSQL server for the whole benchmark (the tests' server,
tests/postgres_support.py: initdb and pg_ctl as an unprivileged user, on loopback, with
`fsync=off` as the tests run it: the figures leave out the disk's syncs, which SQLite's
`synchronous=FULL` pays) and gives each measurement a database of its own. The benchmark
reads the daemon's progress from it (rows READY, events, size) as from the SQLite file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from bench.scale_procs import count_rows, db_size_mb
from bench.takeover import postgres_support

DATABASES = ("sqlite", "postgresql")


class BenchDb(Protocol):
    setting: str  # the daemon's `daemon.db`

    def count(self, sql: str) -> int: ...

    def size(self) -> dict[str, float]: ...

    def close(self) -> None: ...


class SqliteDb:
    def __init__(self, directory: Path) -> None:
        self.setting = "state.db"
        self._path = directory / "state.db"

    def count(self, sql: str) -> int:
        return count_rows(self._path, sql)

    def size(self) -> dict[str, float]:
        return db_size_mb(self._path)

    def close(self) -> None:
        pass


class PostgresDb:
    def __init__(self, server: Any) -> None:
        self._server = server
        self._name = str(server.create_database())
        self.setting = server.url(self._name).render_as_string(hide_password=False)

    def count(self, sql: str) -> int:
        try:
            out = str(self._server.psql(sql, self._name)).strip()
        except RuntimeError:
            return 0  # not migrated yet
        return int(out) if out.isdigit() else 0

    def size(self) -> dict[str, float]:
        size = self.count("SELECT pg_database_size(current_database())")
        return {"db_mb": round(size / 2**20, 2), "total_mb": round(size / 2**20, 2)}

    def close(self) -> None:
        self._server.drop_database(self._name)


@contextlib.contextmanager
def databases(kind: str) -> Iterator[Any]:
    """What makes each measurement's database: a function of its directory."""
    if kind == "sqlite":
        yield SqliteDb
        return
    server = postgres_support().PostgresServer()
    try:
        server.start()
        yield lambda _directory: PostgresDb(server)
    finally:
        server.stop()
