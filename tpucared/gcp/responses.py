"""The response schema at the client's edge: what an answer must look like to be read.

`TpuClient` hands every HTTP answer to `read_body` and every list page to `check_page`. Anything
without the documented shape becomes a classified `ApiError` (errors.py) carrying an excerpt of
what came back: MALFORMED for a 2xx we cannot use (not JSON, JSON nested past reason, not an
object, an empty body for a GET, a list page with fields a list does not have, such as an
error envelope sent with 200) and for any redirect (the API never redirects, and another
host is not the API); the usual classification for every other non-2xx. A malformed answer is
never read as "nothing there": an empty zone and an unreadable zone must not look alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tpucared.gcp.errors import classify_http, malformed_response

JSON = dict[str, Any]


def read_body(status: int, text: str, headers: Mapping[str, str], *, method: str, url: str) -> JSON:
    """The JSON object of a 2xx answer, or the classified error of any other."""
    if 300 <= status < 400:
        where = headers.get("Location", "nowhere")
        raise malformed_response(
            status, text, method=method, url=url, why=f"HTTP {status} redirect to {where}"
        )
    if not 200 <= status < 300:
        raise classify_http(status, text, headers, method=method, url=url)
    if not text.strip():
        if method == "GET":  # a resource or a list page is never empty, `{}` at least
            raise malformed_response(status, text, method=method, url=url, why="empty")
        return {}  # e.g. an Empty response
    try:
        data = json.loads(text)
    except ValueError:
        raise malformed_response(status, text, method=method, url=url, why="not JSON") from None
    except RecursionError:
        raise malformed_response(
            status, text, method=method, url=url, why="JSON nested too deep"
        ) from None
    if not isinstance(data, dict):
        raise malformed_response(status, text, method=method, url=url)
    return data


# The fields a list page may carry (List*Response in the v2 discovery document).
_PAGE_FIELDS = frozenset({"nextPageToken", "unreachable"})


def check_page(page: JSON, collection: str, *, method: str, url: str) -> None:
    """A list page must have the documented shape: anything else (an error envelope sent
    with 200, a proxy's JSON, items that are not objects) is MALFORMED, never "no items"."""
    unexpected = set(page) - _PAGE_FIELDS - {collection}
    batch = page.get(collection, [])
    token = page.get("nextPageToken")
    unreachable = page.get("unreachable", [])
    why = None
    if unexpected:
        why = f"unexpected fields {sorted(unexpected)[:5]}"
    elif not isinstance(batch, list) or not all(isinstance(i, dict) for i in batch):
        why = f"{collection} is not a list of objects"
    elif token is not None and not isinstance(token, str):
        why = "nextPageToken is not a string"
    elif not isinstance(unreachable, list):
        why = "unreachable is not a list"
    if why is not None:
        raise malformed_response(200, _excerpt(page), method=method, url=url, why=why)


def _excerpt(value: object) -> str:
    try:
        return json.dumps(value)[:200]
    except (ValueError, RecursionError):
        return "(unprintable)"
