"""Who may read the page and the /v1 JSON (runtime/page/): the gate in front of them.

Three cases, decided once at start from `daemon.http` and `daemon.http_token_env`:
- a token configured (the env var it names is set): every page and /v1 request needs it, as
  `Authorization: Bearer <token>`, or once in a browser as `/?token=<token>`, which sets an
  HttpOnly, SameSite=Strict cookie and redirects to the same page without it (so the token
  leaves the address bar and the history); compared with `hmac.compare_digest`; 401 otherwise.
- no token, `daemon.http` on loopback: open, as /v1/status always was (only who can log in to
  the machine can reach it; they can read the database anyway).
- no token, `daemon.http` beyond loopback: the page and its JSON (/, /slots, /v1/overview,
  /v1/slots) answer 403 with how to reach them through `ssh -L`; /v1/status answers as it did
  before the page existed (the start-up warning `http.exposed` says it is unauthenticated).
/healthz and /metrics are never gated: liveness probes and Prometheus scrapes carry no token.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware

COOKIE = "tpucared_token"
# Paths no token guards (see the module docstring).
OPEN_PATHS = frozenset({"/healthz", "/metrics"})
# What existed before the page: open without a token even beyond loopback.
LEGACY_PATHS = frozenset({"/v1/status"})


class TokenMissing(Exception):
    """`daemon.http_token_env` names a variable that is unset or empty."""


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


@dataclass(frozen=True)
class Gate:
    token: str | None  # never logged, never rendered
    exposed: bool  # daemon.http binds beyond loopback
    address: str  # host:port as configured, for the ssh -L hint

    @classmethod
    def from_config(cls, host: str, port: int, token_env: str | None) -> Gate:
        token = None
        if token_env is not None:
            token = os.environ.get(token_env, "")
            if not token:
                raise TokenMissing(f"daemon.http_token_env: ${token_env} is unset or empty")
        shown = f"[{host}]" if ":" in host else host
        return cls(token, not loopback(host), f"{shown}:{port}")

    def allows(self, request: web.Request) -> bool:
        assert self.token is not None
        offered = ""
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            offered = header.removeprefix("Bearer ").strip()
        elif COOKIE in request.cookies:
            offered = request.cookies[COOKIE]
        return hmac.compare_digest(offered.encode(), self.token.encode())

    def ssh_hint(self) -> str:
        port = self.address.rsplit(":", 1)[1]
        return (
            "The page is not served beyond loopback without a token. Either set "
            "daemon.http_token_env to the name of an environment variable holding a token, "
            f"or bind daemon.http to 127.0.0.1:{port} and reach it through SSH: "
            f"ssh -L {port}:127.0.0.1:{port} <daemon-host>, then open http://127.0.0.1:{port}/"
        )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def middleware(gate: Gate) -> Middleware:
    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path in OPEN_PATHS:
            return await handler(request)
        if gate.token is None:
            if gate.exposed and path not in LEGACY_PATHS:
                return web.Response(status=403, text=gate.ssh_hint() + "\n")
            return await handler(request)
        offered = request.query.get("token")
        if offered is not None and request.method == "GET" and not path.startswith("/v1/"):
            if not hmac.compare_digest(offered.encode(), gate.token.encode()):
                return _unauthorized()
            # The token leaves the URL: a cookie carries it from now on.
            rest = request.rel_url.with_query(
                {k: v for k, v in request.query.items() if k != "token"}
            )
            redirect = web.HTTPSeeOther(location=str(rest))
            redirect.set_cookie(COOKIE, gate.token, httponly=True, samesite="Strict", path="/")
            raise redirect
        if not gate.allows(request):
            return _unauthorized()
        return await handler(request)

    return check


def _unauthorized() -> web.Response:
    return web.Response(
        status=401,
        text="401: a token is needed (Authorization: Bearer <token>, or /?token=<token>)\n",
        headers={"WWW-Authenticate": 'Bearer realm="tpucared"'},
    )
