"""The `malformed` fault: an API that answers, but with nothing a client should act on.

Each mode is something a TPU API (or whatever stands between it and the client: a proxy, a
captive portal, a buggy release) has sent or could send. A client that acted on any of them
could delete healthy nodes: these answers are what its response schema must refuse.

    not_json        200 with an HTML page (a proxy's sign-in page).
    deep_json       200 with ~10 KB of JSON arrays and objects nested 2,500 deep: valid JSON,
                    but Python's json.loads raises RecursionError on it.
    error_envelope  200 carrying a Google error envelope, {"error": {"code": 503, ...}}.
    redirect        302 to another host (http://127.0.0.2:9, same path and query).
    labels_list     a node list, the real one, with every node's `labels` as ["k=v", ...].
    state           a node list, the real one, with every node's `state` replaced by the
                    fault's `value` (any JSON value: "SOMETHING_NEW", 99, true, {"x": 1}).
    duplicate       a node list, the real one, with its first node listed again as PREEMPTED.
                    These three apply to Compute Engine instance lists too (compute/), on
                    their `items`: `labels`, `status` (`value`), the first again TERMINATED.
    endless_pages   any list: its real first page, with a fresh random `nextPageToken` each
                    time, whatever page was asked for, forever.
    slow_headers    nothing at all for the fault's `delay_s` seconds (less if the client hangs
                    up first), then the real answer.

The list modes need the real answer, so the handler runs first and its JSON is rewritten; on
a request they do not fit (not a GET of a node list, or the handler failed) they leave it
alone and report that they did not apply, so the request log does not claim a fault.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tpucared_emulator import errors
from tpucared_emulator.compute.errors import ComputeError
from tpucared_emulator.faults import Fault

Run = Callable[[web.Request], Awaitable[web.StreamResponse]]

REDIRECT_HOST = "http://127.0.0.2:9"  # another host, where nothing listens
DEEP_JSON_PAIRS = 1250  # {"a":[ ... ]} pairs: 2,500 levels, 10,001 bytes
DEEP_JSON = '{"a":[' * DEEP_JSON_PAIRS + "0" + "]}" * DEEP_JSON_PAIRS
NOT_JSON = (
    "<!DOCTYPE html>\n<html><head><title>Sign in to continue</title></head>\n"
    "<body><h1>Network login required</h1><p>Your session has expired. "
    '<a href="/login">Sign in</a> to continue browsing.</p></body></html>\n'
)
_STALL_STEP_S = 0.05

_LIST = re.compile(
    r"/v2/projects/[^/]+/locations(/[^/]+/"
    r"(nodes|operations|queuedResources|acceleratorTypes|runtimeVersions))?"
)
_NODE_LIST = re.compile(r"/v2/projects/[^/]+/locations/[^/]+/nodes")
_COMPUTE_LIST = re.compile(r"/compute/v1/projects/[^/]+/zones/[^/]+/(instances|operations)")
_INSTANCE_LIST = re.compile(r"/compute/v1/projects/[^/]+/zones/[^/]+/instances")


def is_list(request: web.Request) -> bool:
    path = request.path
    listed = _LIST.fullmatch(path) or _COMPUTE_LIST.fullmatch(path)
    return request.method == "GET" and listed is not None


def is_node_list(request: web.Request) -> bool:
    """A TPU node list or a Compute Engine instance list."""
    path = request.path
    listed = _NODE_LIST.fullmatch(path) or _INSTANCE_LIST.fullmatch(path)
    return request.method == "GET" and listed is not None


async def respond(fault: Fault, request: web.Request, run: Run) -> tuple[web.StreamResponse, bool]:
    """The answer to `request` under a malformed `fault`, and whether the fault applied.
    `run(request)` is the real answer (the handler, behind the pipeline's error envelope)."""
    mode = fault.mode
    if mode == "not_json":
        return web.Response(text=NOT_JSON, content_type="text/html"), True
    if mode == "deep_json":
        return web.Response(text=DEEP_JSON, content_type="application/json"), True
    if mode == "error_envelope":
        unavailable = errors.unavailable()
        if request.path.startswith("/compute/"):
            unavailable = ComputeError(503, "backendError", unavailable.message)
        return web.json_response(unavailable.envelope(), status=200), True
    if mode == "redirect":
        location = REDIRECT_HOST + request.path_qs
        return web.Response(status=302, headers={"Location": location}), True
    if mode == "slow_headers":
        await _stall(request, fault.delay_s or 0.0)
        return await run(request), True
    if mode == "endless_pages":
        return await _endless(request, run)
    if mode in ("labels_list", "state", "duplicate") and is_node_list(request):
        return await _rewrite_nodes(fault, request, run)
    return await run(request), False


async def _stall(request: web.Request, seconds: float) -> None:
    """Send nothing for `seconds`; stop early once the client has gone (nothing to stall)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        await asyncio.sleep(min(_STALL_STEP_S, left))


def _json_of(response: web.StreamResponse) -> dict[str, Any] | None:
    """The JSON object of a successful handler answer, or None (an error, not JSON...)."""
    if response.status != 200 or not isinstance(response, web.Response):
        return None
    body = response.body
    if not isinstance(body, bytes | bytearray):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


async def _endless(request: web.Request, run: Run) -> tuple[web.StreamResponse, bool]:
    if not is_list(request):
        return await run(request), False
    query = {k: v for k, v in request.query.items() if k != "pageToken"}
    first = request.clone(rel_url=request.rel_url.with_query(query))
    response = await run(first)
    page = _json_of(response)
    if page is None:
        return response, False
    page["nextPageToken"] = uuid.uuid4().hex
    return web.json_response(page), True


async def _rewrite_nodes(
    fault: Fault, request: web.Request, run: Run
) -> tuple[web.StreamResponse, bool]:
    response = await run(request)
    page = _json_of(response)
    compute = request.path.startswith("/compute/")
    # Compute Engine: `items` whose `status` says what a TPU node's `state` says.
    key, state, dead = (
        ("items", "status", "TERMINATED") if compute else ("nodes", "state", "PREEMPTED")
    )
    nodes = page.get(key) if page is not None else None
    if page is None or not isinstance(nodes, list) or not nodes:
        return response, False
    if fault.mode == "labels_list":
        for node in nodes:
            labels = node.get("labels")
            if isinstance(labels, dict):
                node["labels"] = [f"{k}={v}" for k, v in labels.items()]
    elif fault.mode == "state":
        for node in nodes:
            node[state] = fault.value
    else:  # duplicate
        nodes.append({**nodes[0], state: dead})
    return web.json_response(page), True
