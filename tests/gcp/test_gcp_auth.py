"""Token sources for real: google-auth's service-account flow against a loopback token endpoint.

The refresh runs in a worker thread (google-auth's requests transport is synchronous) and
reaches the token server, which runs on the test's own event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from gcp_fakes import FakeApi, Reply, Seen, TokenServer, service_account_info

from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.auth import (
    CredentialsError,
    GoogleTokenSource,
    NoAuth,
    TokenSource,
    load_key_file,
    load_token_source,
)
from tpucared.gcp.errors import ApiError
from tpucared.gcp.retry import RetryPolicy
from tpucared.gcp.tpu.client import TpuClient


class Clock:
    """Real time plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@pytest.fixture
async def google_source(
    service_account_file: Path,
) -> AsyncIterator[Callable[..., GoogleTokenSource]]:
    made: list[GoogleTokenSource] = []

    def make(**options: Any) -> GoogleTokenSource:
        source = GoogleTokenSource(load_key_file(str(service_account_file)), **options)
        made.append(source)
        return source

    yield make
    for source in made:
        await source.aclose()


async def test_first_call_fetches_and_later_calls_reuse(
    google_source: Callable[..., GoogleTokenSource], token_server: TokenServer
) -> None:
    source = google_source()
    assert await source.authorization() == "Bearer tok-1"
    assert await source.authorization() == "Bearer tok-1"
    assert token_server.grants == 1
    assert source.refreshes == 1


async def test_refreshes_before_expiry(
    google_source: Callable[..., GoogleTokenSource], token_server: TokenServer
) -> None:
    clock = Clock()
    source = google_source(clock=clock, refresh_margin=300.0)
    token_server.expires_in = 3600
    assert await source.authorization() == "Bearer tok-1"
    clock.offset = timedelta(seconds=3600 - 360)  # six minutes left: still fine
    assert await source.authorization() == "Bearer tok-1"
    clock.offset = timedelta(seconds=3600 - 240)  # four minutes left: refresh now
    assert await source.authorization() == "Bearer tok-2"
    assert token_server.grants == 2


async def test_concurrent_callers_share_one_refresh(
    google_source: Callable[..., GoogleTokenSource], token_server: TokenServer
) -> None:
    source = google_source()
    token_server.delay = 0.1  # long enough for every caller to arrive during the refresh
    values = await asyncio.gather(*(source.authorization() for _ in range(10)))
    assert values == ["Bearer tok-1"] * 10
    assert token_server.grants == 1


async def test_invalidate_forces_one_refresh_for_many_rejections(
    google_source: Callable[..., GoogleTokenSource], token_server: TokenServer
) -> None:
    source = google_source()
    first = await source.authorization()
    await source.invalidate(first)
    token_server.delay = 0.05
    # Five requests rejected with the old token at once: one refresh serves them all.
    second = await asyncio.gather(*(source.authorization() for _ in range(5)))
    assert second == ["Bearer tok-2"] * 5
    for _ in range(5):
        await source.invalidate(first)  # stale rejections change nothing
    assert await source.authorization() == "Bearer tok-2"
    await source.invalidate()  # no value given: always refresh
    assert await source.authorization() == "Bearer tok-3"
    assert token_server.grants == 3


async def test_rejected_grant_is_permission(
    google_source: Callable[..., GoogleTokenSource], token_server: TokenServer
) -> None:
    token_server.fail_with = (400, {"error": "invalid_grant", "error_description": "bad JWT"})
    with pytest.raises(ApiError) as caught:
        await google_source().authorization()
    assert caught.value.kind is ErrorKind.PERMISSION
    assert "invalid_grant" in caught.value.message


async def test_unreachable_token_endpoint_is_transient(
    tmp_path: Path, private_key_pem: str
) -> None:
    path = tmp_path / "key.json"
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    path.write_text(json.dumps(service_account_info(private_key_pem, "http://127.0.0.1:9/t")))
    source = load_token_source(str(path))
    try:
        with pytest.raises(ApiError) as caught:
            await source.authorization()
        assert caught.value.kind is ErrorKind.TRANSIENT
    finally:
        await source.aclose()


# -- the client's 401 path -----------------------------------------------------------------------


def ok_unless_token(bad: str) -> Callable[[Seen], Reply]:
    def reply(seen: Seen) -> Reply:
        if seen.headers.get("Authorization") == bad:
            return Reply(401, {"error": {"code": 401, "message": "expired", "status": "X"}})
        return Reply(200, {"nodes": []})

    return reply


async def test_401_refreshes_once_and_retries(
    service_account_file: Path, token_server: TokenServer, fake_api: FakeApi
) -> None:
    fake_api.push(ok_unless_token("Bearer tok-1"), ok_unless_token("Bearer tok-1"))
    source = load_token_source(str(service_account_file))
    async with TpuClient(fake_api.url, token_source=source) as client:
        assert await client.list_nodes("p", "z") == []
        assert client.request_counts == {("nodes.list", "401"): 1, ("nodes.list", "200"): 1}
    assert token_server.grants == 2
    assert [r.headers["Authorization"] for r in fake_api.requests] == [
        "Bearer tok-1",
        "Bearer tok-2",
    ]


