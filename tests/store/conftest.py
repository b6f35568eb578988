"""Fixtures for the store tests: a real SQLite file per test, migrated to head, or a fresh
database on the session's real PostgreSQL (tests/conftest.py's `pg_url`).

`store` (and `seeded`) run on the engine `engine_kind` names: "sqlite" here. A module whose
tests should hold on both engines overrides it (`ENGINES` of store_support.py):

    @pytest.fixture(params=ENGINES)
    def engine_kind(request: pytest.FixtureRequest) -> str:
        return str(request.param)

and a test of it that reads the SQLite file itself (through `migrated` or `db_path`) stays on
SQLite with `@SQLITE_ONLY`.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

# The helper modules next to this file (store_support, store_worker) are imported by name,
# whatever pytest's import mode.
sys.path.insert(0, str(Path(__file__).parent))

from store_support import T0, seed

from tpucared.store import Store
from tpucared.store.migrate import upgrade_to_head


@pytest.fixture(params=["sqlite"])
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "tpucared.db"


@pytest.fixture
async def migrated(db_path: Path) -> Path:
    await upgrade_to_head(db_path)
    return db_path


@pytest.fixture
def store_db(engine_kind: str, request: pytest.FixtureRequest) -> Path | URL:
    """The database `store` opens: `db_path`, or a fresh PostgreSQL database."""
    fixture = "pg_url" if engine_kind == "postgresql" else "db_path"
    value = request.getfixturevalue(fixture)
    assert isinstance(value, Path | URL)
    return value


@pytest.fixture
async def store(store_db: Path | URL) -> AsyncIterator[Store]:
    await upgrade_to_head(store_db)  # idempotent: a test may have migrated it already
    s = Store.open(store_db)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def seeded(store: Store) -> Store:
    """A store with fleet "sweep" of 3 slots."""
    await seed(store, "sweep", 3, T0)
    return store
