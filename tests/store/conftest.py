"""Fixtures for the store tests: a real SQLite file per test, migrated to head."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

# The helper modules next to this file (store_support, store_worker) are imported by name,
# whatever pytest's import mode.
sys.path.insert(0, str(Path(__file__).parent))

from store_support import T0, seed

from tpucared.store import Store
from tpucared.store.migrate import upgrade_to_head


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "tpucared.db"


@pytest.fixture
async def migrated(db_path: Path) -> Path:
    await upgrade_to_head(db_path)
    return db_path


@pytest.fixture
async def store(migrated: Path) -> AsyncIterator[Store]:
    s = Store.open(migrated)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def seeded(store: Store) -> Store:
    """A store with fleet "sweep" of 3 slots."""
    await seed(store, "sweep", 3, T0)
    return store