async def test_401_after_refresh_is_permission(
    service_account_file: Path, token_server: TokenServer, fake_api: FakeApi
) -> None:
    unauthenticated = Reply(
        401, {"error": {"code": 401, "message": "no", "status": "UNAUTHENTICATED"}}
    )
    fake_api.push(unauthenticated, unauthenticated, unauthenticated)
    source = load_token_source(str(service_account_file))
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with TpuClient(
        fake_api.url, token_source=source, retry=RetryPolicy(), sleep=sleep
    ) as client:
        with pytest.raises(ApiError) as caught:
            await client.get_node("p", "z", "n")
    assert caught.value.kind is ErrorKind.PERMISSION
    assert caught.value.http_status == 401
    assert len(fake_api.requests) == 2  # the request, then once more with a fresh token
    assert token_server.grants == 2
    assert sleeps == []  # a permission error is not retried


async def test_no_auth_sends_no_header_and_401_is_final(fake_api: FakeApi) -> None:
    fake_api.push(Reply(401, {"error": {"code": 401, "message": "who are you"}}))
    async with TpuClient(fake_api.url, token_source=NoAuth()) as client:
        with pytest.raises(ApiError) as caught:
            await client.list_nodes("p", "z")
    assert caught.value.kind is ErrorKind.PERMISSION
    assert len(fake_api.requests) == 1
    assert "Authorization" not in fake_api.requests[0].headers


# -- load_token_source ---------------------------------------------------------------------------


async def test_load_none_and_protocol() -> None:
    source = load_token_source("none")
    assert isinstance(source, NoAuth)
    assert isinstance(source, TokenSource)
    assert await source.authorization() is None


async def test_load_default_uses_adc_env(
    service_account_file: Path, token_server: TokenServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(service_account_file))
    source = load_token_source("default")
    try:
        assert isinstance(source, GoogleTokenSource)
        assert await source.authorization() == "Bearer tok-1"
    finally:
        await source.aclose()


def test_load_missing_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(CredentialsError, match=f"{missing} does not exist"):
        load_token_source(str(missing))
    with pytest.raises(CredentialsError, match="is a directory"):
        load_token_source(str(tmp_path))


@contextmanager
def _file_modes_enforced() -> Iterator[None]:
    """Root reads any file whatever its mode: drop the effective uid so the mode counts.
    (CI runs as root; skipping there would leave the check untested.)"""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(65534)
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def test_load_unreadable_file_names_it() -> None:
    # A world-traversable directory, so the unprivileged uid can reach the file itself.
    folder = Path(tempfile.mkdtemp(prefix="tpucared-auth-"))
    folder.chmod(0o755)
    path = folder / "locked.json"
    path.write_text("{}")
    path.chmod(0)
    try:
        with (
            _file_modes_enforced(),
            pytest.raises(CredentialsError, match=f"{path} is not readable"),
        ):
            load_token_source(str(path))
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("this is not json", "is not valid JSON"),
        ('["a list"]', "expected a service_account key"),
        ('{"type": "external_account", "credential_source": {}}', "'external_account'"),
        ('{"type": "service_account", "client_email": "x@y"}', "lacks private_key, token_uri"),
    ],
)
def test_load_bad_files_name_the_file_and_the_problem(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "key.json"
    path.write_text(content)
    with pytest.raises(CredentialsError) as caught:
        load_token_source(str(path))
    assert str(path) in str(caught.value)
    assert problem in str(caught.value)


def test_load_bad_key_never_shows_the_key(tmp_path: Path, private_key_pem: str) -> None:
    info = service_account_info(private_key_pem, "http://127.0.0.1:9/t")
    secret_body = private_key_pem.splitlines()[5]
    info["private_key"] = private_key_pem.replace(private_key_pem.splitlines()[3], "corrupt!!")
    path = tmp_path / "bad-key.json"
    path.write_text(json.dumps(info))
    with pytest.raises(CredentialsError, match="private key or a field is malformed") as caught:
        load_token_source(str(path))
    assert str(path) in str(caught.value)
    assert secret_body not in str(caught.value)
    assert "corrupt" not in str(caught.value)


def test_load_empty_setting() -> None:
    with pytest.raises(CredentialsError, match="default"):
        load_token_source("  ")


async def test_authorized_user_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "adc.json"
    path.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "id.apps.googleusercontent.com",
                "client_secret": "s",
                "refresh_token": "r",
            }
        )
    )
    source = load_token_source(str(path))
    try:
        assert isinstance(source, GoogleTokenSource)
    finally:
        await source.aclose()
