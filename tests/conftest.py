"""Fixtures for every test package: the TPU API emulator, and a guard against leaked tasks.

`emulator` is a started `EmulatorServer` on 127.0.0.1 (a free port) with fast timing, so a
node is READY 0.2 s after its create and gone 0.1 s after its delete. Use `emulator.url` as the
API endpoint and `emulator.url + "/_emulator/v1"` for the control API. A test module that needs
other options overrides the `emulator_options` fixture, building on this one:

    @pytest.fixture
    def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
        return {**emulator_options, "create_seconds": 1.0}

`emulator_thread` is the same on its own event loop in a background thread, for synchronous
tests (Google's official client, CLI commands that call `asyncio.run`).

`postgres` is one real PostgreSQL server for the whole session (tests/postgres_support.py:
started on first use, stopped at the end), and `pg_url` a fresh empty database on it per test
(dropped afterwards), as the `postgresql+asyncpg://` URL `daemon.db` takes. When PostgreSQL
cannot start, every test that asks for it fails with the reason: never skipped.

Every test, sync or async, fails if it leaves asyncio tasks running (kopf's conftest does the
same): a leaked task is a component that does not shut down cleanly.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

# The helper modules next to this file are imported by name, whatever pytest's import mode;
# and `bench` (a top-level package of the repository, not installed) by every test that shares
# its builders (bench/common.py `free_port`, bench/daemon_config.py) or tests a benchmark.
sys.path.insert(0, str(Path(__file__).parent))
if str(Path(__file__).parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parents[1]))

import structlog
from postgres_support import PostgresError, PostgresServer

from tpucared_emulator import EmulatorOptions, EmulatorServer, EmulatorThread, running_emulator

# The daemon's log setup (tpucared/logsetup.py, run by every test that starts the CLI in this
# process) caches each logger on first use, with the processors of that setup. Once a later
# test sets logging up again, those loggers keep the old processors, and structlog's
# `capture_logs` (which swaps the current ones) captures nothing from them: with two test
# processes shuffling the order, test_preflight_start once saw no reconcile.tick. In the tests
# loggers are never cached; the daemon's own setup is unchanged.
_configure = structlog.configure


def _configure_uncached(*args: Any, **kwargs: Any) -> None:
    _configure(*args, **{**kwargs, "cache_logger_on_first_use": False})


structlog.configure = _configure_uncached

FAST_EMULATOR: dict[str, Any] = {
    "create_seconds": 0.2,
    "delete_seconds": 0.1,
    "queued_provision_seconds": 0.1,
}

# How long finished-but-not-yet-collected tasks (closing connections) get before counting.
_LEAK_GRACE_SECONDS = 0.5


@pytest.fixture
def emulator_options() -> dict[str, Any]:
    """EmulatorOptions for the `emulator` fixture; override per module or test."""
    return dict(FAST_EMULATOR)


@pytest.fixture
async def emulator(emulator_options: dict[str, Any]) -> AsyncIterator[EmulatorServer]:
    async with running_emulator(**emulator_options) as server:
        yield server


@pytest.fixture
def emulator_thread(emulator_options: dict[str, Any]) -> Iterator[EmulatorThread]:
    with EmulatorThread(EmulatorOptions(**emulator_options)) as server:
        yield server


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session; fails (never skips) every test that needs it
    when it cannot start."""
    try:
        server = PostgresServer()
    except PostgresError as exc:
        pytest.fail(f"PostgreSQL cannot start: {exc}", pytrace=False)
    try:
        server.start()
    except PostgresError as exc:
        server.stop()
        pytest.fail(f"PostgreSQL cannot start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(postgres: PostgresServer) -> Iterator[URL]:
    """A fresh, empty database on the session's PostgreSQL, as a `postgresql+asyncpg` URL."""
    name = postgres.create_database()
    try:
        yield postgres.url(name)
    finally:
        postgres.drop_database(name)


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _LEAK_GRACE_SECONDS
    while True:
        leaked = [
            task
            for task in asyncio.all_tasks() - before
            if not task.done() and task is not asyncio.current_task()
        ]
        if not leaked or loop.time() >= deadline:
            break
        await asyncio.sleep(0.01)
    for task in leaked:
        task.cancel()
    if leaked:
        await asyncio.gather(*leaked, return_exceptions=True)
        pytest.fail(f"test left {len(leaked)} asyncio task(s) running: {leaked}")
