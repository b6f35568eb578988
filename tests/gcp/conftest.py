"""Fixtures of the gcp adapter's tests: loopback servers (see gcp_fakes.py), key files, and
`client`, a `TpuClient` without credentials on `api_url` (the emulator's unless a module
overrides it) with the module's `client_options` (none unless a module overrides them)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from gcp_fakes import (
    FakeApi,
    Sleeps,
    TokenServer,
    serve,
    service_account_info,
    serving_token_server,
)

from tpucared.gcp import NoAuth
from tpucared.gcp.tpu import TpuClient
from tpucared_emulator import EmulatorServer


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeApi]:
    api = FakeApi()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", api.handle)
    runner, api.url = await serve(app)
    yield api
    await runner.cleanup()


@pytest.fixture
async def token_server() -> AsyncIterator[TokenServer]:
    async with serving_token_server() as server:
        yield server


@pytest.fixture(scope="session")
def private_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@pytest.fixture
def service_account_file(tmp_path: Path, private_key_pem: str, token_server: TokenServer) -> Path:
    path = tmp_path / "key.json"
    path.write_text(json.dumps(service_account_info(private_key_pem, token_server.url)))
    return path


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def api_url(emulator: EmulatorServer) -> str:
    return emulator.url


@pytest.fixture
def client_options() -> dict[str, Any]:
    return {}


@pytest.fixture
async def client(api_url: str, client_options: dict[str, Any]) -> AsyncIterator[TpuClient]:
    async with TpuClient(api_url, token_source=NoAuth(), **client_options) as tpu:
        yield tpu
