"""Fixtures of the Compute Engine adapter's tests against the emulator over loopback:
`cloud`, a `ComputeCloud` (owner "lab") over `client`, a `ComputeClient` without credentials
on the emulator's port; `control`, the emulator's control API for its instances."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tpucared.gcp import NoAuth
from tpucared.gcp.compute import ComputeClient, ComputeCloud
from tpucared_emulator import EmulatorServer

from .support import OWNER, Control


@pytest.fixture
async def control(emulator: EmulatorServer) -> AsyncIterator[Control]:
    async with aiohttp.ClientSession() as session:
        yield Control(emulator.url, session)


@pytest.fixture
async def client(emulator: EmulatorServer) -> AsyncIterator[ComputeClient]:
    async with ComputeClient(emulator.url, token_source=NoAuth()) as compute:
        yield compute


@pytest.fixture
def cloud(client: ComputeClient) -> ComputeCloud:
    return ComputeCloud(client, owner=OWNER)
