"""The page's routes (runtime/page/): HTML from Jinja2 templates (autoescaped: a node label or an
event text with HTML in it shows as text) and the JSON they are built from, on the daemon's
HTTP server (runtime/telemetry/server.py). Read-only: every route is a GET, every read a
`Store.read()` transaction.

    /                       overview            /v1/overview
    /slots?fleet=&state=&zone=&lost_min=&sort=&desc=&offset=&limit=     /v1/slots?...
    /slots/{fleet}/{slot}?range=day|week        /v1/slots/{fleet}/{slot}?range=...
    /static/{name}          page.js, page.css (shipped in the wheel: nothing from the internet)
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from tpucared.core.ledger.categories import CATEGORIES
from tpucared.core.ledger.cost import Prices
from tpucared.core.model.records import NodePhase
from tpucared.inspect.ledger import ledgers
from tpucared.runtime.page.documents import overview_document, slot_document, slots_document
from tpucared.runtime.page.ledger_cache import LedgerCache
from tpucared.store import Store
from tpucared.store.page_reads import NO_NODE, SORTS, SlotFilter

StatusSource = Callable[[], Awaitable[dict[str, Any]]]
DEFAULT_LIMIT = 50
OVERVIEW_MIN_S = 5.0
MAX_LIMIT = 500
RANGES = {"day": timedelta(days=1), "week": timedelta(days=7)}
STATES = (*(p.value for p in NodePhase), NO_NODE)
STATIC = {"page.js": "text/javascript", "page.css": "text/css", "favicon.svg": "image/svg+xml"}
# Served with every page: nothing but our own origin, no inline script, no framing.
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("tpucared.runtime.page", "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
    )


class BadQuery(ValueError):
    pass


def slot_filter(query: Mapping[str, str]) -> tuple[SlotFilter, float | None, int, int]:
    """(filter, lost minutes, offset, limit) from a query string; BadQuery says what is wrong."""

    def text(name: str) -> str | None:
        value = query.get(name, "").strip()
        return value or None

    state, sort = text("state"), text("sort") or "slot"
    if state is not None and state not in STATES:
        raise BadQuery(f"state: expected one of {', '.join(STATES)}")
    if sort not in SORTS:
        raise BadQuery(f"sort: expected one of {', '.join(SORTS)}")
    try:
        lost = float(query["lost_min"]) if text("lost_min") else None
        offset = max(0, int(query.get("offset") or 0))
        limit = min(MAX_LIMIT, max(1, int(query.get("limit") or DEFAULT_LIMIT)))
    except ValueError as exc:
        raise BadQuery(f"lost_min, offset, limit: expected numbers ({exc})") from exc
    f = SlotFilter(text("fleet"), state, text("zone"), sort, query.get("desc") in ("1", "true"))
    return f, lost, offset, limit


@dataclass
class Page:
    store: Store
    status: StatusSource
    clock: Callable[[], datetime]
    config_path: str
    prices: Prices

    def __post_init__(self) -> None:
        self.env = templates()
        self.ledger = LedgerCache(self.store, self.prices, self.clock)
        self._overview_lock = asyncio.Lock()
        # (when read, seconds the read took, the /v1/status document)
        self._status_cache: tuple[float, float, dict[str, Any] | None] = (0.0, 0.0, None)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/", self._overview_html)
        app.router.add_get("/slots", self._slots_html)
        app.router.add_get("/slots/{fleet}/{slot:\\d+}", self._slot_html)
        app.router.add_get("/v1/overview", self._json(self.overview))
        app.router.add_get("/v1/slots", self._json(self.slots))
        app.router.add_get("/v1/slots/{fleet}/{slot:\\d+}", self._json(self.slot))
        app.router.add_get("/static/{name}", self._static)

    async def stop(self) -> None:
        await self.ledger.stop()

    # -- documents ------------------------------------------------------------------------

    async def overview(self, _request: web.Request) -> dict[str, Any]:
        """The /v1/status read is seconds at 10,000 slots: its document is reused while younger
        than ten times what it took to build (5 s at least), however many tabs poll."""
        async with self._overview_lock:
            at, took, status = self._status_cache
            if status is None or time.monotonic() - at > max(OVERVIEW_MIN_S, 10 * took):
                started = time.monotonic()
                status = await self.status()
                took = time.monotonic() - started
                self._status_cache = (time.monotonic(), took, status)
        return overview_document(status, self.ledger.wanted())

    async def slots(self, request: web.Request) -> dict[str, Any]:
        f, lost, offset, limit = slot_filter(request.query)
        today = self.ledger.wanted()
        async with self.store.read() as r:
            keys = await r.page_slot_keys(f)
            if lost is not None:
                days = today.slots if today is not None else {}
                keys = [k for k in keys if (d := days.get(k[:2])) and d.lost_s > lost * 60]
            rows = await r.page_slot_rows(keys[offset : offset + limit])
        query = {k: v for k, v in request.query.items() if k not in ("offset", "token")}
        return slots_document(
            rows, total=len(keys), offset=offset, limit=limit, query=query,
            now=self.clock(), today=today,
        )  # fmt: skip

    async def slot(self, request: web.Request) -> dict[str, Any]:
        fleet, index = request.match_info["fleet"], int(request.match_info["slot"])
        span = RANGES.get(request.query.get("range", "day"))
        if span is None:
            raise BadQuery("range: expected day or week")
        now = self.clock()
        since = now - span
        async with self.store.read() as r:
            keys = [k for k in await r.page_slot_keys(SlotFilter(fleet)) if k[1] == index]
            rows = await r.page_slot_rows(keys)
            if not rows:
                raise web.HTTPNotFound(text=f"no slot {fleet}/{index}\n")
            incarnations = await r.incarnations(fleet, index, limit=20)
            attempts = await r.workload_attempts(fleet, index, limit=20)
            events = [e for e in await r.events(limit=400, fleet=fleet) if e.slot == index]
            records = await r.ledger(fleet, index, since)
        return slot_document(
            rows[0], incarnations=incarnations, attempts=attempts, events=events[-30:][::-1],
            ledger=ledgers(records, self.prices, now, since), since=since, now=now,
            config_path=shlex.quote(self.config_path), today=self.ledger.wanted(),
        )  # fmt: skip

    # -- handlers -------------------------------------------------------------------------

    def _json(
        self, build: Callable[[web.Request], Awaitable[dict[str, Any]]]
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                doc = await build(request)
            except BadQuery as exc:
                return web.json_response({"error": str(exc)}, status=400, headers=HEADERS)
            return web.json_response(doc, headers=HEADERS)

        return handle

    def _html(self, name: str, **values: Any) -> web.Response:
        values.setdefault("poll_ms", 2000)
        text = self.env.get_template(name).render(categories=CATEGORIES, **values)
        return web.Response(text=text, content_type="text/html", headers=HEADERS)

    async def _overview_html(self, request: web.Request) -> web.StreamResponse:
        doc = await self.overview(request)
        return self._html("overview.html", doc=doc, poll="/v1/overview", poll_ms=5000)

    async def _slots_html(self, request: web.Request) -> web.StreamResponse:
        try:
            doc = await self.slots(request)
        except BadQuery as exc:
            return web.Response(status=400, text=f"{exc}\n", headers=HEADERS)
        query = {k: v for k, v in request.query.items() if k != "token"}
        return self._html(
            "slots.html", doc=doc, query=query, states=STATES, sorts=SORTS,
            poll="/v1/slots?" + urlencode(query), pages=_pages(doc, query),
        )  # fmt: skip

    async def _slot_html(self, request: web.Request) -> web.StreamResponse:
        try:
            doc = await self.slot(request)
        except BadQuery as exc:
            return web.Response(status=400, text=f"{exc}\n", headers=HEADERS)
        path = f"/v1/slots/{request.match_info['fleet']}/{request.match_info['slot']}"
        span = request.query.get("range", "day")
        return self._html("slot.html", doc=doc, span=span, poll=f"{path}?range={span}")

    async def _static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        body = resources.files("tpucared.runtime.page").joinpath("static", name).read_bytes()
        return web.Response(body=body, content_type=STATIC[name], headers=HEADERS)


def _pages(doc: Mapping[str, Any], query: Mapping[str, str]) -> dict[str, str | None]:
    """Links to the previous and next page of the table, the filter kept."""
    offset, limit, total = doc["offset"], doc["limit"], doc["total"]

    def link(at: int) -> str:
        return "/slots?" + urlencode({**query, "offset": str(at)})

    return {
        "prev": link(max(0, offset - limit)) if offset > 0 else None,
        "next": link(offset + limit) if offset + limit < total else None,
    }
