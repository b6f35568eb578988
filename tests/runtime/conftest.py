"""Fixtures for the runtime tests: the emulator's control API, and real daemon processes that
are always reaped (kill -9) when a test ends, whatever happened."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

# The helper module next to this file is imported by name, whatever pytest's import mode.
sys.path.insert(0, str(Path(__file__).parent))

from runtime_support import Control, Daemon

from tpucared.emulator import EmulatorServer


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
