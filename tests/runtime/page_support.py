"""Everything the page (tpucared/runtime/page/) shows of a store, as one text: its HTML pages and
JSON documents read over its real HTTP server, for the secrets scans of the runtime tests."""

from __future__ import annotations

from datetime import UTC, datetime

import aiohttp

from tpucared.core.ledger.cost import Prices
from tpucared.runtime.page import Gate, Page
from tpucared.runtime.telemetry.metrics import DaemonMetrics
from tpucared.runtime.telemetry.server import Health, start_http, store_status
from tpucared.store import Store


async def page_texts(store: Store, fleet: str, slots: int) -> str:
    status = store_status(store)
    page = Page(store, status, lambda: datetime.now(UTC), "fleet.toml", Prices())
    server = await start_http(
        "127.0.0.1", 0, health=Health(30.0), metrics=DaemonMetrics(), status=status,
        page=page, gate=Gate(None, False, "127.0.0.1:0"),
    )  # fmt: skip
    paths = ["/", "/slots", "/v1/overview", "/v1/slots", "/v1/status"]
    for slot in range(slots):
        paths += [f"/slots/{fleet}/{slot}?range=week", f"/v1/slots/{fleet}/{slot}?range=week"]
    texts = []
    try:
        async with aiohttp.ClientSession() as session:
            for path in paths:
                async with session.get(server.url + path) as response:
                    assert response.status == 200, path
                    texts.append(await response.text())
    finally:
        await page.stop()
        await server.stop()
    return "\n".join(texts)
