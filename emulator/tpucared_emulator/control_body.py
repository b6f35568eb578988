"""The one reader of a control call's JSON body (control.py, compute/control.py, preflight.py):
an object, `{}` when empty, INVALID_ARGUMENT (400) otherwise."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tpucared_emulator import errors


async def json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.text() or "{}")
    except ValueError:
        raise errors.invalid_argument("the body must be JSON") from None
    if not isinstance(body, dict):
        raise errors.invalid_argument("the body must be a JSON object")
    return body
