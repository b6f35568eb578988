"""`TpuClient`: the TPU v2 REST calls tpucared makes, over one aiohttp session.

Every request goes through `_call` -> `call_with_retry` -> `_send`, so each one:
- sends `Content-Type: application/json`, our User-Agent and the token source's
  Authorization header;
- answers a 401 by invalidating the token and trying once more with a fresh one;
- is retried with backoff for TRANSIENT / RATE_LIMITED / CONFLICT / MALFORMED failures
  (retry.py), each phase bounded (connect, every read including the headers, the total);
- never follows a redirect, and reads its answer through responses.py (the schema);
- fails only with a classified `ApiError` (errors.py), never an aiohttp exception;
- is counted in `request_counts[(call, status)]`, e.g. `("nodes.list", "200")`, with
  `"error"` as the status when no response came back; `on_request` sees each one too.

Methods return parsed JSON dicts (the API's camelCase shapes) or `Operation`s; turning them
into domain types is convert.py's job. The queuedResources.* calls live in queued.py, a mixin
over this request path. Every list follows `nextPageToken` to the end, within
`MAX_LIST_PAGES` and `list_deadline` (a list that does not end is MALFORMED), and a page that
reports unreachable locations fails the whole list (TRANSIENT): a partial list would make
present nodes look vanished.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import Any, overload

import aiohttp
import structlog

from tpucared import __version__
from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.auth import TokenSource
from tpucared.gcp.errors import (
    ApiError,
    OperationTimeout,
    classify_transport,
    malformed_response,
)
from tpucared.gcp.responses import PageMemo, check_page, read_body
from tpucared.gcp.retry import RetryPolicy, Rng, Sleep, call_with_retry
from tpucared.gcp.tpu import bodies, names
from tpucared.gcp.tpu.operation import Operation
from tpucared.gcp.tpu.queued import QueuedResourceCalls

JSON = dict[str, Any]
RequestHook = Callable[[str, str, float], None]  # (call, status, seconds)

DEFAULT_ENDPOINT = "https://tpu.googleapis.com"
USER_AGENT = f"tpucared/{__version__}"

log = structlog.get_logger(__name__)


# Bounds of one list (every page of it): see `_list`. At 1,000 items a page, 200 pages is
# 200,000 resources in one zone, far beyond any TPU zone.
MAX_LIST_PAGES = 200
LIST_DEADLINE_S = 120.0
# Bounds of one request's phases, inside its total (`timeout`).
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0


class TpuClient(QueuedResourceCalls):
    """Async client of tpu.googleapis.com/v2 (or the emulator at `endpoint`).

    Owns the token source (closed with the client) and, unless one is injected, the aiohttp
    session. Use as `async with TpuClient(...) as client:` or call `aclose()`.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
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

    async def __aenter__(self) -> TpuClient:
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

    def _url(self, resource: str, verb: str | None = None) -> str:
        """The only place a URL is built: `{endpoint}/v2/{resource}[:verb]`."""
        return f"{self.endpoint}/{names.API_VERSION}/{resource}" + (f":{verb}" if verb else "")

    async def _call(
        self,
        call: str,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        read: Callable[..., JSON] = read_body,
    ) -> JSON:
        """`read`: how the answer is read (`read_body`, or a list page's `PageMemo.read`)."""
        payload = json.dumps(body).encode() if body is not None else None
        return await call_with_retry(
            lambda: self._send(call, method, url, params, payload, read),
            policy=self._retry,
            sleep=self._sleep,
            rng=self._rng,
            what=call,
        )

    async def request(
        self, call: str, method: str, url: str, *, body: Mapping[str, Any] | None = None
    ) -> JSON:
        """One call to another Google API on the same path (auth, retries, classification,
        counting): the OS Login client (oslogin.py) uses it with its own absolute URLs."""
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
    ) -> JSON:
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
                    timeout=self._timeout,
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

    async def _operation(
        self,
        call: str,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Operation:
        data = await self._call(call, method, url, params=params, body=body)
        try:
            return Operation.from_json(data)
        except ValueError as exc:
            raise malformed_response(200, str(data), method=method, url=url, why=str(exc)) from exc

    async def _list(
        self,
        call: str,
        parent: str,
        collection: str,
        *,
        page_size: int | None,
        fields: str | None = None,
        memo: PageMemo | None = None,
    ) -> list[JSON]:
        url = self._url(f"{parent}/{collection}")
        items: list[JSON] = []
        seen: set[str] = set()
        token: str | None = None
        deadline = self._clock() + self._list_deadline
        while True:
            if len(seen) >= MAX_LIST_PAGES or self._clock() > deadline:
                # A server handing out fresh page tokens forever once cost 126,212 requests
                # in 40 s and 600 MiB: a list that does not end is a failed list.
                raise malformed_response(
                    200,
                    f"{len(seen)} pages fetched, {len(items)} items",
                    method="GET",
                    url=url,
                    why=f"the list did not end within {MAX_LIST_PAGES} pages / "
                    f"{self._list_deadline:.0f} s",
                )
            params: dict[str, str] = {}
            if page_size is not None:
                params["pageSize"] = str(page_size)
            if fields is not None:
                params["fields"] = fields
            if token:
                params["pageToken"] = token
            read = read_body if memo is None else partial(memo.read, len(seen))
            page = await self._call(call, "GET", url, params=params, read=read)
            check_page(page, collection, method="GET", url=url)
            unreachable = page.get("unreachable")
            if unreachable:
                raise ApiError.of(
                    ErrorKind.TRANSIENT,
                    f"the list is incomplete: unreachable {unreachable}",
                    method="GET",
                    url=url,
                )
            items.extend(page.get(collection, []))
            token = page.get("nextPageToken") or None
            if token is None:
                if memo is not None:
                    memo.ended(len(seen) + 1)
                return items
            if token in seen:
                # A server that hands out the same token again would keep us here forever.
                raise malformed_response(
                    200, token, method="GET", url=url, why="repeated nextPageToken"
                )
            seen.add(token)

    # -- nodes ----------------------------------------------------------------------------------

    async def list_nodes(
        self,
        project: str,
        zone: str,
        *,
        page_size: int | None = None,
        fields: str | None = None,
        memo: PageMemo | None = None,
    ) -> list[JSON]:
        """Every node of the zone, across all pages. `fields`: a partial response (the system
        parameter), e.g. "nextPageToken,unreachable,nodes(name,state)"; a selection must keep
        `nextPageToken` and `unreachable`, which the paging relies on. `memo`: this list's
        pages as last read (responses.py); the nodes of a page unchanged since are the very
        objects returned then, and must not be changed."""
        return await self._list(
            "nodes.list",
            names.location(project, zone),
            "nodes",
            page_size=page_size,
            fields=fields,
            memo=memo,
        )

    @overload
    async def get_node(self, name: str, /) -> JSON: ...
    @overload
    async def get_node(self, project: str, zone: str, node_id: str, /) -> JSON: ...
    async def get_node(self, *parts: str) -> JSON:
        name = names.resolve(parts, names.node_name)
        return await self._call("nodes.get", "GET", self._url(name))

    async def create_node(
        self, project: str, zone: str, node_id: str, shape: bodies.NodeShape
    ) -> Operation:
        """Start creating a node; wait on the returned Operation for capacity errors."""
        if shape.capacity is None:
            raise ValueError("nodes.create needs a capacity tier (spot, on-demand, ...)")
        url = self._url(f"{names.location(project, zone)}/nodes")
        return await self._operation(
            "nodes.create", "POST", url, params={"nodeId": node_id}, body=bodies.node_body(shape)
        )

    @overload
    async def delete_node(self, name: str, /) -> Operation: ...
    @overload
    async def delete_node(self, project: str, zone: str, node_id: str, /) -> Operation: ...
    async def delete_node(self, *parts: str) -> Operation:
        """Start deleting a node. NOT_FOUND means it is already gone (callers treat as done)."""
        name = names.resolve(parts, names.node_name)
        return await self._operation("nodes.delete", "DELETE", self._url(name))

    async def patch_node(
        self, name: str, body: Mapping[str, Any], update_mask: Sequence[str]
    ) -> Operation:
        """Update the fields named in `update_mask` (e.g. ["metadata"] to add ssh-keys)."""
        if not update_mask:
            raise ValueError("update_mask must name at least one field")
        return await self._operation(
            "nodes.patch",
            "PATCH",
            self._url(name),
            params={"updateMask": ",".join(update_mask)},
            body=body,
        )

    async def get_guest_attributes(
        self,
        name: str,
        query_path: str | None = None,
        worker_ids: Sequence[str | int] | None = None,
    ) -> JSON:
        """Guest attributes of the node's workers, e.g. query_path="hostkeys/" for host keys."""
        body: JSON = {}
        if query_path is not None:
            body["queryPath"] = query_path
        if worker_ids:
            body["workerIds"] = [str(w) for w in worker_ids]
        return await self._call(
            "nodes.getGuestAttributes", "POST", self._url(name, "getGuestAttributes"), body=body
        )

    # -- operations -----------------------------------------------------------------------------

    async def get_operation(self, name: str) -> Operation:
        return await self._operation("operations.get", "GET", self._url(name))

    async def wait_operation(
        self,
        operation: Operation | str,
        *,
        poll_interval: float = 1.0,
        # Not asyncio.timeout: that would cut a poll mid-request, and the deadline must
        # follow the injected clock in tests.
        timeout: float = 900.0,  # noqa: ASYNC109
        sleep: Sleep | None = None,
    ) -> Operation:
        """Poll until done. Raises the operation's classified ApiError if it failed (e.g.
        CAPACITY for a stockout), or OperationTimeout if still running after `timeout` s."""
        pause = sleep if sleep is not None else self._sleep
        current = operation if isinstance(operation, Operation) else None
        if current is None:
            current = await self.get_operation(str(operation))
        deadline = self._clock() + timeout
        while not current.done:
            if self._clock() >= deadline:
                raise OperationTimeout(f"still running after {timeout:g}s", operation=current.name)
            await pause(poll_interval)
            current = await self.get_operation(current.name)
        error = current.exception()
        if error is not None:
            raise error
        return current

    # -- catalogue ------------------------------------------------------------------------------

    async def list_accelerator_types(
        self, project: str, zone: str, *, page_size: int | None = None
    ) -> list[JSON]:
        return await self._list(
            "acceleratorTypes.list",
            names.location(project, zone),
            "acceleratorTypes",
            page_size=page_size,
        )

    async def list_runtime_versions(
        self, project: str, zone: str, *, page_size: int | None = None
    ) -> list[JSON]:
        return await self._list(
            "runtimeVersions.list",
            names.location(project, zone),
            "runtimeVersions",
            page_size=page_size,
        )
