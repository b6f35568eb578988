"""Fixtures of the gcp adapter's tests: loopback servers (see gcp_fakes.py) and key files."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from gcp_fakes import FakeApi, TokenServer, serve, service_account_info


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
    server = TokenServer()
    app = web.Application()
    app.router.add_post("/token", server.handle)
    runner, base = await serve(app)
    server.url = f"{base}/token"
    yield server
    await runner.cleanup()


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
