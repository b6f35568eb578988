"""Fixtures of the emulator's tests: `http`, the raw-HTTP helper (emulator_http.py) on the
`emulator` fixture (tests/conftest.py), over an aiohttp `session` of the test's own."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

# The helper modules next to this file are imported by name, also from hosts/.
sys.path.insert(0, str(Path(__file__).parent))

from emulator_http import Http

from tpucared_emulator import EmulatorServer


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def http(emulator: EmulatorServer, session: aiohttp.ClientSession) -> Http:
    return Http(emulator.url, session)
