"""Loopback fakes for the gcp adapter's tests (imported by conftest.py and the tests).

- `FakeApi`: a scripted HTTP server. Each request takes the next `Reply` from its script (a
  Reply, or a function of the request returning one) and is recorded, so tests can assert
  exactly what the client sent and how often. It covers behaviour the emulator does not
  model (401s, garbage bodies, broken pagination); the real API shapes are tested against
  the emulator in test_gcp_emulator.py.
- `TokenServer`: an OAuth 2.0 token endpoint that google-auth's service-account flow talks
  to; it counts grants and can be slowed down or made to fail.
- `Sleeps`: a client's `sleep` that records the delays it is asked for and only yields.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web


class EmulatorControl:
    """The emulator's control API (/_emulator/v1) over a session; tests subclass it with the
    controls they use."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.base = f"{url}/_emulator/v1"
        self.session = session

    async def send(self, method: str, path: str, body: Any = None) -> Any:
        async with self.session.request(method, self.base + path, json=body) as response:
            text = await response.text()
            assert response.status < 300, (method, path, response.status, text)
            return json.loads(text) if text.strip() else None


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict/list -> JSON, str -> sent as is, None -> empty
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (timeouts)
    drop: bool = False  # close the connection without an answer


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: str


Script = Reply | Callable[[Seen], Reply]


class FakeApi:
    def __init__(self) -> None:
        self.script: deque[Script] = deque()
        self.requests: list[Seen] = []
        self.url = ""

    def push(self, *replies: Script) -> None:
        self.script.extend(replies)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        seen = Seen(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=dict(request.headers),
            body=await request.text(),
        )
        self.requests.append(seen)
        if not self.script:
            return web.json_response(
                {"error": {"code": 500, "message": "script exhausted", "status": "INTERNAL"}},
                status=500,
            )
        entry = self.script.popleft()
        reply = entry(seen) if callable(entry) else entry
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.drop:
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        structured = isinstance(reply.body, dict | list)
        text = json.dumps(reply.body) if structured else (reply.body or "")
        return web.Response(
            status=reply.status,
            text=text,
            headers=reply.headers,
            content_type="application/json",
        )


class TokenServer:
    def __init__(self) -> None:
        self.grants = 0
        self.expires_in = 3600
        self.delay = 0.0
        self.fail_with: tuple[int, dict[str, str]] | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        form = await request.post()
        assert form.get("grant_type") == "urn:ietf:params:oauth:grant-type:jwt-bearer"
        assert form.get("assertion")
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_with is not None:
            status, body = self.fail_with
            return web.json_response(body, status=status)
        self.grants += 1
        return web.json_response(
            {
                "access_token": f"tok-{self.grants}",
                "expires_in": self.expires_in,
                "token_type": "Bearer",
            }
        )


def service_account_info(private_key_pem: str, token_uri: str) -> dict[str, str]:
    return {
        "type": "service_account",
        "project_id": "test-project",
        "private_key_id": "0123456789abcdef",
        "private_key": private_key_pem,
        "client_email": "tpucared@test-project.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": token_uri,
    }


@contextlib.asynccontextmanager
async def serving_token_server() -> AsyncIterator[TokenServer]:
    """A `TokenServer` answering POST /token on loopback (its `url`), for as long as the block."""
    server = TokenServer()
    app = web.Application()
    app.router.add_post("/token", server.handle)
    runner, base = await serve(app)
    server.url = f"{base}/token"
    try:
        yield server
    finally:
        await runner.cleanup()
