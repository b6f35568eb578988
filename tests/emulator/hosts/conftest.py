"""Fixtures of the worker-host tests (hosts_support.py): the emulator with its simulated
worker hosts on, a client key per module, and the `cloud` that drives both."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

# The helper module next to this file is imported by name, whatever pytest's import mode.
sys.path.insert(0, str(Path(__file__).parent))

from hosts_support import Cloud, cloud_of, hosts_options

from tpucared_emulator import EmulatorServer


@pytest.fixture(scope="module")
def client_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return hosts_options(emulator_options, tmp_path)


@pytest.fixture
async def cloud(emulator: EmulatorServer, client_key: asyncssh.SSHKey) -> AsyncIterator[Cloud]:
    async with cloud_of(emulator, client_key) as c:
        yield c
