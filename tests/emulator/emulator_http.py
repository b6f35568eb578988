"""A tiny raw-HTTP helper for the emulator's tests: (status, JSON) per request, no client logic
in between, so assertions are about exactly what the emulator sent."""

from __future__ import annotations

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
