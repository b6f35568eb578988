"""A tiny raw-HTTP helper for the emulator's tests: (status, JSON) per request, no client logic
in between, so assertions are about exactly what the emulator sent."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp


class Http:
    def __init__(self, base: str, session: aiohttp.ClientSession) -> None:
        self.base = base
        self.session = session

    async def __call__(
        self, method: str, path: str, body: Any = None, **params: str
    ) -> tuple[int, Any]:
        async with self.session.request(
            method, self.base + path, json=body, params=params or None
        ) as response:
            return response.status, await response.json()

    async def ok(self, method: str, path: str, body: Any = None, **params: str) -> Any:
        """The JSON body of a request that must succeed."""
        status, payload = await self(method, path, body, **params)
        assert status == 200, payload
        return payload

    async def operation(self, op: dict[str, Any]) -> dict[str, Any]:
        """The TPU operation `op` as last seen, polled every 20 ms until done (2 s at most)."""
        for _ in range(100):
            op = await self.ok("GET", f"/v2/{op['name']}")
            if op.get("done"):
                break
            await asyncio.sleep(0.02)
        return op
