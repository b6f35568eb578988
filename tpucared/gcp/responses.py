"""The response schema at the client's edge: what an answer must look like to be read.

`TpuClient` hands every HTTP answer to `read_body` and every list page to `check_page`. Anything
without the documented shape becomes a classified `ApiError` (errors.py) carrying an excerpt of
what came back: MALFORMED for a 2xx we cannot use (not JSON, JSON nested past reason, not an
object, an empty body for a GET, a list page with fields a list does not have, such as an
error envelope sent with 200) and for any redirect (the API never redirects, and another
host is not the API); the usual classification for every other non-2xx. A malformed answer is
never read as "nothing there": an empty zone and an unreadable zone must not look alike.

A `PageMemo` (one per list the caller repeats, e.g. a zone's node list every poll) keeps the
last body of each page and what it parsed to: a page that comes back byte for byte as last
time is not parsed again, and the caller gets the very objects it got then. At 10,000 nodes in
a steady fleet, parsing 4 MB of unchanged pages was the largest part of a tick's own CPU.

Bodies are parsed by orjson: in a preemption storm every page changes at every poll, and the
standard library's parser took twice as long (about 6.6 against 3.4 ms a 1,000-node page,
docs/benchmarks.md). It is stricter, as the API's JSON is: NaN, Infinity and lone surrogates
are not JSON, so an answer carrying them is MALFORMED.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

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
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        # orjson stops at 1,024 levels, where the standard library would recurse and fail.
        why = "JSON nested too deep" if "depth limit" in str(exc) else "not JSON"
        raise malformed_response(status, text, method=method, url=url, why=why) from None
    if not isinstance(data, dict):
        raise malformed_response(status, text, method=method, url=url)
    return data


class PageMemo:
    """The last body of each page of one list (by position), and its parse. Whatever `read`
    returns is shared with the next identical answer: callers must not change it."""

    def __init__(self) -> None:
        self._pages: dict[int, tuple[str, JSON]] = {}
        self.reused = 0  # pages answered from the memo, ever (tests and diagnostics)

    def read(
        self,
        index: int,
        status: int,
        text: str,
        headers: Mapping[str, str],
        *,
        method: str,
        url: str,
    ) -> JSON:
        """`read_body` for the list's page `index`."""
        last = self._pages.get(index)
        if last is not None and 200 <= status < 300 and last[0] == text:
            self.reused += 1
            return last[1]
        data = read_body(status, text, headers, method=method, url=url)
        self._pages[index] = (text, data)
        return data

    def ended(self, pages: int) -> None:
        """The list ended after `pages` pages: pages past the end are forgotten."""
        for index in [i for i in self._pages if i >= pages]:
            del self._pages[index]


# The fields a list page may carry (List*Response in the v2 discovery document).
_PAGE_FIELDS = frozenset({"nextPageToken", "unreachable"})


def check_page(
    page: JSON,
    collection: str,
    *,
    method: str,
    url: str,
    fields: frozenset[str] = _PAGE_FIELDS,
) -> None:
    """A list page must have the documented shape: anything else (an error envelope sent
    with 200, a proxy's JSON, items that are not objects) is MALFORMED, never "no items".
    `fields`: what a page may carry besides `collection` (the TPU API's by default)."""
    unexpected = set(page) - fields - {collection}
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
