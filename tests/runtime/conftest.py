"""Fixtures for the runtime tests: the emulator's control API, real daemon processes that are
always reaped (kill -9) when a test ends, whatever happened, the `rig` the workload's
end-to-end tests stand on, and in-process workload harnesses (`make`)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

# The helper module next to this file is imported by name, whatever pytest's import mode.
sys.path.insert(0, str(Path(__file__).parent))

from leader_support import LEASE_S, POLL_S, Pair
from postgres_support import PostgresServer
from runtime_support import Control, Daemon, Rig, write_config
from workload_harness import Make, harnesses

from bench.common import free_port
from tpucared_emulator import EmulatorServer


@pytest.fixture
async def control(emulator: EmulatorServer) -> AsyncIterator[Control]:
    async with aiohttp.ClientSession() as session:
        yield Control(emulator, session)


@pytest.fixture
async def daemons(tmp_path: Path) -> AsyncIterator[Callable[[Path], Daemon]]:
    """`daemons(config)` makes a Daemon (call `.start()`); all are killed at teardown."""
    made: list[Daemon] = []

    def make(config: Path) -> Daemon:
        daemon = Daemon(config=config, log_path=tmp_path / f"daemon-{len(made)}.log")
        made.append(daemon)
        return daemon

    yield make
    for daemon in made:
        await daemon.kill()


@pytest.fixture
def rig(
    emulator: EmulatorServer, control: Control, daemons: Callable[[Path], Daemon], tmp_path: Path
) -> Rig:
    return Rig(emulator, control, daemons, tmp_path)


@pytest.fixture
async def make(emulator: EmulatorServer, tmp_path: Path) -> AsyncIterator[Make]:
    """`make(...)` builds an in-process workload harness (workload_harness.Harness) on the
    test's emulator; all are closed at teardown."""
    async with harnesses(emulator, tmp_path) as build:
        yield build


@pytest.fixture
async def pair(tmp_path: Path, control: Control, postgres: PostgresServer) -> AsyncIterator[Pair]:
    name = postgres.create_database()
    url = postgres.url(name).render_as_string(hide_password=False)
    ports = (free_port(), free_port())
    configs = []
    for i, port in enumerate(ports):
        config = write_config(
            tmp_path, control.emulator.url, http_port=port, poll=f"{POLL_S}s", name=f"f{i}.toml"
        )
        text = config.read_text(encoding="utf-8")
        text = text.replace('db = "state.db"', f'db = "{url}"\nlease = "{LEASE_S}s"')
        config.write_text(text, encoding="utf-8")
        configs.append(config)
    try:
        yield Pair(name, (configs[0], configs[1]), ports, postgres)
    finally:
        postgres.drop_database(name)
