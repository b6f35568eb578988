"""`RestClient`: the one request path every Google REST client of tpucared goes through.

`TpuClient` (tpu/client.py) and `ComputeClient` (compute/client.py) are subclasses: each adds
its own URLs, calls and list shape, and shares everything here. Every request goes through
`_call` -> `call_with_retry` -> `_send`, so each one:
- sends `Content-Type: application/json`, our User-Agent and the token source's
  Authorization header;
- answers a 401 by invalidating the token and trying once more with a fresh one;
- is retried with backoff for TRANSIENT / RATE_LIMITED / CONFLICT / MALFORMED failures
  (retry.py), each phase bounded (connect, every read including the headers, the total);
- never follows a redirect, and reads its answer through responses.py (the schema);
- fails only with a classified `ApiError` (errors.py), never an aiohttp exception;
- is counted in `request_counts[(call, status)]`, e.g. `("nodes.list", "200")`, with
  `"error"` as the status when no response came back; `on_request` sees each one too.

`_pages` is the paging loop both APIs' lists share: it follows the page token to the end,
within `MAX_LIST_PAGES` (or the fewer pages `LIST_BOUNDS` allows: ten times the zone's last
good list's and ten, ports/cloud.py) and `list_deadline` (a list that does not end is
MALFORMED), and refuses a repeated token; what a page must look like is the caller's `accept`.
Under `LIST_BOUNDS` with `retry` off (a failing zone's probe) its requests are not retried,
and the pages a list took are written back into it.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from functools import partial
from types import TracebackType
from typing import Any, ClassVar, Self

import aiohttp
import structlog

from tpucared import __version__
from tpucared.gcp.auth import TokenSource
from tpucared.gcp.errors import classify_transport, malformed_response
from tpucared.gcp.responses import PageMemo, read_body
from tpucared.gcp.retry import RetryPolicy, Rng, Sleep, call_with_retry
from tpucared.ports.cloud import LIST_BOUNDS

JSON = dict[str, Any]
RequestHook = Callable[[str, str, float], None]  # (call, status, seconds)

USER_AGENT = f"tpucared/{__version__}"

log = structlog.get_logger(__name__)

# Bounds of one list (every page of it): see `_pages`. At 1,000 items a page, 200 pages is
# 200,000 resources in one zone, far beyond any TPU zone.
MAX_LIST_PAGES = 200
LIST_DEADLINE_S = 120.0
# Bounds of one request's phases, inside its total (`timeout`).
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0


class RestClient:
    """An async client of one Google REST API (or an emulator of it at `endpoint`; None:
    the subclass's `default_endpoint`, Google's).

    Owns the token source (closed with the client) and, unless one is injected, the aiohttp
    session. Use as `async with Client(...) as client:` or call `aclose()`.
    """

    default_endpoint: ClassVar[str]  # Google's, for a subclass's API

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        token_source: TokenSource,
        retry: RetryPolicy | None = None,
        timeout: float = 60.0,  # the API's own per-call deadline (grpc service config)
        list_deadline: float = LIST_DEADLINE_S,
        session: aiohttp.ClientSession | None = None,
        user_agent: str = USER_AGENT,
        sleep: Sleep = asyncio.sleep,
        rng: Rng = random.random,
        clock: Callable[[], float] = time.monotonic,
        on_request: RequestHook | None = None,
    ) -> None:
        if endpoint is None:
            endpoint = self.default_endpoint
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"endpoint {endpoint!r} must start with http:// or https://")
        self.endpoint = endpoint.rstrip("/")
        self._tokens = token_source
        self._retry = retry if retry is not None else RetryPolicy()
        # Per request: connecting, and each wait for bytes (the headers included), are bounded
        # well inside the total, so a server that trickles or stalls cannot hold a tick.
        self._timeout = aiohttp.ClientTimeout(
            total=timeout,
            connect=min(CONNECT_TIMEOUT_S, timeout),
            sock_read=min(READ_TIMEOUT_S, timeout),
        )
        self._list_deadline = list_deadline
        self._session = session
        self._owns_session = session is None
        self._user_agent = user_agent
        self._sleep = sleep
        self._rng = rng
        self._clock = clock
        self._on_request = on_request
        self.request_counts: Counter[tuple[str, str]] = Counter()

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_session and self._session is not None and not self._session.closed:
            await self._session.close()
        await self._tokens.aclose()

    def _get_session(self) -> aiohttp.ClientSession:
        # Created lazily: an aiohttp session belongs to the running loop.
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    # -- the one request path -------------------------------------------------------------------

    async def _call(
        self,
        call: str,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        read: Callable[..., JSON] = read_body,
        hold: float | None = None,
    ) -> JSON:
        """`read`: how the answer is read (`read_body`, or a list page's `PageMemo.read`).
        Every attempt sends the same `params` and `body` (a create's requestId included).
        `hold`: a request the server answers only after up to this many seconds (a long
        wait, zoneOperations.wait): its total and its read bounds are that long instead of
        the client's own, which would cut it."""
        payload = json.dumps(body).encode() if body is not None else None
        bounds = None
        if hold is not None:
            bounds = aiohttp.ClientTimeout(
                total=hold, connect=min(CONNECT_TIMEOUT_S, hold), sock_read=hold
            )
        return await call_with_retry(
            lambda: self._send(call, method, url, params, payload, read, bounds),
            policy=self._retry,
            sleep=self._sleep,
            rng=self._rng,
            what=call,
        )

    async def request(
        self, call: str, method: str, url: str, *, body: Mapping[str, Any] | None = None
    ) -> JSON:
        """One call to another Google API on the same path (auth, retries, classification,
        counting): the OS Login client (tpu/oslogin.py) uses it with its own absolute URLs."""
        return await self._call(call, method, url, body=body)

    def _record(self, call: str, status: str, started: float) -> None:
        self.request_counts[(call, status)] += 1
        seconds = self._clock() - started
        log.debug("api.request", call=call, status=status, seconds=round(seconds, 4))
        if self._on_request is not None:
            self._on_request(call, status, seconds)

    async def _send(
        self,
        call: str,
        method: str,
        url: str,
        params: Mapping[str, str] | None,
        payload: bytes | None,
        read: Callable[..., JSON] = read_body,
        bounds: aiohttp.ClientTimeout | None = None,
    ) -> JSON:
        """One request (and its one refresh after a 401); `bounds`: its phases' bounds when
        not the client's own."""
        session = self._get_session()
        for round_ in (1, 2):
            authorization = await self._tokens.authorization()
            headers = {"Content-Type": "application/json", "User-Agent": self._user_agent}
            if authorization is not None:
                headers["Authorization"] = authorization
            started = self._clock()
            try:
                async with session.request(
                    method,
                    url,
                    params=params,
                    data=payload,
                    headers=headers,
                    timeout=bounds or self._timeout,
                    allow_redirects=False,  # the API never redirects; another host is not it
                ) as response:
                    status = response.status
                    raw = await response.read()
                    response_headers = response.headers
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                self._record(call, "error", started)
                raise classify_transport(exc, method=method, url=url) from exc
            self._record(call, str(status), started)
            text = raw.decode("utf-8", errors="replace")
            if status == 401 and round_ == 1 and authorization is not None:
                # Tokens can be revoked or expire early: refresh once before calling it a
                # permission problem. This is not a retry and costs no attempt.
                log.info("api.token_refresh", call=call)
                await self._tokens.invalidate(authorization)
                continue
            return read(status, text, response_headers, method=method, url=url)
        raise AssertionError("unreachable: the second round always returns or raises")

    async def _pages(
        self,
        call: str,
        url: str,
        params: Mapping[str, str],
        accept: Callable[[JSON], list[JSON]],
        *,
        memo: PageMemo | None = None,
    ) -> list[JSON]:
        """Every item of a list, page after page (`pageToken` / `nextPageToken`, which every
        Google API spells alike). `params`: each page's query besides the token; `accept`:
        checks one page (raising a classified ApiError) and returns its items. `memo`: this
        list's pages as last read (responses.py)."""
        items: list[JSON] = []
        seen: set[str] = set()
        token: str | None = None
        bounds = LIST_BOUNDS.get()
        most = MAX_LIST_PAGES
        if bounds is not None and bounds.pages is not None:
            most = min(most, bounds.pages)
        retry = bounds is None or bounds.retry
        deadline = self._clock() + self._list_deadline
        while True:
            if len(seen) >= most or self._clock() > deadline:
                # A server handing out fresh page tokens forever once cost 126,212 requests
                # in 40 s and 600 MiB: a list that does not end is a failed list.
                raise malformed_response(
                    200,
                    f"{len(seen)} pages fetched, {len(items)} items",
                    method="GET",
                    url=url,
                    why=f"the list did not end within {most} pages / {self._list_deadline:.0f} s",
                )
            query = dict(params)
            if token:
                query["pageToken"] = token
            read = read_body if memo is None else partial(memo.read, len(seen))
            if retry:
                page = await self._call(call, "GET", url, params=query, read=read)
            else:  # a probe: its next one is the retry
                page = await self._send(call, "GET", url, query, None, read)
            items.extend(accept(page))
            token = page.get("nextPageToken") or None
            if token is None:
                if memo is not None:
                    memo.ended(len(seen) + 1)
                if bounds is not None:
                    bounds.longest = max(bounds.longest, len(seen) + 1)
                return items
            if token in seen:
                # A server that hands out the same token again would keep us here forever.
                raise malformed_response(
                    200, token, method="GET", url=url, why="repeated nextPageToken"
                )
            seen.add(token)
