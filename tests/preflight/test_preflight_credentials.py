"""The credentials check with real google-auth credentials: a service account key whose
token endpoint is a loopback server (tests/gcp/gcp_fakes.py `TokenServer`), the checks asked
of the module's emulator. The account is named, the token never shown."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from preflight_support import Control, load

sys.path.insert(0, str(Path(__file__).parents[1] / "gcp"))
from gcp_fakes import TokenServer, service_account_info, serving_token_server

from tpucared.gcp import GoogleTokenSource
from tpucared.gcp.auth import load_key_file
from tpucared.preflight import Status, render, run_checks
from tpucared_emulator import EmulatorThread

ACCOUNT = "tpucared@test-project.iam.gserviceaccount.com"  # gcp_fakes' key


@pytest.fixture
async def token_server() -> AsyncIterator[TokenServer]:
    async with serving_token_server() as server:
        yield server


@pytest.fixture
def tokens(tmp_path: Path, token_server: TokenServer) -> GoogleTokenSource:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    path = tmp_path / "key.json"
    path.write_text(json.dumps(service_account_info(pem, token_server.url)))
    return GoogleTokenSource(load_key_file(str(path)))


async def test_the_account_is_named_and_the_token_never_shown(
    tmp_path: Path, emu: EmulatorThread, tokens: GoogleTokenSource, control: Control
) -> None:
    control(denied_permissions=["iam.serviceAccounts.actAs"])
    try:
        results = await run_checks(load(tmp_path, emu.url), tokens)
    finally:
        await tokens.aclose()
    by_name = {r.name: r for r in results}
    assert by_name["credentials"].status is Status.OK
    assert by_name["credentials"].detail == f"a token for the service account {ACCOUNT}"
    # The fix names the daemon's own account as the member to grant.
    assert f"--member serviceAccount:{ACCOUNT}" in (by_name["service_account[sweep]"].fix or "")
    assert "tok-" not in render(results)


async def test_credentials_google_refuses_fail(
    tmp_path: Path, emu: EmulatorThread, tokens: GoogleTokenSource, token_server: TokenServer
) -> None:
    token_server.fail_with = (400, {"error": "invalid_grant", "error_description": "revoked"})
    try:
        results = await run_checks(load(tmp_path, emu.url), tokens)
    finally:
        await tokens.aclose()
    result = next(r for r in results if r.name == "credentials")
    assert result.status is Status.FAIL
    assert "no token from" in result.detail
    assert "gcloud auth application-default login" in (result.fix or "")
